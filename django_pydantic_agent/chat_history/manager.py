"""Run AG-UI agents in tasks the server owns, so a run outlives the request that started it.

`StreamPersistenceManager` builds one agent per run (normally an `AGUIStorageAgent`) inside a
producer task it owns, and records every event the agent yields in an ordered, sequence-numbered
in-memory log held by the run's `RunHandle`. Clients read that log; they never drive the agent.
So a reader that stops (a disconnect, ``aclose()``, a cancelled request task) stops only itself,
several readers can follow one run, and a reader can resume after any sequence number.

A reader's stream ends as soon as the run's terminal event (``RUN_FINISHED`` / ``RUN_ERROR``) is
logged; the producer keeps going until the agent's own stream has ended, which for the storage
agent means its final flush and finalization. `RunHandle.wait` waits for that.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import aclosing, suppress
from typing import (
    Any,
    ClassVar,
    Final,
    Generic,
    Literal,
    NamedTuple,
    ParamSpec,
    Protocol,
    TypeAlias,
    overload,
)

from ag_ui.core import (
    BaseEvent,
    EventType,
    ReasoningMessageContentEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
)

from django_pydantic_agent.chat_history.errors import ChatHistoryError, ErrorCodes, RunFencedError
from django_pydantic_agent.chat_history.storage_agent import CRASH_TEXT, INCOMPLETE_STREAM_TEXT

logger = logging.getLogger(__name__)

_P = ParamSpec("_P")
_RunKey: TypeAlias = tuple[str | None, str, str]  # (owner, thread_id, run_id)

RunStatus: TypeAlias = Literal["running", "complete", "interrupt", "interrupted", "errored"]
CancelEvent: TypeAlias = Literal["auto", "run_finished", "run_error"]

CANCELLED_MESSAGE = "The run was cancelled."
CANCELLED_CODE = "CANCELLED"

#: Each time a run is resumed on another worker it starts a new epoch, whose events are numbered
#: from ``epoch * EPOCH_STRIDE + 1`` on: no number a worker sent before the resume names an event
#: after it, so a reader can tell which execution of the run an id came from (``epoch_of``).
#: No run logs a billion events in one epoch (a month at 400 events per second).
EPOCH_STRIDE: Final[int] = 1_000_000_000


def epoch_of(seq: int) -> int:
    """The epoch whose numbering ``seq`` belongs to (``0`` before any resume, and for ``0``)."""
    return seq // EPOCH_STRIDE


def epoch_base(epoch: int) -> int:
    """The number before the first event of ``epoch`` (``0`` for the first execution)."""
    return epoch * EPOCH_STRIDE


#: The types of the events that end a run (``RUN_FINISHED``, ``RUN_ERROR``).
TERMINAL_EVENT_TYPES: Final = frozenset({EventType.RUN_FINISHED, EventType.RUN_ERROR})
# A member read through its class (``EventType.X``) costs a descriptor call: the per-event
# paths compare with these instead.
_RUN_STARTED: Final = EventType.RUN_STARTED
#: A reader catching up lets the loop turn after this many events without a wait (asyncio
#: logs a warning from the sixth write to a socket its peer closed).
_CATCH_UP_BURST = 4
#: The most events `RunHandle.sequenced_batches` hands out in one batch by default.
CATCH_UP_BATCH = 64


#: The newest events of a run's log are kept as the agent yielded them; older deltas are
#: compacted (`RunHandle`), every ``_HOT_EVENTS`` events. A live reader is a batch behind the
#: producer (a few events), so it seldom rebuilds one; with 256, twice as many young
#: collections ran per long run, and the models they promoted brought on full ones.
_HOT_EVENTS = 64
# The deltas a log compacts, by code: the event class and the field naming what it extends.
_DELTA_KINDS: tuple[tuple[type[BaseEvent], str], ...] = (
    (TextMessageContentEvent, "message_id"),
    (ToolCallArgsEvent, "tool_call_id"),
    (ReasoningMessageContentEvent, "message_id"),
)
_DELTA_CODES: dict[type[BaseEvent], tuple[int, frozenset[str], frozenset[str]]] = {
    kind: (code, frozenset({field, "delta"}), frozenset({field, "delta", "timestamp"}))
    for code, (kind, field) in enumerate(_DELTA_KINDS)
}
# A compacted delta: (code, id, delta, timestamp or None when unset), a tuple of atoms, which
# the collector stops tracking.
_Compact: TypeAlias = tuple[int, str, str, int | None]


def _compacted(event: BaseEvent | _Compact) -> BaseEvent | _Compact:
    """``event`` as a compact tuple when that loses nothing (a delta that sets only its id,
    its text and perhaps its timestamp), else ``event`` itself."""
    found = _DELTA_CODES.get(type(event))  # type: ignore[arg-type]
    if found is None:
        return event
    assert isinstance(event, BaseEvent)
    code, bare, stamped = found
    values, fields = event.__dict__, event.__pydantic_fields_set__
    timestamp = values["timestamp"]
    if event.__pydantic_extra__ or not (
        fields == bare or (fields == stamped and type(timestamp) is int)
    ):
        return event
    return (code, values[_DELTA_KINDS[code][1]], values["delta"], timestamp)


def _delta_values(entry: _Compact) -> tuple[type[BaseEvent], dict[str, Any]]:
    code, ident, delta, timestamp = entry
    kind, field = _DELTA_KINDS[code]
    values: dict[str, Any] = {field: ident, "delta": delta}
    if timestamp is not None:
        values["timestamp"] = timestamp
    return kind, values


def _expanded(entry: BaseEvent | _Compact) -> BaseEvent:
    """The event of a log entry (a compacted delta is built again, equal to the original)."""
    if type(entry) is not tuple:
        return entry  # type: ignore[return-value]
    kind, values = _delta_values(entry)
    return kind(**values)


def _event_values(entry: BaseEvent | _Compact) -> tuple[type[BaseEvent], dict[str, Any]]:
    """A log entry's event class and field values, extra keys included, without building an
    event: what a relay serialises, and ``cls.model_construct(**values)`` rebuilds."""
    if type(entry) is tuple:
        return _delta_values(entry)
    assert isinstance(entry, BaseEvent)
    extra = entry.__pydantic_extra__
    # A logged event is never changed again, so its __dict__ needs no copy.
    return type(entry), ({**entry.__dict__, **extra} if extra else entry.__dict__)


class RunnableAgent(Protocol):
    """What the manager runs: anything with ``run(input) -> AsyncIterator[BaseEvent]``."""

    def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]: ...


class SequencedEvent(NamedTuple):
    """One logged event and its per-run sequence number (the first event of a run is 1)."""

    seq: int
    event: BaseEvent


class _IdleClock:
    """Wakes a reader's wait with True once ``idle`` seconds pass without an event.

    One timer serves the whole read: it is armed at the first wait and, when it fires during
    a busy stream, re-armed for ``idle`` after the latest wait began, so an event costs no
    timer of its own.
    """

    __slots__ = ("_idle", "_loop", "_since", "_timer", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop, idle: float) -> None:
        self._loop = loop
        self._idle = idle
        self._since = loop.time()
        self._waiter: asyncio.Future[bool] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def wait_on(self, waiter: asyncio.Future[bool]) -> None:
        """``waiter`` is the reader's wait from now on; silence is counted from the last
        event (or from the last wake-up for silence)."""
        previous = self._waiter
        if previous is None or (previous.done() and not previous.result()):
            self._since = self._loop.time()
        self._waiter = waiter
        if self._timer is None:
            self._timer = self._loop.call_at(self._since + self._idle, self._fire)

    def _fire(self) -> None:
        self._timer = None
        waiter = self._waiter
        due = self._since + self._idle
        if waiter is None or waiter.done():
            return  # the reader is not waiting: its next wait arms the timer again
        if self._loop.time() >= due - 0.001:  # a timer may fire a clock tick early
            waiter.set_result(True)
            self._since = self._loop.time()
        else:
            self._timer = self._loop.call_at(due, self._fire)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class RunLogTruncatedError(ChatHistoryError, LookupError):
    """A reader asked for events the bounded run log no longer holds in memory."""

    def __init__(self, handle: RunHandle, wanted_seq: int) -> None:
        self.wanted_seq = wanted_seq
        self.first_seq = handle.first_seq
        super().__init__(
            f"Event {wanted_seq} of run {handle.run_id!r} on thread {handle.thread_id!r} is no "
            f"longer held in memory: the run log keeps the last {handle.max_log_events} events "
            f"and the oldest it holds is {self.first_seq}. Rebuild the reader's state from "
            f"storage (a MESSAGES_SNAPSHOT) instead of replaying."
        )


class RunObserver:
    """Hooks into every run of a manager; subclass and override what you need.

    Each method is awaited by the run's producer (``on_event``, ``cancel_requested``) or by its
    heartbeat (``on_heartbeat``, ``cancel_requested``), so keep them short. An exception from a
    hook is logged and ignored: an observer never breaks a run.

    Two class attributes keep the producer's per-event cost down: ``observed_event_types``
    (the event types ``on_event`` is called for; ``None``, the default, means every event) and
    ``cancel_poll_seconds`` (after an event, ``cancel_requested`` is asked at most this often,
    the first time that long after the run starts; ``0``, the default, means after every
    event).
    """

    observed_event_types: ClassVar[frozenset[str] | None] = None
    cancel_poll_seconds: ClassVar[float] = 0.0

    async def on_event(self, handle: RunHandle, seq: int, event: BaseEvent) -> None:
        """Called after each event is logged (readers already see it), in order."""

    async def before_end(self, handle: RunHandle, event: BaseEvent) -> None:
        """Called with the agent's terminal event before it is logged (no reader has it yet),
        e.g. to end the run's record first, so a reader that saw the end never finds the run
        running. Raising ``RunFencedError`` stops the run here without logging it (another
        worker runs it on); any other failure is logged and the event is logged anyway."""

    async def cancel_requested(self, handle: RunHandle) -> bool:
        """Return True to cancel the run. Asked after events (see ``cancel_poll_seconds``)
        and on every heartbeat until the run's terminal event (e.g. check a cancel intent in
        a shared cache)."""
        return False

    async def on_heartbeat(self, handle: RunHandle) -> None:
        """Called every ``heartbeat_interval`` seconds while the producer runs (finalization
        included), e.g. to refresh the run's lease."""

    async def on_done(self, handle: RunHandle) -> None:
        """Called once when the producer has finished, persistence included."""


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _speaks_agui_1(input: RunAgentInput) -> bool:
    major = (input.protocol_version or "").split(".", 1)[0]
    return major.isdigit() and int(major) >= 1


