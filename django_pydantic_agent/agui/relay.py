"""A run's event log, replayed to a reader and relayed to other workers through Django's cache.

``replay_batches`` holds the replay rules every reattach follows, wherever the log comes from:
for a reader that saw up to ``after``, the run's ``RUN_STARTED`` and the ``*_START`` of every
message, tool call and reasoning step still open at ``after`` (without ids: they were seen),
then each event after ``after`` with its id ``<run_id>:<seq>``, and the missing ``*_END``
events before the terminal event of a run stopped mid-message.

``RunRelay`` shares the log of each live run with the workers that do not hold it. The owning
worker publishes the run's events in batches, from a small task per run that wakes every
``interval`` seconds (and at once at the terminal event), never from the producer's hot path:
a run makes one cache write per interval in which it logged events, not one per event. The
keys derive from a digest of (owner, thread, run), so no id appears in a key and a caller can
only ever read its own runs; a resumed run's next execution (``RunHandle.epoch`` ``n``) has a
log of its own, under ``…:e<n>``. Layout, under ``django_pydantic_agent:relay:<digest>``:

- ``…:head``: ``{"batches": n, "last_seq": s, "terminal": bool, "stopped": bool}``, rewritten
  with each batch (``stopped``: the execution was handed over and logs nothing more);
- ``…:<i>``: batch ``i`` (from 1), a list of ``(seq, event class, field values)``, pickled by
  the cache as any value is, in the cache call's worker thread. Plain field values pickle
  about six times faster than the pydantic events themselves (and many times faster than
  their JSON), and every event of every run is relayed, while only a reattach on another
  worker rebuilds them (``model_construct``: they were validated when they were made).

Each batch and its head are written in one ``set_many`` (a pipelined transaction on Redis),
the batch first, so a reader that sees head ``n`` finds batch ``n``. Every entry expires
``ttl`` seconds after it was written (an hour by default), so a log outlives its run by at
most that. A worker that does not hold the run reads the batches and then polls the head for
new ones until the terminal event. When the cache holds no log for the run (a per-process
cache such as ``LocMemCache`` on another worker, or an expired log), ``follow`` returns
``None`` and the caller answers from storage instead.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from ag_ui.core import (
    BaseEvent,
    EventType,
    ReasoningEndEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from asgiref.sync import sync_to_async

from django_pydantic_agent.chat_history import RunHandle
from django_pydantic_agent.chat_history.manager import (
    TERMINAL_EVENT_TYPES,
    RunLogTruncatedError,
    epoch_base,
)
from django_pydantic_agent.persistence.outages import CacheUnavailableError, is_cache_outage

__all__ = [
    "ALIVE_CHECK_SECONDS",
    "RELAY_INTERVAL_SECONDS",
    "RELAY_RETIRE_KEEP",
    "RELAY_RETIRE_SECONDS",
    "RELAY_TTL_SECONDS",
    "Batch",
    "EventStream",
    "OpenStreams",
    "RelayedLog",
    "RunRelay",
    "RunStream",
    "replay_batches",
    "run_digest",
]

logger = logging.getLogger("django_pydantic_agent.agui")

#: How often a live run's new events are published to the cache (and a follower polls).
RELAY_INTERVAL_SECONDS: Final[float] = 0.1
#: How long a relayed log stays in the cache after its last write (the longest a run's log
#: can outlive a worker that died before retiring it).
RELAY_TTL_SECONDS: Final[float] = 3600.0
#: How long a finished run's relayed log is kept for followers still reading it; after that
#: it is deleted (a finished run is answered from storage), so a busy worker's logs do not
#: crowd run records and cancel intents out of a bounded cache such as ``LocMemCache``.
RELAY_RETIRE_SECONDS: Final[float] = 2.0
#: At most this many finished runs' logs wait out ``RELAY_RETIRE_SECONDS``; when another run
#: finishes, the oldest is deleted at once, so the relay's share of the cache does not grow
#: with a worker's throughput (a follower that loses a finished log answers from storage).
RELAY_RETIRE_KEEP: Final[int] = 16
#: How long a follower waits for a new batch before it asks whether the run still runs.
ALIVE_CHECK_SECONDS: Final[float] = 2.0
_PREFIX = "django_pydantic_agent:relay"
_OPENS_OR_CLOSES = frozenset(
    {
        EventType.TEXT_MESSAGE_START,
        EventType.TEXT_MESSAGE_END,
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_END,
        EventType.REASONING_START,
        EventType.REASONING_END,
        EventType.REASONING_MESSAGE_START,
        EventType.REASONING_MESSAGE_END,
    }
)
# A follower fetches at most this many batches per cache call.
_FETCH_CHUNK = 200


def _bug(exc: BaseException) -> bool:
    """Whether a cache failure deserves its traceback in the log (an outage does not)."""
    return not is_cache_outage(exc)


#: A batch of a run's events, in order: ``(seq, event)``, ``seq`` ``None`` for an event sent
#: again without its number (the reader saw it).
Batch: TypeAlias = list[tuple[int | None, BaseEvent]]
#: What a run streams: batches, and ``None`` where the run was idle for the heartbeat interval.
EventStream: TypeAlias = AsyncIterator[Batch | None]


@dataclass(frozen=True)
class RunStream:
    """A run's events for one reader: ``batches``, and whether they mark idle time themselves
    (``paced``; otherwise the transport keeps the connection alive)."""

    batches: EventStream
    paced: bool


def run_digest(owner_id: str, thread_id: str, run_id: str) -> str:
    """The hex digest of (owner, thread, run) that the run's cache keys are named by."""
    return hashlib.sha256("\x00".join((owner_id, thread_id, run_id)).encode()).hexdigest()


