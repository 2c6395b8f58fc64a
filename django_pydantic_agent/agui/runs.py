"""Durable runs: the mount's run manager, its run records, the sweeper and cancel intents.

``RunCoordinator`` owns the mount's ``StreamPersistenceManager`` (one per ``AGUIServer``): every
persisting run executes in a task it owns, so a client that goes away stops only its reading.
It claims a thread for a new run (``claim``: a second run on a busy thread is refused with
``ThreadBusy``, or, under ``concurrent_runs="interrupt"``, the first is cancelled and waited
for; a run of this worker that has ended for its readers and only stores its last writes is
waited for, bounded), then starts it (``start``).
As the manager's ``RunObserver`` it keeps the run's record in the run store (``running`` at
start, a heartbeat with the last sequence number, the final status and token usage at the end:
``RUN_FINISHED``'s, or for a run stopped or failed before it, what its agent reached, from
``metering``),
relays each live run's log to Django's cache (``relay.RunRelay``), and reads the run's cancel
intent from the cache at most every ``CANCEL_POLL_SECONDS``, after events and from the relay's
tick alike (so a model silent between events is still stopped), so a cancel posted to any
worker stops the run on the worker that runs it. It also owns the mount's sweeper: a periodic
task (started by the mount's first request, or by ``start_sweeper()``) that finalises runs
whose worker died, at most once per interval across every worker sharing Django's cache
(``sweep``).

The routes that read and cancel a run (``RunEndpoints``) are in ``agui.reattach``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import os
import secrets
import socket
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from ag_ui.core import (
    BaseEvent,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunStartedEvent,
)
from asgiref.sync import sync_to_async
from django.db import connections

from django_pydantic_agent.agui.drain import DrainReport
from django_pydantic_agent.agui.metering import MetersUsage
from django_pydantic_agent.agui.options import (
    DEFAULT_MAX_RESUMES,
    DEFAULT_RUN_HEARTBEAT_SECONDS,
    DEFAULT_SWEEP_INTERVAL_SECONDS,
    ConcurrentRuns,
    OnWorkerLoss,
)
from django_pydantic_agent.agui.relay import (
    RELAY_INTERVAL_SECONDS,
    RunRelay,
    run_digest,
)
from django_pydantic_agent.chat_history import (
    RunHandle,
    StreamPersistenceManager,
)
from django_pydantic_agent.chat_history.errors import RunFencedError
from django_pydantic_agent.chat_history.manager import (
    TERMINAL_EVENT_TYPES,
    RunObserver,
)
from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.persistence.outages import OutageLog, is_outage, retry_outage
from django_pydantic_agent.persistence.runs import (
    DEFAULT_LEASE_SECONDS,
    HandOverRunStore,
    HeldRun,
    ResumableRunStore,
    RunRecord,
    RunStatus,
    RunStore,
    TakesFence,
)

__all__ = [
    "CANCEL_POLL_SECONDS",
    "DEFAULT_SWEEP_INTERVAL_SECONDS",
    "HANDED_OVER_ERROR",
    "HAND_OVER_WAIT_SECONDS",
    "SETTLE_SECONDS",
    "SWEEP_LEASE_PREFIX",
    "THREAD_BUSY",
    "RunCoordinator",
    "ThreadBusy",
]

logger = logging.getLogger("django_pydantic_agent.agui")


#: The longest the owning worker goes without reading a run's cancel intent while it streams.
CANCEL_POLL_SECONDS: Final[float] = 0.5
#: The longest a thread read waits for a finished run's last writes (``RunCoordinator.settle``).
SETTLE_SECONDS: Final[float] = 5.0
_CANCEL_PREFIX = "django_pydantic_agent:cancel"
_CANCEL_TTL = 24 * 3600
#: This process, as the ``worker`` of the runs it executes: its host and pid, and a token, since
#: a restarted container often has the same host name and pid as the process it replaces.
WORKER_ID: Final[str] = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
#: How long a drain waits for the runs it handed over to store what they streamed.
HAND_OVER_WAIT_SECONDS: Final[float] = 10.0
#: The error of a handed-over run whose store cannot leave it to another worker.
HANDED_OVER_ERROR: Final[str] = "The run's worker shut down before the run ended."
#: The error of a run taken over for a resume that could not be started again.
RESUME_FAILED: Final[str] = "The run's worker stopped, and the run could not be resumed."
#: A resumer: ``(run input, agent factory arguments, the thread's stored messages)`` to run a
#: taken-over run again with, the messages as ``GET threads/<id>/`` shows them (its snapshot).
Resumer = Callable[[RunRecord], Awaitable[tuple[Any, tuple[Any, ...], list[Any]]]]
#: The cache key prefix of the sweep lease (``<prefix>:<run store class>``, value: the worker).
SWEEP_LEASE_PREFIX: Final[str] = "django_pydantic_agent:sweep"
#: The refusal of a second run on a busy thread (``concurrent_runs="reject"``).
THREAD_BUSY = (
    "Thread {thread_id!r} is running run {run_id!r}; wait for it to end, cancel it "
    "(POST runs/<thread_id>/<run_id>/cancel/), or reattach to it."
)


class ThreadBusy(Exception):
    """``RunCoordinator.claim`` refused a run: its thread is busy, or the run already ran.

    The message is a full sentence for the client (the run endpoint answers it as a 409).
    """


def _close_old_connections() -> None:
    """Django's ``close_old_connections`` for a thread no request cycle cleans up after.

    A connection inside an atomic block (a test's transaction, say) is left alone: closing it
    would break the transaction around it.
    """
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def _cancel_elsewhere(task: asyncio.Task[Any]) -> None:
    """Cancel a task of another event loop (a closed loop's task is gone with it)."""
    loop = task.get_loop()
    if not loop.is_closed():
        loop.call_soon_threadsafe(task.cancel)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _status_of_end(event: BaseEvent) -> str:
    """The run status the agent's terminal ``event`` ends the run with."""
    if isinstance(event, RunErrorEvent):
        return RunStatus.ERRORED.value
    outcome = getattr(event, "outcome", None)
    kind = getattr(outcome, "type", None)
    if kind == "cancelled":
        return RunStatus.INTERRUPTED.value
    return RunStatus.INTERRUPT.value if kind == "interrupt" else RunStatus.COMPLETE.value


def _error_of(event: BaseEvent | None) -> str:
    """The record's ``error`` for a ``RUN_ERROR`` (``[code] message``), else ``""``."""
    if not isinstance(event, RunErrorEvent):
        return ""
    return f"[{event.code}] {event.message}" if event.code else event.message


def _status_of(handle: RunHandle) -> str:
    status = handle.status
    return RunStatus.ERRORED.value if status == "running" else status


def _usage_of(event: BaseEvent | None) -> dict[str, Any] | None:
    usage = getattr(event, "usage", None)
    if not usage:
        return None
    return {"tokens": [entry.model_dump(exclude_none=True) for entry in usage]}


def _meter_of(parts: tuple[Any, ...]) -> MetersUsage | None:
    """The part of a run's agent that meters its usage (its inner agent), if any."""
    return next((part for part in parts if implements(part, MetersUsage)), None)


def _reached(meter: MetersUsage | None) -> dict[str, Any] | None:
    """What a run stopped or failed before its ``RUN_FINISHED`` usage reached, if metered."""
    return None if meter is None else meter.usage_reached()


class RunCoordinator(RunObserver):
    """The mount's runs: its manager, their records in ``run_store``, their cancel intents.

    ``agent_factory(*args)`` builds the agent of one run, inside the run's task. Producers
    run in a fresh ``contextvars.Context``: they outlive their request, so nothing
    request-scoped (asgiref's per-request thread) may follow them. A finished run is not
    retained in memory: reattaching to it is answered from storage, on every worker alike.
    ``concurrent_runs`` and ``wait_seconds`` are how ``claim`` treats a busy thread.
    """

    _instances: weakref.WeakSet[RunCoordinator] = weakref.WeakSet()
    # Only a terminal event needs on_event (the relay publishes it at once), and the cancel
    # intent is read at most every CANCEL_POLL_SECONDS: an event costs the producer no hook.
    observed_event_types = TERMINAL_EVENT_TYPES
    cancel_poll_seconds = CANCEL_POLL_SECONDS

    def __init__(
        self,
        agent_factory: Callable[..., Any],
        *,
        run_store: RunStore,
        heartbeat_seconds: float = DEFAULT_RUN_HEARTBEAT_SECONDS,
        cache_alias: str = "default",
        relay_interval: float = RELAY_INTERVAL_SECONDS,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        sweep_interval_seconds: float = DEFAULT_SWEEP_INTERVAL_SECONDS,
        concurrent_runs: ConcurrentRuns = "reject",
        wait_seconds: float = 10.0,
        on_worker_loss: OnWorkerLoss = "error",
        max_resumes: int = DEFAULT_MAX_RESUMES,
    ) -> None:
        self.run_store = run_store
        self.heartbeat_seconds = heartbeat_seconds
        self.on_worker_loss = on_worker_loss
        self.max_resumes = max_resumes
        #: Builds a taken-over run again (set by the run endpoint: it knows the agent).
        self.resumer: Resumer | None = None
        #: Told the records of runs that ended, however they ended (here, by the sweeper, by a
        #: failed resume); it must not raise (``AGUIServer(webhooks=...)`` sets it).
        self.on_run_end: Callable[[list[RunRecord]], Awaitable[None]] | None = None
        self._draining = False
        self.concurrent_runs = concurrent_runs
        self.wait_seconds = wait_seconds
        self._cache_alias = cache_alias
        self.relay = RunRelay(
            cache_alias=cache_alias, interval=relay_interval, on_tick=self._poll_cancel
        )
        self.lease_seconds = lease_seconds
        self.sweep_interval_seconds = sweep_interval_seconds
        self._sweeper: asyncio.Task[None] | None = None
        self._owners: dict[RunHandle, str] = {}
        self._last_cancel_check: dict[RunHandle, float] = {}
        self._meters: dict[RunHandle, MetersUsage] = {}
        self.manager: StreamPersistenceManager[Any] = StreamPersistenceManager(
            agent_factory,
            cancel_event="run_finished",
            observer=self,
            heartbeat_interval=heartbeat_seconds,
            context=contextvars.Context,
            finished_run_retention=0.0,
        )
        self._handles: set[RunHandle] = set()
        self._outages = OutageLog(logger)
        self._last_beat = -math.inf  # when this worker last renewed its runs (monotonic)
        RunCoordinator._instances.add(self)

    # -- claiming a thread and starting a run --------------------------------------------

    async def claim(
        self,
        owner_id: str,
        thread_id: str,
        run_id: str,
        *,
        resume_input: dict[str, Any] | None = None,
    ) -> None:
        """Record the run as ``running`` on its thread, or raise ``ThreadBusy``.

        Refused when the run already ran, or the thread runs another run (under
        ``concurrent_runs="interrupt"`` that run is cancelled and waited for, bounded by
        ``wait_seconds``, first). A run that has ended for its readers and only stores its last
        writes is waited for (bounded) instead of refusing.
        """
        store = self.run_store
        for _attempt in range(2):
            kept = {"resume_input": resume_input} if self.resuming and resume_input else {}
            record, started = await store.start(
                owner_id=owner_id, thread_id=thread_id, run_id=run_id, worker_id=WORKER_ID, **kept
            )
            if started:
                return
            if record.run_id == run_id:
                raise ThreadBusy(
                    f"Run {run_id!r} already ran on thread {thread_id!r} ({record.status}); "
                    "start a new run with a new runId, or reattach to this one."
                )
            if await self._finishing(owner_id, thread_id, record.run_id):
                continue  # it ended for its readers and has now stored its last events
            if self.concurrent_runs != "interrupt":
                raise ThreadBusy(THREAD_BUSY.format(thread_id=thread_id, run_id=record.run_id))
            await self.request_cancel(owner_id, thread_id, record.run_id)
            await self._wait_until_idle(owner_id, thread_id, record.run_id)
        raise ThreadBusy(THREAD_BUSY.format(thread_id=thread_id, run_id="?"))

    async def _finishing(self, owner_id: str, thread_id: str, run_id: str) -> bool:
        """Wait (a bounded time) for a run of this worker that already sent its terminal event
        and is still storing its last events; ``True`` once it is done.

        A client sends its next turn as soon as it reads ``RUN_FINISHED``: that turn must not
        find the thread busy with a run that has ended for every reader.
        """
        handle = self.manager.get(thread_id, run_id, owner=owner_id)
        if handle is None:
            return await self._finishing_elsewhere(owner_id, thread_id, run_id)
        if handle.terminal_event is None:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(handle.wait(), timeout=self.wait_seconds)
        return handle.done()

    async def _finishing_elsewhere(self, owner_id: str, thread_id: str, run_id: str) -> bool:
        """The same for a run this worker does not hold: ``True`` once its record has ended.

        It may have ended between the claim's read and now; or it runs on another worker and
        has relayed its terminal event, and then its record is waited for (bounded).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        while True:
            record = await self.run_store.get(owner_id=owner_id, thread_id=thread_id, run_id=run_id)
            if record is None or not record.running:
                return True
            ended = await self.relay.ended(owner_id, thread_id, run_id, epoch=record.resumes)
            if loop.time() >= deadline or not ended:
                return False
            await asyncio.sleep(0.05)

    async def _wait_until_idle(self, owner_id: str, thread_id: str, run_id: str) -> None:
        """Wait (a bounded time) for a cancelled run to end, here or on another worker."""
        handle = self.manager.get(thread_id, run_id, owner=owner_id)
        if handle is not None:
            with contextlib.suppress(TimeoutError):  # still running: the claim refuses
                await asyncio.wait_for(handle.wait(), timeout=self.wait_seconds)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        while loop.time() < deadline:
            record = await self.run_store.get(owner_id=owner_id, thread_id=thread_id, run_id=run_id)
            if record is None or not record.running:
                return
            await asyncio.sleep(0.1)

    async def start(self, owner_id: str, run_input: Any, *parts: Any) -> RunHandle:
        """Start the claimed run of ``run_input`` in the manager; ``parts`` are what the agent
        factory builds the run's agent from (repositories, user, inner agent)."""
        handle = await self.manager.run_as(owner_id, run_input, *parts)
        self.track(handle, owner_id, meter=_meter_of(parts))
        return handle

    async def active_run(self, owner_id: str, thread_id: str) -> dict[str, Any] | None:
        """``{"runId", "lastSeq"}`` of ``owner_id``'s running run on ``thread_id``, or ``None``."""
        record = await self.run_store.active_run_for_thread(owner_id=owner_id, thread_id=thread_id)
        if record is None:
            return None
        handle = self.manager.get(thread_id, record.run_id, owner=owner_id)
        if handle is not None:
            return {"runId": record.run_id, "lastSeq": handle.last_seq}
        # Running on another worker: its relayed log is fresher than the record's heartbeat.
        relayed = await self.relay.last_seq(
            owner_id, thread_id, record.run_id, epoch=record.resumes
        )
        return {"runId": record.run_id, "lastSeq": max(record.last_seq, relayed or 0)}

    async def wait_for_runs(self) -> None:
        """Return once every run this coordinator started is done, persistence included."""
        while self._handles:
            handles = list(self._handles)
            await asyncio.wait([asyncio.ensure_future(h.wait()) for h in handles])
            self._handles.difference_update(handles)

    async def drain(self, seconds: float) -> DrainReport:
        """Let this worker's runs end within ``seconds``, then hand the rest over.

        The sweeper stops first (a draining worker takes over nobody's runs). A run still going
        after ``seconds`` is stopped without ending (``RunHandle.hand_over``: what it streamed
        is stored ``interrupted``, its readers' streams end without a terminal event, its
        relayed log stays in the cache) and its record handed over to the next sweep of another
        worker (``HandOverRunStore.hand_over``); a store that cannot hand over ends it
        ``errored``. Their last writes are waited for, at most ``HAND_OVER_WAIT_SECONDS``.
        """
        self._draining = True
        await self.aclose()
        handles = list(self._handles)
        live = sum(1 for handle in handles if handle.terminal_event is None)
        if handles:
            await _wait_all(handles, seconds)
        rest = [handle for handle in self._handles if not handle.done()]
        handed = [handle for handle in rest if handle.hand_over()]
        for handle in handed:
            logger.warning(
                "Run %r of a thread was still running after the %s s drain; handed over.",
                handle.run_id,
                seconds,
            )
        if rest:
            await _wait_all(rest, HAND_OVER_WAIT_SECONDS)
        return DrainReport(finished=max(0, live - len(handed)), handed_over=len(handed))

    def end_drain(self) -> None:
        """Take runs over again after ``drain`` (a shutdown called off, or a test)."""
        self._draining = False

    @property
    def resuming(self) -> bool:
        """Whether runs whose worker drained or died are resumed (``on_worker_loss``)."""
        return self.on_worker_loss == "resume" and implements(self.run_store, ResumableRunStore)

    def fence(self, repository: object, run: HeldRun) -> None:
        """Make ``repository`` refuse the writes of ``run`` once another worker took it over
        (when the run store can resume runs and the repository takes a fence): a worker that
        stalled past the lease stops without writing over the run's next execution."""
        if implements(self.run_store, ResumableRunStore) and implements(repository, TakesFence):
            repository.fence = self.run_store.fence(run)

    async def take_over(
        self, run: tuple[str, str, str] | None = None
    ) -> tuple[list[RunHandle], list[RunRecord]]:
        """Take over the stale runs (only ``run``, an ``(owner, thread, run id)``, if given)
        and resume them here: ``(their handles, the runs ended errored instead)``, a run
        past ``max_resumes`` being ended. Nothing unless resuming, or while this worker drains.
        """
        store = self.run_store
        if not self.resuming or self._draining or self.resumer is None:
            return [], []
        assert implements(store, ResumableRunStore)
        taken, ended = await store.take_over(
            lease=self.lease_seconds, worker_id=WORKER_ID, max_resumes=self.max_resumes, run=run
        )
        handles = []
        for record in taken:
            try:
                handles.append(await self._resume(record))
            except Exception:
                logger.exception("Run %r could not be resumed; ending it errored.", record.run_id)
                failed = await store.finish(
                    owner_id=record.owner_id,
                    thread_id=record.thread_id,
                    run_id=record.run_id,
                    status=RunStatus.ERRORED.value,
                    error=RESUME_FAILED,
                )
                await self._ended([failed])
        await self._ended(ended)
        return handles, ended

    async def _resume(self, record: RunRecord) -> RunHandle:
        """Run a taken-over run again here, as its next execution (``record.resumes``).

        That execution's events are numbered from ``epoch_base(record.resumes) + 1``, and its
        log opens with ``RUN_STARTED`` and a ``MESSAGES_SNAPSHOT`` of the thread as stored
        now: a reader that saw anything of an earlier execution (even events its worker sent
        and never relayed or stored) is brought to exactly what is stored, then streams the
        rest (``docs/reliability.md``, "A worker that dies")."""
        assert self.resumer is not None
        owner_id, thread_id, run_id = record.owner_id, record.thread_id, record.run_id
        run_input, parts, stored = await self.resumer(record)
        openings: list[BaseEvent] = [
            RunStartedEvent(thread_id=thread_id, run_id=run_id, timestamp=_now_ms()),
            MessagesSnapshotEvent(messages=stored, timestamp=_now_ms()),
        ]
        handle = await self.manager.resume_as(owner_id, run_input, record.resumes, openings, *parts)
        if (meter := _meter_of(parts)) is not None:
            self._meters[handle] = meter
        logger.warning(
            "Run %r of a thread resumed here (resume %d of at most %d).",
            run_id,
            record.resumes,
            self.max_resumes,
        )
        self._owners[handle] = owner_id
        self._handles.add(handle)
        self._last_cancel_check[handle] = time.monotonic()
        self.relay.publish(handle, owner_id)
        return handle

    async def settle(self, owner_id: str, thread_id: str | None) -> None:
        """Wait (at most ``SETTLE_SECONDS``) for this worker's runs of ``owner_id`` on
        ``thread_id`` (``None``: any thread) that sent their terminal event to finish storing."""
        runs = self.manager.runs(thread_id, owner=owner_id)
        finalizing = [handle for handle in runs if handle.finalizing]
        if not finalizing:
            return
        waiters = [asyncio.ensure_future(handle.wait()) for handle in finalizing]
        _done, late = await asyncio.wait(waiters, timeout=SETTLE_SECONDS)
        for waiter in late:
            waiter.cancel()
        if late:
            await asyncio.wait(late)

    @classmethod
    async def wait_for_all_runs(cls) -> None:
        """``wait_for_runs`` of every live coordinator in this process (tests, shutdown)."""
        for coordinator in list(cls._instances):
            await coordinator.wait_for_runs()

    # -- the sweeper ----------------------------------------------------------------------

    @property
    def sweep_lease_key(self) -> str:
        """The cache key whose holder sweeps this interval (one per run store class)."""
        kind = type(self.run_store)
        return f"{SWEEP_LEASE_PREFIX}:{kind.__module__}.{kind.__qualname__}"

    def _claim_sweep(self) -> bool:
        _close_old_connections()
        # Whole seconds, rounded up: Redis and Memcached truncate a timeout to an integer, and
        # a lease shorter than the interval would let a second worker sweep within it.
        timeout = max(1, math.ceil(self.sweep_interval_seconds or 1))
        return bool(self._cache.add(self.sweep_lease_key, WORKER_ID, timeout))

    async def sweep(self) -> list[RunRecord] | None:
        """Sweep stale runs now, unless another worker swept within the interval.

        Takes the interval's lease first (``cache.add``, atomic on Redis and Memcached, so
        one worker of a deployment wins it); ``None`` when another worker holds it, else the
        runs finalised as ``errored`` (``run_store.sweep(lease=lease_seconds)``). Database
        connections of the sweeping thread are closed when old, before and after, since no
        request cycle does it for a background task.
        """
        if not await sync_to_async(self._claim_sweep)():
            return None
        try:
            if self.resuming and self.resumer is not None:
                resumed, ended = await self.take_over()
                if resumed:
                    logger.info("Resumed %d run(s) whose worker stopped.", len(resumed))
                return ended
            swept = await self.run_store.sweep(lease=self.lease_seconds)
            await self._ended(swept)
            return swept
        finally:
            await sync_to_async(_close_old_connections)()

    async def _sweep_forever(self) -> None:
        while True:
            try:
                swept = await self.sweep()
            except Exception as exc:
                if is_outage(exc):  # one line: the lease is taken again once it is back
                    self._outages.failed("Sweeping stale runs", exc)
                else:
                    logger.exception(
                        "Sweeping stale runs failed; retrying in %s s.",
                        self.sweep_interval_seconds,
                    )
            else:
                self._outages.recovered("Sweeping stale runs")
                if swept:
                    logger.info("Swept %d stale run(s) as errored.", len(swept))
            await asyncio.sleep(self.sweep_interval_seconds)

    def start_sweeper(self) -> bool:
        """Start the periodic sweep on the running event loop, once; whether it runs now.

        The first sweep happens at once (a start-up sweep), then every
        ``sweep_interval_seconds``; ``0`` never starts it. Safe to call on every request: the
        mount's views do. The task runs in a fresh ``contextvars.Context`` (nothing of the
        request that started it follows it) until ``aclose()``.
        """
        if not self.sweep_interval_seconds or self._draining:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        task = self._sweeper
        if task is not None and not task.done():
            if task.get_loop() is loop:
                return True
            _cancel_elsewhere(task)
        self._sweeper = loop.create_task(
            self._sweep_forever(),
            name=f"agent run sweeper ({type(self.run_store).__name__})",
            context=contextvars.Context(),
        )
        return True

    async def aclose(self) -> None:
        """Stop the sweeper (if running) and wait for it; the coordinator stays usable."""
        task, self._sweeper = self._sweeper, None
        if task is None or task.done():
            return
        if task.get_loop() is not asyncio.get_running_loop():
            _cancel_elsewhere(task)
            return
        task.cancel()
        await asyncio.wait({task})

    @classmethod
    async def aclose_all(cls) -> None:
        """``aclose`` every live coordinator of this process (test teardown, shutdown)."""
        for coordinator in list(cls._instances):
            await coordinator.aclose()

    # -- the cancel intent ----------------------------------------------------------------

    @property
    def _cache(self) -> Any:
        from django.core.cache import caches

        return caches[self._cache_alias]

    def _cancel_key(self, owner_id: str, thread_id: str, run_id: str) -> str:
        return f"{_CANCEL_PREFIX}:{run_digest(owner_id, thread_id, run_id)}"

    async def request_cancel(self, owner_id: str, thread_id: str, run_id: str) -> None:
        """Record a durable cancel intent for the run, and stop it now if it runs here."""
        key = self._cancel_key(owner_id, thread_id, run_id)
        await sync_to_async(self._cache.set)(key, True, _CANCEL_TTL)
        handle = self.manager.get(thread_id, run_id, owner=owner_id)
        if handle is not None and handle.cancel():
            self.relay.nudge(handle)

    # -- RunObserver ----------------------------------------------------------------------

    def track(self, handle: RunHandle, owner_id: str, *, meter: MetersUsage | None = None) -> None:
        """Remember the run-store owner of a run this coordinator started (and the ``meter``
        of its usage); start its relay."""
        self._owners[handle] = owner_id
        if meter is not None:
            self._meters[handle] = meter
        self._handles.add(handle)
        # Its first poll of the cancel intent comes one interval in, not at its first event:
        # nobody can have asked to cancel a run before it started, and the first event is
        # the one a client waits for.
        self._last_cancel_check[handle] = time.monotonic()
        self.relay.publish(handle, owner_id)

    async def _poll_cancel(self, handle: RunHandle) -> None:
        """The relay's tick: stop the run if its cancel intent is set (polls are throttled)."""
        if handle.terminal_event is None and await self.cancel_requested(handle):
            handle.cancel()
            self.relay.nudge(handle)

    async def on_event(self, handle: RunHandle, seq: int, event: BaseEvent) -> None:
        if event.type in TERMINAL_EVENT_TYPES:
            self.relay.nudge(handle)

    async def before_end(self, handle: RunHandle, event: BaseEvent) -> None:
        """End the run's record with the agent's terminal event before any reader sees it
        (the storage agent stored what it ends first): a worker that dies right after it sent
        ``RUN_FINISHED`` leaves a finished run, never one to resume. A record another worker
        took over meanwhile is left alone, and the run stops here (``RunFencedError``)."""
        owner_id = self._owners.get(handle)
        if owner_id is None or handle.handed_over:
            return
        resumable = implements(self.run_store, ResumableRunStore)
        status = _status_of_end(event)
        ended = await self.run_store.finish(
            owner_id=owner_id,
            thread_id=handle.thread_id,
            run_id=handle.run_id,
            status=status,
            usage=_usage_of(event) or _reached(self._meters.get(handle)),
            last_seq=handle.last_seq + 1,
            error=_error_of(event),
            **({"epoch": handle.epoch} if resumable else {}),
        )
        if resumable and (ended is None or ended.resumes != handle.epoch or ended.status != status):
            raise RunFencedError(handle.run_id, handle.epoch)
        await self._ended([ended])

    async def _ended(self, records: Iterable[RunRecord | None]) -> None:
        """Tell ``on_run_end`` about the runs of ``records`` that ended (none: no call)."""
        ended = [record for record in records if record is not None and not record.running]
        if ended and self.on_run_end is not None:
            await self.on_run_end(ended)

    async def cancel_requested(self, handle: RunHandle) -> bool:
        owner_id = self._owners.get(handle)
        if owner_id is None:
            return False
        now = time.monotonic()
        if now - self._last_cancel_check.get(handle, 0.0) < CANCEL_POLL_SECONDS:
            return False
        self._last_cancel_check[handle] = now
        key = self._cancel_key(owner_id, handle.thread_id, handle.run_id)
        try:
            requested = await sync_to_async(self._cache.get)(key)
        except Exception as exc:
            if not is_outage(exc):
                raise
            self._outages.failed("Reading cancel intents from the cache", exc)
            return False  # the run goes on; the intent is read again once the cache is back
        self._outages.recovered("Reading cancel intents from the cache")
        return bool(requested)

    async def on_heartbeat(self, handle: RunHandle) -> None:
        """Renew the run's lease: every run of this worker at once (``beat``) where the run
        store can, else this run's record."""
        owner_id = self._owners.get(handle)
        if owner_id is None or handle.finalizing:
            return
        store = self.run_store
        try:
            if implements(store, ResumableRunStore):
                now = time.monotonic()
                if now - self._last_beat < self.heartbeat_seconds / 2:
                    return  # another run's heartbeat renewed them all just now
                self._last_beat = now
                await self._beat(store)
            else:
                await store.heartbeat(
                    owner_id=owner_id,
                    thread_id=handle.thread_id,
                    run_id=handle.run_id,
                    last_seq=handle.last_seq,
                )
        except Exception as exc:
            if not is_outage(exc):
                raise
            # The next heartbeat renews the lease; one line per outage, not per beat.
            self._outages.failed("Renewing run heartbeats", exc)
        else:
            self._outages.recovered("Renewing run heartbeats")

    async def _beat(self, store: ResumableRunStore) -> None:
        """Renew the lease of every run this worker executes in one write, and stop those
        another worker took over meanwhile (this worker stalled past their lease)."""
        held = {
            HeldRun(owner_id, handle.thread_id, handle.run_id, handle.epoch): handle
            for handle, owner_id in list(self._owners.items())
            if not handle.done() and not handle.handed_over
        }
        if not held:
            return
        for run in await store.beat(worker_id=WORKER_ID, runs=list(held)):
            if held[run].fence():
                logger.warning(
                    "Run %r was taken over by another worker (this worker stalled past its "
                    "lease); stopped here without writing.",
                    run.run_id,
                )

    async def on_done(self, handle: RunHandle) -> None:
        try:
            await self._finish(handle)
        finally:
            # A finished run is answered from storage: holding its handle (and its log) would
            # keep every run this worker ever served in memory.
            self._handles.discard(handle)

    async def _finish(self, handle: RunHandle) -> None:
        await self.relay.finish(handle, retire=not handle.handed_over or handle.fenced)
        owner_id = self._owners.pop(handle, None)
        self._last_cancel_check.pop(handle, None)
        meter = self._meters.pop(handle, None)
        if owner_id is None or handle.fenced:
            return  # a fenced run's record belongs to the worker that took it over
        # A store that resumes runs changes the record only while it is in this execution.
        fenced: dict[str, int] = {}
        if implements(self.run_store, ResumableRunStore):
            fenced = {"epoch": handle.epoch}
        if handle.handed_over and implements(self.run_store, HandOverRunStore):
            await self.run_store.hand_over(
                owner_id=owner_id,
                thread_id=handle.thread_id,
                run_id=handle.run_id,
                last_seq=handle.last_seq,
                **fenced,
            )
            return
        terminal = handle.terminal_event
        error = HANDED_OVER_ERROR if handle.handed_over else _error_of(terminal)
        usage = _usage_of(terminal) or _reached(meter)
        # Retried (bounded) while the run store is out: a run whose record stayed running
        # would be swept as errored, its stored answer complete. Its end is told again: once
        # ended in ``before_end``, telling it twice is one event.
        record = await retry_outage(
            lambda: self.run_store.finish(
                owner_id=owner_id,
                thread_id=handle.thread_id,
                run_id=handle.run_id,
                status=_status_of(handle),
                usage=usage,
                last_seq=handle.last_seq,
                error=error,
                **fenced,
            ),
            what=f"Ending run {handle.run_id!r}",
            log=logger,
        )
        await self._ended([record])


async def _wait_all(handles: list[RunHandle], seconds: float) -> None:
    """Wait (at most ``seconds``) until every run of ``handles`` is done."""
    waiters = [asyncio.ensure_future(handle.wait()) for handle in handles]
    _done, late = await asyncio.wait(waiters, timeout=seconds)
    for waiter in late:
        waiter.cancel()
    if late:
        await asyncio.wait(late)