class RunHandle:
    """One run started by `StreamPersistenceManager`: its event log, cancellation and completion.

    ``thread_id`` and ``run_id`` are the AG-UI ids of the run, ``owner`` the owner it was
    started for (`StreamPersistenceManager.run_as`), or None. Handles are shared: starting a
    run whose key is live (or recently finished) returns the same handle.

    A long run's log is mostly text, tool-argument and reasoning deltas. Past its newest 64 to
    128 events, a delta that carries nothing but its id, its text and perhaps its timestamp
    is kept as a plain tuple and built again for a reader that asks for it (an equal event):
    a model and its two containers per delta would outlive the collector's young generations,
    and fill its oldest one, which every full collection of the process then walks.
    """

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        *,
        owner: str | None,
        cancel_as_run_finished: bool,
        max_log_events: int,
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.owner = owner
        self.max_log_events = max_log_events
        self._cancel_as_run_finished = cancel_as_run_finished
        self._log: deque[BaseEvent | _Compact] = deque(maxlen=max_log_events)
        self._last_seq = 0
        self._compacted = 0  # the deltas up to this sequence number are compacted
        self._terminal_seq: int | None = None
        self._started = False
        self._cancelled = False
        self._handed_over = False
        self._fenced = False
        #: The execution of the run this log holds: ``0``, or the resumes before it (``_open``).
        self.epoch = 0
        # The futures of readers waiting for the next event: ``_append`` resolves them with
        # False, a reader's idle clock with True.
        self._waiters: list[asyncio.Future[bool]] = []
        # Readers holding a batch back (``coalesce``), each with the sequence number that
        # fills its batch: resolved by that event or the terminal one.
        self._holders: list[tuple[int, asyncio.Future[None]]] = []
        self._wakeups = 0  # reader wake-ups, to prove readers await instead of polling
        self._producing = False  # the producer task has taken its first step

    _task: asyncio.Task[None]  # the producer, set by the manager right after construction

    def __repr__(self) -> str:
        return f"<RunHandle thread_id={self.thread_id!r} run_id={self.run_id!r} {self.status}>"

    # -- state ----------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest logged event (0 before the first)."""
        return self._last_seq

    @property
    def first_seq(self) -> int:
        """Sequence number of the oldest event still held in memory."""
        return self._last_seq - len(self._log) + 1

    @property
    def epoch_base(self) -> int:
        """The number before this execution's first event (``epoch_base(self.epoch)``)."""
        return epoch_base(self.epoch)

    @property
    def whole_epoch(self) -> bool:
        """Whether the log still holds this execution's first event (none dropped)."""
        return self.first_seq == self.epoch_base + 1

    @property
    def terminal_event(self) -> BaseEvent | None:
        """The run's ``RUN_FINISHED`` / ``RUN_ERROR`` once logged, else None."""
        return _expanded(self._log[-1]) if self._terminal_seq is not None else None

    @property
    def status(self) -> RunStatus:
        """``running`` until the terminal event, then the outcome it announced."""
        event = self.terminal_event
        if event is None:
            return "running"
        if self._cancelled:
            return "interrupted"
        if isinstance(event, RunFinishedEvent):
            if isinstance(event.outcome, RunFinishedCancelledOutcome):
                return "interrupted"
            if isinstance(event.outcome, RunFinishedInterruptOutcome):
                return "interrupt"
            return "complete"
        return "errored"

    @property
    def handed_over(self) -> bool:
        """True once `hand_over` (or `fence`) stopped the run here for another worker."""
        return self._handed_over

    @property
    def fenced(self) -> bool:
        """True once `fence` stopped the run here: another worker runs it on already."""
        return self._fenced

    @property
    def finalizing(self) -> bool:
        """True after the terminal event while the producer is still persisting."""
        return self._terminal_seq is not None and not self.done()

    def done(self) -> bool:
        """True once the producer has finished, persistence included."""
        return self._task.done()

    # -- control --------------------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel this run; the client's stream gets a terminal event at once.

        Returns True if this call stopped the run, False if it had already emitted its terminal
        event (finished, failed, cancelled before, or finalizing): a later call never disturbs
        finalization, so calling this repeatedly is safe.
        """
        if self._terminal_seq is not None or self._handed_over or self._task.done():
            return False
        self._close_cancelled()
        if self._producing:
            self._task.cancel()
        # else the producer sees the terminal event at its first step and skips the agent:
        # a task cancelled before its first step would never run its own cleanup.
        return True

    def hand_over(self) -> bool:
        """Stop this run here without ending it, for another worker to go on with (a drain).

        The agent is cancelled as by `cancel` (the storage agent stores what it streamed and
        marks it ``interrupted``), but no terminal event is logged: readers' streams end after
        the last logged event, and the run's status stays ``running``. Returns True if this
        call stopped the run, False if it had already ended, been cancelled or handed over.
        """
        if self._terminal_seq is not None or self._handed_over or self._task.done():
            return False
        self._handed_over = True
        self._wake_for_good()
        self._task.cancel()
        return True

    def fence(self) -> bool:
        """Stop this run here because another worker took it over (this worker stalled past
        its lease): as `hand_over`, but the store refuses whatever the agent would still write
        (``RunFencedError``), and the run's record is not touched. Returns True if this call
        stopped the run."""
        if self._fenced:
            return False
        self._fenced = True
        if self._terminal_seq is not None or self._handed_over or self._task.done():
            return False
        self._stop_fenced()
        self._task.cancel()
        return True

    def _stop_fenced(self) -> None:
        """End the readers' streams of a fenced run (from inside its producer, or `fence`)."""
        self._fenced = self._handed_over = True
        self._wake_for_good()

    def _wake_for_good(self) -> None:
        """Wake every reader: no event will be logged any more."""
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(False)
        for _full, holder in self._holders:
            if not holder.done():
                holder.set_result(None)

    async def wait(self) -> None:
        """Return when the producer is done, persistence and finalization included.

        Never raises for a cancelled or failed run (a failure surfaces as a ``RUN_ERROR``
        event); only cancelling the waiter itself raises.
        """
        await asyncio.wait({self._task})

    # -- reading --------------------------------------------------------------------------

    @overload
    def sequenced_events(self, *, after: int = 0) -> AsyncGenerator[SequencedEvent, None]: ...

    @overload
    def sequenced_events(
        self, *, after: int = 0, idle: float
    ) -> AsyncGenerator[SequencedEvent | None, None]: ...

    async def sequenced_events(
        self, *, after: int = 0, idle: float | None = None
    ) -> AsyncGenerator[SequencedEvent | None, None]:
        """Yield ``(seq, event)`` for every event with ``seq > after``, then the live tail.

        Ends right after the terminal event. Stopping early has no effect on the run. With
        ``idle``, ``None`` is yielded whenever ``idle`` seconds pass without a new event (a
        reader writes its keep-alive there, in its own task). Raises `ValueError` if ``after``
        is negative or beyond `last_seq`, and `RunLogTruncatedError` if an event the reader
        needs was dropped from the bounded log.
        """
        batches = self.sequenced_batches(after=after, idle=idle, max_batch=1)
        try:
            async for batch in batches:
                if batch is None:
                    yield None
                else:
                    yield batch[0]
        finally:
            await batches.aclose()

    @overload
    def sequenced_batches(
        self, *, after: int = 0, max_batch: int = ..., coalesce: float = ...
    ) -> AsyncGenerator[list[SequencedEvent], None]: ...

    @overload
    def sequenced_batches(
        self, *, after: int = 0, idle: float | None, max_batch: int = ..., coalesce: float = ...
    ) -> AsyncGenerator[list[SequencedEvent] | None, None]: ...

    async def sequenced_batches(
        self,
        *,
        after: int = 0,
        idle: float | None = None,
        max_batch: int = CATCH_UP_BATCH,
        coalesce: float = 0.0,
    ) -> AsyncGenerator[list[SequencedEvent] | None, None]:
        """`sequenced_events` in batches: each list holds the events logged since the
        previous one (at most ``max_batch``, in order), so a reader writes them at once.

        With ``coalesce`` (seconds), a batch comes at most that often while the run streams:
        a reader back sooner than ``coalesce`` after its previous batch waits out the rest,
        and gets what was logged meanwhile in one batch. The terminal event is never held
        back, and neither is the first batch, a full one, nor one after ``coalesce`` of
        quiet. ``idle``, the errors and the end are those of `sequenced_events`.
        """
        if idle is not None and idle <= 0:
            raise ValueError(f"idle={idle!r} must be positive, or None for no idle marks.")
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch!r} must be at least 1.")
        if coalesce < 0:
            raise ValueError(f"coalesce={coalesce!r} must be 0 (no coalescing) or positive.")
        self._check_after(after)
        seq = after + 1
        log = self._log
        loop = asyncio.get_running_loop()
        clock = None if idle is None else _IdleClock(loop, idle)
        sent = -math.inf  # when the previous batch was handed out (loop time)
        try:
            while True:
                burst = 0
                while seq <= self._last_seq:
                    first = self._last_seq - len(log) + 1
                    if seq < first:
                        raise RunLogTruncatedError(self, seq)
                    stop = min(self._last_seq, seq + max_batch - 1)
                    if self._terminal_seq is not None:
                        stop = min(stop, self._terminal_seq)
                    batch = [
                        SequencedEvent(index, _expanded(log[index - first]))
                        for index in range(seq, stop + 1)
                    ]
                    if coalesce:
                        sent = loop.time()
                    yield batch
                    if stop == self._terminal_seq:
                        return
                    seq = stop + 1
                    burst += 1
                    if burst == _CATCH_UP_BURST:
                        # Catching up on a backlog: let the loop turn, so one reader does not
                        # hold it, and a server notices a client that left before it writes on.
                        burst = 0
                        await asyncio.sleep(0)
                if self._terminal_seq is not None or self._handed_over:
                    return
                if coalesce:
                    # Within ``coalesce`` of the previous batch, wait out the rest of it (a
                    # full batch or the terminal event ends that sooner) before waiting for an
                    # event: a fast run's next batch is then one wake-up, not two (the first
                    # event, then the end of the hold). An event after the hold goes out at once.
                    hold = sent + coalesce - loop.time()
                    if hold > 0:
                        await self._hold(loop, hold, full=seq + max_batch - 1)
                        if seq <= self._last_seq:
                            continue
                        if self._handed_over:  # during the hold: no event will come
                            return
                waiter: asyncio.Future[bool] = loop.create_future()
                self._waiters.append(waiter)
                if clock is not None:
                    clock.wait_on(waiter)
                try:
                    silent = await waiter
                except asyncio.CancelledError:
                    self._forget(waiter)
                    raise
                if silent:
                    self._forget(waiter)
                    yield None
                    continue
                self._wakeups += 1
        finally:
            if clock is not None:
                clock.stop()

    async def _hold(self, loop: asyncio.AbstractEventLoop, seconds: float, *, full: int) -> None:
        """Wait ``seconds``, or until event ``full`` (a full batch) or the terminal event is
        logged."""
        if full <= self._last_seq:
            return
        holder: asyncio.Future[None] = loop.create_future()
        entry = (full, holder)
        self._holders.append(entry)
        timer = loop.call_later(seconds, _resolve, holder)
        try:
            await holder
        finally:
            timer.cancel()
            with suppress(ValueError):
                self._holders.remove(entry)

    def _check_after(self, after: int) -> None:
        if not 0 <= after <= self._last_seq:
            raise ValueError(
                f"after={after!r} is outside run {self.run_id!r}'s log, whose last sequence "
                f"number is {self._last_seq}; pass 0 to read from the start."
            )

    def _forget(self, waiter: asyncio.Future[bool]) -> None:
        with suppress(ValueError):  # gone already if an event came as the wait ended
            self._waiters.remove(waiter)

    def logged_since(self, after: int) -> list[SequencedEvent]:
        """The ``(seq, event)`` logged so far with ``seq > after``, without waiting for more.

        Raises `ValueError` for an ``after`` outside the log and `RunLogTruncatedError` if an
        event after ``after`` was dropped from the bounded log.
        """
        return [SequencedEvent(seq, _expanded(entry)) for seq, entry in self._entries_since(after)]

    def logged_values_since(self, after: int) -> list[tuple[int, type[BaseEvent], dict[str, Any]]]:
        """`logged_since`, each event as ``(seq, event class, field values)`` (extra keys
        included; ``cls.model_construct(**values)`` builds it again), without building the
        events a compacted log holds as tuples: what a relay serialises. Raises as
        `logged_since` does; the dicts are the log's own, not to be changed.
        """
        return [(seq, *_event_values(entry)) for seq, entry in self._entries_since(after)]

    def _entries_since(self, after: int) -> Iterator[tuple[int, BaseEvent | _Compact]]:
        self._check_after(after)
        first = self.first_seq
        if after + 1 < first:
            raise RunLogTruncatedError(self, after + 1)
        start = after + 1 - first
        return enumerate(itertools.islice(self._log, start, None), after + 1)

    async def events(self, *, after: int = 0) -> AsyncGenerator[BaseEvent, None]:
        """Yield the run's events (those with ``seq > after``) as `sequenced_events` does."""
        async with aclosing(self.sequenced_events(after=after)) as entries:
            async for entry in entries:
                yield entry.event

    # -- producer side --------------------------------------------------------------------

    def _append(self, event: BaseEvent) -> int | None:
        """Log ``event`` and wake readers; events after the terminal one (or after a hand
        over) are not logged."""
        if self._terminal_seq is not None or self._handed_over:
            return None
        if self._started and event.type == _RUN_STARTED:
            # One run, one RUN_STARTED: a resumed run's agent starts again, its readers do
            # not (the event is neither logged nor numbered).
            return None
        self._last_seq += 1
        self._log.append(event)
        if self._last_seq - self._compacted >= 2 * _HOT_EVENTS:
            self._compact()
        kind = event.type
        if kind == _RUN_STARTED:
            self._started = True
        elif kind in TERMINAL_EVENT_TYPES:
            self._terminal_seq = self._last_seq
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():  # a reader cancelled while waiting leaves a done one
                    waiter.set_result(False)
        if self._holders:
            last, ending = self._last_seq, self._terminal_seq is not None
            for full, holder in self._holders:
                if (ending or full <= last) and not holder.done():
                    holder.set_result(None)
        return self._last_seq

    def _open(self, epoch: int, openings: list[BaseEvent]) -> None:
        """Start the log of a resumed run's execution ``epoch``: numbered from
        ``epoch_base(epoch) + 1``, beginning with ``openings`` (its ``RUN_STARTED`` and the
        ``MESSAGES_SNAPSHOT`` of what was stored when it resumed); the agent's own
        ``RUN_STARTED`` is then not logged again."""
        self.epoch = epoch
        self._last_seq = self._compacted = epoch_base(epoch)
        for event in openings:
            self._append(event)
        self._started = True

    def _compact(self) -> None:
        """Compact the deltas logged before the newest ``_HOT_EVENTS`` (see the class)."""
        log, upto = self._log, self._last_seq - _HOT_EVENTS
        first = self._last_seq - len(log) + 1
        for index in range(max(self._compacted + 1, first) - first, upto - first + 1):
            log[index] = _compacted(log[index])
        self._compacted = upto

    def _close(self, terminal: BaseEvent) -> None:
        """End the client's stream with a synthesized terminal event (after a RUN_STARTED)."""
        if not self._started:
            self._append(
                RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, timestamp=_now_ms())
            )
        self._append(terminal)

    def _close_cancelled(self) -> None:
        if self._terminal_seq is not None or self._handed_over:
            return
        self._cancelled = True
        terminal: BaseEvent
        if self._cancel_as_run_finished:
            terminal = RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                outcome=RunFinishedCancelledOutcome(),
                timestamp=_now_ms(),
            )
        else:
            terminal = RunErrorEvent(
                message=CANCELLED_MESSAGE, code=CANCELLED_CODE, timestamp=_now_ms()
            )
        self._close(terminal)

    def _close_errored(self, message: str) -> None:
        self._close(
            RunErrorEvent(
                message=message, code=ErrorCodes.INTERNAL_ERROR.value, timestamp=_now_ms()
            )
        )