class OpenStreams:
    """The messages, tool calls and reasoning steps a run's events opened and not yet closed."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], BaseEvent] = {}

    def fold(self, event: BaseEvent) -> None:
        """Account for ``event``."""
        if event.type not in _OPENS_OR_CLOSES:
            return  # most events (deltas above all) open and close nothing
        if isinstance(event, TextMessageStartEvent):
            self._open[("text", event.message_id)] = event
        elif isinstance(event, ToolCallStartEvent):
            self._open[("tool", event.tool_call_id)] = event
        elif isinstance(event, ReasoningStartEvent):
            self._open[("reasoning", event.message_id)] = event
        elif isinstance(event, ReasoningMessageStartEvent):
            self._open[("reasoning-message", event.message_id)] = event
        elif isinstance(event, TextMessageEndEvent):
            self._open.pop(("text", event.message_id), None)
        elif isinstance(event, ToolCallEndEvent):
            self._open.pop(("tool", event.tool_call_id), None)
        elif isinstance(event, ReasoningEndEvent):
            self._open.pop(("reasoning", event.message_id), None)
        elif isinstance(event, ReasoningMessageEndEvent):
            self._open.pop(("reasoning-message", event.message_id), None)

    def openings(self) -> list[BaseEvent]:
        """The ``*_START`` events of what is open, in the order they opened."""
        return list(self._open.values())

    def closings(self) -> list[BaseEvent]:
        """``*_END`` events closing what is open, innermost (latest) first."""
        ends: list[BaseEvent] = []
        for kind, ident in reversed(self._open):
            if kind == "text":
                ends.append(TextMessageEndEvent(message_id=ident))
            elif kind == "tool":
                ends.append(ToolCallEndEvent(tool_call_id=ident))
            elif kind == "reasoning-message":
                ends.append(ReasoningMessageEndEvent(message_id=ident))
            else:
                ends.append(ReasoningEndEvent(message_id=ident))
        self._open.clear()
        return ends


async def replay_batches(
    batches: AsyncIterator[Sequence[tuple[int, BaseEvent]] | None],
    after: int,
    *,
    started: bool = False,
) -> EventStream:
    """A run's ``(seq, event)`` log as a reader that saw up to ``after`` reads it.

    ``batches`` yields the log in order, a few entries at a time, and each yields one batch.
    ``after`` at or before the log's first entry replays the whole log with its numbers;
    otherwise see the module docstring (events sent again have ``None`` for their number). A
    reader that saw the terminal event gets ``RUN_STARTED`` and the terminal event again,
    without numbers. A log that ends without a terminal event (a relayed log lost mid-stream,
    or an execution of the run that another worker took over) gets the ``*_END`` events of
    what is still open, so the caller can go on with a snapshot or the next execution. A
    ``None`` batch (the log was idle) is passed on.

    ``started``: the stream has sent ``RUN_STARTED`` already (a reader that waited, or one
    going on with the run's next execution), so no ``RUN_STARTED`` of the log is sent again.
    """
    streams = OpenStreams()
    first: BaseEvent | None = None
    ended = False
    try:
        async for batch in batches:
            if batch is None:
                yield None
                continue
            out: list[tuple[int | None, BaseEvent]] = []
            for seq, event in batch:
                if seq <= after:
                    first = first or event
                    streams.fold(event)
                    if seq == after and event.type in TERMINAL_EVENT_TYPES:
                        # The reader saw the end: the run's start and its end again, no ids.
                        ended = True
                        if not started:
                            out.append((None, first))
                        if event is not first:
                            out.append((None, event))
                    elif seq == after:
                        openings = streams.openings()
                        if not started:
                            openings.insert(0, first)
                        out.extend((None, opening) for opening in openings)
                    continue
                if event.type in TERMINAL_EVENT_TYPES:
                    ended = True
                    out.extend((None, closing) for closing in streams.closings())
                elif started and event.type == EventType.RUN_STARTED:
                    continue
                streams.fold(event)
                out.append((seq, event))
            if out:
                yield out
        if not ended:
            closings: list[tuple[int | None, BaseEvent]] = [
                (None, closing) for closing in streams.closings()
            ]
            if closings:
                yield closings
    finally:
        close = getattr(batches, "aclose", None)
        if close is not None:
            await close()


def _rebuilt(entry: Any) -> BaseEvent | None:
    """The event of a relayed ``(seq, class, values)`` entry (or of an older worker's
    ``(seq, event)``); ``None`` for anything else."""
    if not isinstance(entry, tuple | list) or len(entry) not in (2, 3):
        return None
    if len(entry) == 2:
        return entry[1] if isinstance(entry[1], BaseEvent) else None
    _, kind, values = entry
    if not (isinstance(kind, type) and issubclass(kind, BaseEvent) and isinstance(values, dict)):
        return None
    return kind.model_construct(**values)


class _Publication:
    """What the relay has published of one live run."""

    def __init__(self, handle: RunHandle, key: str) -> None:
        self.handle = handle
        self.key = key
        self.seq = 0  # the last sequence number written
        self.batches = 0
        self.announced = False  # the head has been written once
        self.finished = False
        self.nudge = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.failing = False  # the last write to the cache failed (logged once per outage)


class RelayedLog:
    """A run's log as the cache holds it, for a worker that does not hold the run.

    ``entries()`` yields ``(seq, event)`` from the first event, then polls for new batches
    until the terminal event. It stops early, with ``lost`` set, if the log disappears or
    skips a sequence number (evicted or expired); the caller then answers from storage.
    """

    def __init__(
        self,
        relay: RunRelay,
        key: str,
        head: dict[str, Any],
        batches: list[Any],
        *,
        epoch: int = 0,
    ) -> None:
        self._relay = relay
        self._key = key
        self.head = head
        self._batches = batches
        self.epoch = epoch
        self.lost = False

    @property
    def last_seq(self) -> int:
        """The sequence number of the newest event published (the epoch's base before any)."""
        return max(int(self.head["last_seq"]), epoch_base(self.epoch))

    @property
    def terminal(self) -> bool:
        """Whether the published log holds the run's terminal event."""
        return bool(self.head["terminal"])

    async def wait_for(self, seq: int, *, seconds: float) -> bool:
        """Whether the published log reaches ``seq`` within ``seconds`` (the relay lags the
        live stream by up to one interval); a log that disappears meanwhile is ``lost``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.last_seq < seq and not self.terminal and loop.time() < deadline:
            await asyncio.sleep(self._relay.interval)
            head = await self._relay._get(f"{self._key}:head")
            if not isinstance(head, dict):
                self.lost = True
                return False
            self.head = head
        return self.last_seq >= seq

    async def entries(
        self, *, still_running: Callable[[], Awaitable[bool]] | None = None
    ) -> AsyncIterator[tuple[int, BaseEvent]]:
        """The execution's ``(seq, event)`` from its first, then the live tail (see the class).

        ``still_running()`` is asked every ``ALIVE_CHECK_SECONDS`` while no new batch comes:
        once it says no (the run ended, or another worker took it over), a log that stopped
        short of its terminal event is lost, so a follower never waits on it forever.
        """
        batches = self.batches(still_running=still_running)
        try:
            async for batch in batches:
                for entry in batch:
                    yield entry
        finally:
            await batches.aclose()

    async def batches(
        self, *, still_running: Callable[[], Awaitable[bool]] | None = None
    ) -> AsyncGenerator[list[tuple[int, BaseEvent]], None]:
        """`entries`, one list per relayed batch (a reader writes each at once)."""
        relay = self._relay
        read = 0
        expected = epoch_base(self.epoch) + 1
        pending = self._batches
        self._batches = []
        while True:
            for batch in pending:
                read += 1
                if not isinstance(batch, list):
                    self.lost = True
                    return
                rebuilt: list[tuple[int, BaseEvent]] = []
                for entry in batch:
                    event = _rebuilt(entry)
                    if event is None or entry[0] != expected:
                        self.lost = True
                        break
                    rebuilt.append((expected, event))
                    expected += 1
                    if event.type in TERMINAL_EVENT_TYPES:
                        break
                if rebuilt:
                    yield rebuilt
                if self.lost or (rebuilt and rebuilt[-1][1].type in TERMINAL_EVENT_TYPES):
                    return
            idle = 0.0
            while int(self.head["batches"]) <= read:
                if self.terminal or self.head.get("stopped"):
                    # A terminal head whose batches did not hold it, or an execution its
                    # worker stopped (handed over): the rest comes from another worker.
                    self.lost = True
                    return
                if idle >= ALIVE_CHECK_SECONDS and still_running is not None:
                    idle = 0.0
                    if not await still_running():
                        # Ended without relaying its terminal event (its worker died, and the
                        # sweeper ended it or another worker runs it on): one last look.
                        head = await relay._get(f"{self._key}:head")
                        if not isinstance(head, dict) or int(head["batches"]) <= read:
                            self.lost = True
                            return
                        self.head = head
                        continue
                await asyncio.sleep(relay.interval)
                idle += relay.interval
                head = await relay._get(f"{self._key}:head")
                if not isinstance(head, dict):
                    self.lost = True
                    return
                self.head = head
            pending = await relay._batches(self._key, read + 1, int(self.head["batches"]))


class RunRelay:
    """Publishes the live runs of this worker to the cache, and reads other workers' runs.

    ``on_tick(handle)`` is awaited after each publication while the run has not ended (the
    coordinator polls the run's cancel intent there, so a silent model is still cancelled
    within its poll interval). Cache failures are logged and retried on the next tick; they
    never affect the run.
    """

    def __init__(
        self,
        *,
        cache_alias: str = "default",
        interval: float = RELAY_INTERVAL_SECONDS,
        ttl: float = RELAY_TTL_SECONDS,
        retire_after: float = RELAY_RETIRE_SECONDS,
        retire_keep: int = RELAY_RETIRE_KEEP,
        on_tick: Callable[[RunHandle], Awaitable[None]] | None = None,
    ) -> None:
        if interval <= 0 or ttl <= 0:
            raise ValueError(f"interval={interval!r} and ttl={ttl!r} must be positive.")
        if retire_keep < 0:
            raise ValueError(f"retire_keep={retire_keep!r} must be 0 or more.")
        self.cache_alias = cache_alias
        self.interval = interval
        self.ttl = ttl
        self.retire_after = retire_after
        self.retire_keep = retire_keep
        self._on_tick = on_tick
        self._published: dict[RunHandle, _Publication] = {}
        # Finished runs' keys, oldest first, with the loop time after which they are deleted.
        self._retiring: collections.deque[tuple[float, list[str]]] = collections.deque()

    @property
    def _cache(self) -> Any:
        from django.core.cache import caches

        return caches[self.cache_alias]

    def _key(self, owner_id: str, thread_id: str, run_id: str, epoch: int = 0) -> str:
        """The prefix of an execution's keys: a resumed run's each get their own log."""
        key = f"{_PREFIX}:{run_digest(owner_id, thread_id, run_id)}"
        return f"{key}:e{epoch}" if epoch else key

    # -- publishing (the worker that holds the run) --------------------------------------------

    def publish(self, handle: RunHandle, owner_id: str) -> None:
        """Start relaying ``handle``'s log; ``finish(handle)`` (at the run's end) stops it.

        A resumed run's execution (``handle.epoch``) is relayed as a log of its own.
        """
        if handle in self._published:
            return
        key = self._key(owner_id, handle.thread_id, handle.run_id, handle.epoch)
        publication = _Publication(handle, key)
        publication.seq = handle.epoch_base
        publication.task = asyncio.create_task(
            self._publish_loop(publication),
            name=f"agent run relay {handle.thread_id}/{handle.run_id}",
        )
        self._published[handle] = publication

    def nudge(self, handle: RunHandle) -> None:
        """Publish ``handle``'s new events now rather than at the next tick (its terminal)."""
        publication = self._published.get(handle)
        if publication is not None:
            publication.nudge.set()

    async def finish(self, handle: RunHandle, *, retire: bool = True) -> None:
        """Publish what is left of ``handle``'s log (its terminal event) and stop its task.

        With ``retire`` (a run that ended), the log is deleted ``retire_after`` later;
        without (a run handed over to another worker), it stays for its ``ttl``.
        """
        publication = self._published.pop(handle, None)
        if publication is None or publication.task is None:
            return
        publication.nudge.set()
        done, _ = await asyncio.wait({publication.task}, timeout=10 * self.interval + 5)
        if not done:
            publication.task.cancel()
            await asyncio.wait({publication.task})
        if not retire:
            return
        now = asyncio.get_running_loop().time()
        keys = [f"{publication.key}:head"]
        keys += [f"{publication.key}:{n}" for n in range(1, publication.batches + 1)]
        self._retiring.append((now + self.retire_after, keys))
        await self._retire(now)

    async def _retire(self, now: float) -> None:
        """Delete the relayed logs of runs that finished more than ``retire_after`` ago, and
        the oldest beyond the ``retire_keep`` most recent."""
        due: list[str] = []
        while self._retiring and (
            self._retiring[0][0] <= now or len(self._retiring) > self.retire_keep
        ):
            due += self._retiring.popleft()[1]
        if not due:
            return
        try:
            await sync_to_async(self._cache.delete_many)(due)
        except Exception as exc:
            logger.warning("Could not delete %d finished relay keys.", len(due), exc_info=_bug(exc))

    async def _publish_loop(self, publication: _Publication) -> None:
        await self._flush(publication)
        while not publication.finished:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await publication.nudge.wait()
            publication.nudge.clear()
            await self._flush(publication)
            if publication.handle.handed_over:
                return  # nothing more is logged here: the run goes on elsewhere
            if not publication.finished and self._on_tick is not None:
                try:
                    await self._on_tick(publication.handle)
                except Exception:
                    logger.exception("The relay's tick failed for run %r.", publication.handle)

    async def _flush(self, publication: _Publication) -> None:
        """Write the events logged since the last write as one batch, with the new head."""
        handle = publication.handle
        last = handle.last_seq
        if publication.announced and last == publication.seq:
            return
        try:
            entries = handle.logged_values_since(publication.seq)
        except RunLogTruncatedError:
            # Fell behind the bounded in-memory log: the relayed log is unusable, so drop it
            # and let followers answer from storage.
            publication.finished = True
            with contextlib.suppress(Exception):
                await sync_to_async(self._cache.delete)(f"{publication.key}:head")
            return
        # Nothing is logged after the terminal event: it is the last entry once logged.
        terminal = bool(entries) and handle.terminal_event is not None
        batches = publication.batches + (1 if entries else 0)
        data: dict[str, Any] = {}
        if entries:
            data[f"{publication.key}:{batches}"] = entries
        data[f"{publication.key}:head"] = {
            "batches": batches,
            "last_seq": entries[-1][0] if entries else publication.seq,
            "terminal": terminal,
            # Handed over (a drain) or fenced: this execution logs nothing more.
            "stopped": handle.handed_over,
        }
        try:
            await sync_to_async(self._cache.set_many)(data, self.ttl)
        except Exception as exc:
            # Logged once per outage, not at every tick: the run goes on meanwhile, and the
            # next write that lands carries every event since the last one that did.
            if not publication.failing:
                logger.warning(
                    "Could not relay run %r of thread %r to the cache (%s: %s); retrying.",
                    handle.run_id,
                    handle.thread_id,
                    type(exc).__name__,
                    exc,
                    exc_info=_bug(exc),
                )
            publication.failing = True
            return
        if publication.failing:
            publication.failing = False
            logger.info("Relaying run %r to the cache works again.", handle.run_id)
        publication.announced = True
        publication.batches = batches
        if entries:
            publication.seq = entries[-1][0]
        publication.finished = terminal

    # -- following (a worker that does not hold the run) ---------------------------------------

    async def _get(self, key: str, *, strict: bool = False) -> Any:
        """The cache's value at ``key``; ``None`` when missing or the cache fails, unless
        ``strict``: then a cache outage raises ``CacheUnavailableError``."""
        try:
            return await sync_to_async(self._cache.get)(key)
        except Exception as exc:
            if strict and is_cache_outage(exc):
                raise CacheUnavailableError(f"The cache is unavailable: {exc}") from exc
            logger.warning("Could not read the relayed run log %r.", key, exc_info=_bug(exc))
            return None

    async def _batches(self, key: str, first: int, last: int) -> list[Any]:
        """Batches ``first..last`` of the log at ``key`` (``None`` for a missing one)."""
        names = [f"{key}:{index}" for index in range(first, last + 1)]
        found: dict[str, Any] = {}
        for start in range(0, len(names), _FETCH_CHUNK):
            chunk = names[start : start + _FETCH_CHUNK]
            try:
                found.update(await sync_to_async(self._cache.get_many)(chunk))
            except Exception as exc:
                logger.warning("Could not read the relayed run log %r.", key, exc_info=_bug(exc))
                return [None]
        return [found.get(name) for name in names]

    async def last_seq(
        self, owner_id: str, thread_id: str, run_id: str, *, epoch: int = 0
    ) -> int | None:
        """The newest sequence number relayed for the run's execution ``epoch``, or ``None``
        (no log in the cache)."""
        head = await self._get(f"{self._key(owner_id, thread_id, run_id, epoch)}:head")
        return max(int(head["last_seq"]), epoch_base(epoch)) if isinstance(head, dict) else None

    async def ended(self, owner_id: str, thread_id: str, run_id: str, *, epoch: int = 0) -> bool:
        """Whether the relayed log of the run's execution ``epoch`` holds its terminal event
        (it ended for its readers)."""
        head = await self._get(f"{self._key(owner_id, thread_id, run_id, epoch)}:head")
        return isinstance(head, dict) and bool(head.get("terminal"))

    async def follow(
        self,
        owner_id: str,
        thread_id: str,
        run_id: str,
        *,
        epoch: int = 0,
        grace: float = 0.0,
        strict: bool = True,
    ) -> RelayedLog | None:
        """The relayed log of the run's execution ``epoch``, or ``None`` when the cache holds
        none (or only part of one).

        ``grace`` seconds are allowed for the log to appear (a run that just started). With
        ``strict``, a cache that cannot be reached raises ``CacheUnavailableError`` (routes
        answer it with a 503): whether the run has a log cannot be told then; without, that
        is ``None`` too.
        """
        key = self._key(owner_id, thread_id, run_id, epoch)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        head = await self._get(f"{key}:head", strict=strict)
        while not isinstance(head, dict) and loop.time() < deadline:
            await asyncio.sleep(self.interval)
            head = await self._get(f"{key}:head")
        if not isinstance(head, dict):
            return None
        batches = await self._batches(key, 1, int(head["batches"]))
        if any(batch is None for batch in batches):
            return None
        return RelayedLog(self, key, head, batches, epoch=epoch)