class StreamPersistenceManager(Generic[_P]):
    """Run agents so their output survives client disconnects, with cancel and reattach.

    ``agent_factory(*args, **kwargs)`` builds a fresh agent per run (normally an
    `AGUIStorageAgent`), inside the run's producer task. Options:

    - ``cancel_event``: the terminal event a cancelled run's readers get. ``"auto"`` sends
      ``RUN_FINISHED`` with outcome ``cancelled`` when the input's ``protocol_version`` is 1.0
      or later (``@ag-ui/client`` 1.0 sends ``"1.0"``), else ``RUN_ERROR`` code ``CANCELLED``
      (an older client would read an unknown outcome as success).
    - ``max_log_events``: events each run keeps in memory (the newest; older ones are dropped
      and a reader that needs them gets `RunLogTruncatedError`).
    - ``finished_run_retention`` (seconds) and ``max_finished_runs``: how long, and how many,
      finished runs stay addressable by `get` and `run` (for reattach and idempotent retries).
    - ``observer`` and ``heartbeat_interval``: a `RunObserver` called on every event and on a
      heartbeat (cross-worker cancel, lease refresh, tail sharing). No observer, no heartbeat.
    - ``context``: returns the `contextvars.Context` each producer task runs in; by default a
      copy of the caller's. A producer outlives its request, so request-scoped variables can
      go stale: under Django's ASGI handler the copy carries the request's asgiref
      ``ThreadSensitiveContext``, and once the request ends each thread-sensitive
      ``sync_to_async`` call of the run moves to a fresh, never-closed worker thread. Pass
      ``context=contextvars.Context`` to run producers on the process-wide thread instead.
    """

    def __init__(
        self,
        agent_factory: Callable[_P, RunnableAgent],
        *,
        cancel_event: CancelEvent = "auto",
        max_log_events: int = 10_000,
        finished_run_retention: float = 60.0,
        max_finished_runs: int = 256,
        observer: RunObserver | None = None,
        heartbeat_interval: float = 10.0,
        context: Callable[[], contextvars.Context] | None = None,
    ) -> None:
        if cancel_event not in ("auto", "run_finished", "run_error"):
            raise ValueError(
                f"cancel_event={cancel_event!r} is not one of 'auto', 'run_finished', 'run_error'."
            )
        if max_log_events < 1:
            raise ValueError(f"max_log_events={max_log_events!r} must be at least 1.")
        if finished_run_retention < 0 or max_finished_runs < 0:
            raise ValueError(
                f"finished_run_retention={finished_run_retention!r} and "
                f"max_finished_runs={max_finished_runs!r} must not be negative."
            )
        if heartbeat_interval <= 0:
            raise ValueError(f"heartbeat_interval={heartbeat_interval!r} must be positive.")
        self._factory = agent_factory
        self._cancel_event = cancel_event
        self._max_log_events = max_log_events
        self._retention = finished_run_retention
        self._max_finished = max_finished_runs
        self._observer = observer
        self._heartbeat_interval = heartbeat_interval
        self._context = context
        self._runs: dict[_RunKey, RunHandle] = {}
        self._finished: OrderedDict[RunHandle, float] = OrderedDict()
        self._closed = False

    async def __aenter__(self) -> StreamPersistenceManager[_P]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- public API -----------------------------------------------------------------------

    async def run(self, input: RunAgentInput, /, *args: _P.args, **kwargs: _P.kwargs) -> RunHandle:
        """Start a run, or attach to the run already registered under its key.

        The key is ``(input.thread_id, input.run_id)``. While that run is live, or finished
        within the retention window, its handle is returned and nothing new starts (the factory
        is not called). Otherwise a producer task calls ``agent_factory(*args, **kwargs)`` and
        iterates the agent's ``run(input)``. Raises `RuntimeError` after `aclose`.

        Both ids come from the client, so a server with several users should call `run_as`.
        """
        return await self.run_as(None, input, *args, **kwargs)

    async def run_as(
        self, owner: str | None, input: RunAgentInput, /, *args: _P.args, **kwargs: _P.kwargs
    ) -> RunHandle:
        """`run`, with ``owner`` as part of the key: a run is found again, attached to or
        cancelled only under the owner it was started for, so a client that reuses another
        owner's ``(thread_id, run_id)`` starts its own run instead of reading theirs."""
        if self._closed:
            raise RuntimeError("This StreamPersistenceManager is closed; it starts no new runs.")
        self._prune()
        key = (owner, input.thread_id, input.run_id)
        existing = self._runs.get(key)
        if existing is not None:
            return existing
        if self._cancel_event == "auto":
            as_run_finished = _speaks_agui_1(input)
        else:
            as_run_finished = self._cancel_event == "run_finished"
        handle = RunHandle(
            input.thread_id,
            input.run_id,
            owner=owner,
            cancel_as_run_finished=as_run_finished,
            max_log_events=self._max_log_events,
        )
        task = asyncio.create_task(
            self._produce(handle, input, args, kwargs),
            name=f"agent run {input.thread_id}/{input.run_id}",
            context=None if self._context is None else self._context(),
        )
        handle._task = task
        self._runs[key] = handle
        task.add_done_callback(lambda _task: self._retire(handle))
        return handle

    async def resume_as(
        self,
        owner: str | None,
        input: RunAgentInput,
        epoch: int,
        openings: list[BaseEvent],
        /,
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> RunHandle:
        """`run_as` for a run taken over from another worker, as its execution ``epoch``
        (``>= 1``): its log is numbered from ``epoch_base(epoch) + 1`` and begins with
        ``openings`` (see ``RunHandle._open``). Raises `RuntimeError` after `aclose`, and
        `ValueError` for an ``epoch`` below 1 or a run that is live here already."""
        if epoch < 1:
            raise ValueError(f"epoch={epoch!r}: a resumed run's execution is 1 or later.")
        if self._closed:
            raise RuntimeError("This StreamPersistenceManager is closed; it starts no new runs.")
        self._prune()
        key = (owner, input.thread_id, input.run_id)
        existing = self._runs.get(key)
        if existing is not None and not existing.done():
            raise ValueError(f"Run {input.run_id!r} of thread {input.thread_id!r} runs here.")
        if existing is not None:
            self._finished.pop(existing, None)
            del self._runs[key]
        handle = RunHandle(
            input.thread_id,
            input.run_id,
            owner=owner,
            cancel_as_run_finished=(
                _speaks_agui_1(input)
                if self._cancel_event == "auto"
                else self._cancel_event == "run_finished"
            ),
            max_log_events=self._max_log_events,
        )
        handle._open(epoch, openings)
        task = asyncio.create_task(
            self._produce(handle, input, args, kwargs),
            name=f"agent run {input.thread_id}/{input.run_id} (resumed)",
            context=None if self._context is None else self._context(),
        )
        handle._task = task
        self._runs[key] = handle
        task.add_done_callback(lambda _task: self._retire(handle))
        return handle

    def get(self, thread_id: str, run_id: str, *, owner: str | None = None) -> RunHandle | None:
        """The handle of a live or recently finished run of ``owner``, or None."""
        self._prune()
        return self._runs.get((owner, thread_id, run_id))

    def runs(self, thread_id: str | None = None, *, owner: str | None = None) -> list[RunHandle]:
        """The registered handles (live and retained) of ``owner``, optionally of one thread,
        oldest first."""
        self._prune()
        return [
            handle
            for (run_owner, run_thread, _), handle in self._runs.items()
            if run_owner == owner and thread_id in (None, run_thread)
        ]

    def cancel(self, thread_id: str, run_id: str, *, owner: str | None = None) -> bool:
        """Cancel the run keyed by ``(owner, thread_id, run_id)``; see `RunHandle.cancel`.

        Returns False when no such run is registered or it already emitted its terminal event.
        """
        handle = self._runs.get((owner, thread_id, run_id))
        return handle is not None and handle.cancel()

    async def aclose(self, *, grace: float | None = 30.0) -> None:
        """Stop accepting runs, cancel every live run and wait for all producers.

        Runs that already emitted their terminal event are left to finish persisting. After
        ``grace`` seconds, producers still going are cancelled again (their finalization is
        cut short, which is logged) and awaited, so no task outlives this call.
        """
        self._closed = True
        live = [handle for handle in self._runs.values() if not handle.done()]
        for handle in live:
            handle.cancel()
        if not live:
            return
        tasks = [handle._task for handle in live]
        _, pending = await asyncio.wait(tasks, timeout=grace)
        if pending:
            logger.warning(
                "%d agent run(s) were still finalizing after %s s at shutdown; cancelling them.",
                len(pending),
                grace,
            )
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)

    # -- internals ------------------------------------------------------------------------

    async def _produce(
        self,
        handle: RunHandle,
        input: RunAgentInput,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        handle._producing = True
        if handle._terminal_seq is None:  # else it was cancelled before this first step
            await self._drive(handle, input, args, kwargs)
        if self._observer is not None:
            await self._call_hook(handle, "on_done", self._observer.on_done(handle))

    async def _drive(
        self,
        handle: RunHandle,
        input: RunAgentInput,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        heartbeat = None
        if self._observer is not None:
            heartbeat = asyncio.create_task(
                self._heartbeat(handle, self._observer),
                name=f"agent run heartbeat {handle.thread_id}/{handle.run_id}",
            )
        stream: AsyncIterator[BaseEvent] | None = None
        try:
            agent = self._factory(*args, **kwargs)
            stream = agent.run(input)
            observer = self._observer
            if observer is None:
                while True:
                    try:
                        event = await anext(stream)
                    except StopAsyncIteration:
                        break
                    handle._append(event)
            else:
                types = observer.observed_event_types
                poll = observer.cancel_poll_seconds
                next_poll = time.monotonic() + poll
                while True:
                    try:
                        event = await anext(stream)
                    except StopAsyncIteration:
                        break
                    if event.type in TERMINAL_EVENT_TYPES and handle._terminal_seq is None:
                        await self._call_hook(
                            handle, "before_end", observer.before_end(handle, event)
                        )
                    seq = handle._append(event)
                    if seq is None:
                        continue
                    notify = types is None or event.type in types
                    ask = poll <= 0
                    if not ask:
                        now = time.monotonic()
                        if now >= next_poll:
                            ask = True
                            next_poll = now + poll
                    if notify or ask:
                        await self._observe(handle, observer, seq, event, stream, notify, ask)
        except asyncio.CancelledError:
            # Ours to absorb: the run's readers get a terminal event, and wait() never raises.
            handle._close_cancelled()
        except RunFencedError as exc:
            # Another worker runs it on: readers' streams end here, with no terminal event
            # (they reattach and find that execution), and nothing more is written.
            logger.warning("%s", exc)
            handle._stop_fenced()
            if isinstance(stream, AsyncGenerator):
                with suppress(Exception):  # what it still writes, the store refuses
                    await stream.aclose()
        except Exception:
            if handle._handed_over:
                logger.warning(
                    "Agent run %r on thread %r failed while it was handed over.",
                    handle.run_id,
                    handle.thread_id,
                    exc_info=True,
                )
            elif handle._terminal_seq is None:
                logger.exception(
                    "Agent run %r on thread %r failed.", handle.run_id, handle.thread_id
                )
                handle._close_errored(CRASH_TEXT)
            else:
                logger.exception(
                    "Agent run %r on thread %r failed after its terminal event.",
                    handle.run_id,
                    handle.thread_id,
                )
        else:
            if handle._terminal_seq is None and not handle._handed_over:
                logger.error(
                    "Agent run %r on thread %r ended without RUN_FINISHED or RUN_ERROR.",
                    handle.run_id,
                    handle.thread_id,
                )
                handle._close_errored(INCOMPLETE_STREAM_TEXT)
        finally:
            if heartbeat is not None:
                heartbeat.cancel()
                await asyncio.wait({heartbeat})

    async def _observe(
        self,
        handle: RunHandle,
        observer: RunObserver,
        seq: int,
        event: BaseEvent,
        stream: AsyncIterator[BaseEvent],
        notify: bool = True,
        ask: bool = True,
    ) -> None:
        try:
            if notify:
                await self._call_hook(handle, "on_event", observer.on_event(handle, seq, event))
            if ask:
                await self._check_cancel(handle, observer)
        except asyncio.CancelledError:
            # Cancelled while the agent waits at a yield: deliver the cancellation there, so
            # its own handling (the storage agent's interrupt finalization) runs now.
            if isinstance(stream, AsyncGenerator):
                with suppress(StopAsyncIteration):  # the agent absorbed it and returned
                    try:
                        await stream.athrow(asyncio.CancelledError())
                    finally:
                        await stream.aclose()
            raise

    async def _heartbeat(self, handle: RunHandle, observer: RunObserver) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval)
            await self._call_hook(handle, "on_heartbeat", observer.on_heartbeat(handle))
            await self._check_cancel(handle, observer)

    async def _check_cancel(self, handle: RunHandle, observer: RunObserver) -> None:
        if handle._terminal_seq is None and await self._call_hook(
            handle, "cancel_requested", observer.cancel_requested(handle)
        ):
            if asyncio.current_task() is handle._task:
                # Asked after an event, in the producer itself: cancel at once, at the agent's
                # yield (see _observe), instead of at the agent's next suspension.
                handle._close_cancelled()
                raise asyncio.CancelledError
            handle.cancel()

    @staticmethod
    async def _call_hook(handle: RunHandle, name: str, call: Any) -> Any:
        try:
            return await call
        except RunFencedError:
            raise  # the run stops here (``_drive``)
        except Exception:
            logger.exception(
                "RunObserver.%s failed for run %r on thread %r; the run goes on.",
                name,
                handle.run_id,
                handle.thread_id,
            )
            return None

    def _retire(self, handle: RunHandle) -> None:
        """Done-callback of a producer: close a never-started run, start its retention."""
        handle._close_cancelled()  # only a task cancelled from outside before its start lacks one
        self._finished[handle] = time.monotonic()
        self._prune()

    def _prune(self) -> None:
        """Forget finished runs past the retention window or the count cap.

        This is the only place a key leaves the registry, and it removes the finished handle
        itself; a key is reused only once it is free, so an old run never unregisters a new one.
        """
        now = time.monotonic()
        while self._finished:
            handle, finished_at = next(iter(self._finished.items()))
            if now - finished_at < self._retention and len(self._finished) <= self._max_finished:
                break
            del self._finished[handle]
            del self._runs[handle.owner, handle.thread_id, handle.run_id]
