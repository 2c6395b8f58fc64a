"""Durable runs: the mount's run manager, its run records, reattach and cancel.

``RunCoordinator`` owns the mount's ``StreamPersistenceManager`` (one per ``AGUIServer``): every
persisting run executes in a task it owns, so a client that goes away stops only its reading.
It claims a thread for a new run (``claim``: a second run on a busy thread is refused with
``ThreadBusy``, or, under ``concurrent_runs="interrupt"``, the first is cancelled and waited
for; a run of this worker that has ended for its readers and only stores its last writes is
waited for, bounded), then starts it (``start``).
As the manager's ``RunObserver`` it keeps the run's record in the run store (``running`` at
start, a heartbeat with the last sequence number, the final status and token usage at the end),
relays each live run's log to Django's cache (``relay.RunRelay``), and reads the run's cancel
intent from the cache at most every ``CANCEL_POLL_SECONDS``, after events and from the relay's
tick alike (so a model silent between events is still stopped), so a cancel posted to any
worker stops the run on the worker that runs it. It also owns the mount's sweeper: a periodic
task (started by the mount's first request, or by ``start_sweeper()``) that finalises runs
whose worker died, at most once per interval across every worker sharing Django's cache
(``sweep``).

``RunEndpoints`` are the ``runs/<thread_id>/<run_id>/`` routes: ``GET`` reattaches (the run's
log after ``?after=<seq>`` or ``Last-Event-ID``, opened with ``RUN_STARTED`` and every message
still streaming re-opened, then the live tail, from this worker's handle or, for a run running
on another worker, from the relayed log in the cache; a finished run, or one whose log the
cache does not hold, answers from storage with ``MESSAGES_SNAPSHOT`` and its terminal event),
``POST .../cancel/`` cancels. Both are owner-checked through the run store: a stranger's run is
a 404 exactly like a missing one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import os
import socket
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

from ag_ui.core import (
    BaseEvent,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunStartedEvent,
)
from asgiref.sync import sync_to_async
from django.db import connections
from django.http import HttpRequest, HttpResponseBase, JsonResponse

from django_pydantic_agent.agui.drain import DrainReport
from django_pydantic_agent.agui.http import error_response
from django_pydantic_agent.agui.options import (
    DEFAULT_MAX_RESUMES,
    DEFAULT_SWEEP_INTERVAL_SECONDS,
    ConcurrentRuns,
    OnWorkerLoss,
)
from django_pydantic_agent.agui.relay import (
    RELAY_INTERVAL_SECONDS,
    OpenStreams,
    RelayedLog,
    RunRelay,
    event_id,
    replay_entries,
    run_digest,
)
from django_pydantic_agent.agui.sse import aclose, encode_event, sse_response, with_heartbeat
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.chat_history import (
    RunHandle,
    StreamPersistenceManager,
    translate_messages,
)
from django_pydantic_agent.chat_history.manager import (
    CATCH_UP_BATCH,
    TERMINAL_EVENT_TYPES,
    RunObserver,
)
from django_pydantic_agent.persistence import StoreError, resolve_owner_id, serves_anonymous
from django_pydantic_agent.persistence.outages import OutageLog, is_outage, retry_outage
from django_pydantic_agent.persistence.runs import (
    DEFAULT_LEASE_SECONDS,
    HandOverRunStore,
    ResumableRunStore,
    RunRecord,
    RunStatus,
    RunStore,
)

__all__ = [
    "CANCEL_POLL_SECONDS",
    "DEFAULT_SWEEP_INTERVAL_SECONDS",
    "HANDED_OVER_ERROR",
    "HAND_OVER_WAIT_SECONDS",
    "RUN_NOT_FOUND",
    "SETTLE_SECONDS",
    "SWEEP_LEASE_PREFIX",
    "THREAD_BUSY",
    "RunCoordinator",
    "RunEndpoints",
    "ThreadBusy",
    "event_id",
    "parse_after",
]

logger = logging.getLogger("django_pydantic_agent.agui")


#: The 404 of the run routes (a stranger's run reads the same).
RUN_NOT_FOUND: Final[str] = "No such run."
#: The longest the owning worker goes without reading a run's cancel intent while it streams.
CANCEL_POLL_SECONDS: Final[float] = 0.5
#: The longest a thread read waits for a finished run's last writes (``RunCoordinator.settle``).
SETTLE_SECONDS: Final[float] = 5.0
_CANCEL_PREFIX = "django_pydantic_agent:cancel"
_CANCEL_TTL = 24 * 3600
# How long a reattach waits for another worker's relayed log to appear, or to catch up with
# the ``after`` its client saw (the relay lags the live stream by up to one interval).
_RELAY_GRACE_SECONDS = 1.0
#: This process, as the ``worker`` of the runs it executes.
WORKER_ID: Final[str] = f"{socket.gethostname()}:{os.getpid()}"
#: How long a drain waits for the runs it handed over to store what they streamed.
HAND_OVER_WAIT_SECONDS: Final[float] = 10.0
#: The error of a handed-over run whose store cannot leave it to another worker.
HANDED_OVER_ERROR: Final[str] = "The run's worker shut down before the run ended."
#: The error of a run taken over for a resume that could not be started again.
RESUME_FAILED: Final[str] = "The run's worker stopped, and the run could not be resumed."
#: A resumer: ``(run input, agent factory arguments)`` to run a taken-over run again with.
Resumer = Callable[[RunRecord], Awaitable[tuple[Any, tuple[Any, ...]]]]
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


def parse_after(request: HttpRequest, run_id: str) -> int | None:
    """The sequence number a reattaching client saw last: ``?after=`` or ``Last-Event-ID``.

    ``0`` when neither is sent; ``None`` when either is malformed (not a non-negative
    integer, or a ``Last-Event-ID`` of another run).
    """
    raw = request.GET.get("after")
    if raw is None:
        last = request.headers.get("Last-Event-ID")
        if last is None:
            return 0
        run, sep, raw = last.rpartition(":")
        if not sep or run != run_id:
            return None
    if not raw.isdigit():
        return None
    return int(raw)


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


def _status_of(handle: RunHandle) -> str:
    status = handle.status
    return RunStatus.ERRORED.value if status == "running" else status


def _usage_of(event: BaseEvent | None) -> dict[str, Any] | None:
    usage = getattr(event, "usage", None)
    if not usage:
        return None
    return {"tokens": [entry.model_dump(exclude_none=True) for entry in usage]}


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
        heartbeat_seconds: float = 10.0,
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
            if loop.time() >= deadline or not await self.relay.ended(owner_id, thread_id, run_id):
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
        self.track(handle, owner_id)
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
        relayed = await self.relay.last_seq(owner_id, thread_id, record.run_id)
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
        return self.on_worker_loss == "resume" and isinstance(self.run_store, ResumableRunStore)

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
        assert isinstance(store, ResumableRunStore)
        taken, ended = await store.take_over(
            lease=self.lease_seconds, worker_id=WORKER_ID, max_resumes=self.max_resumes, run=run
        )
        handles = []
        for record in taken:
            try:
                handles.append(await self._resume(record))
            except Exception:
                logger.exception("Run %r could not be resumed; ending it errored.", record.run_id)
                await store.finish(
                    owner_id=record.owner_id,
                    thread_id=record.thread_id,
                    run_id=record.run_id,
                    status=RunStatus.ERRORED.value,
                    error=RESUME_FAILED,
                )
        return handles, ended

    async def _resume(self, record: RunRecord) -> RunHandle:
        """Run a taken-over run again here, its log going on from where its worker stopped:
        from the relayed log when the cache holds it whole, else from the record's
        ``last_seq``. Events its worker streamed and did not relay (a kill lands within one
        relay interval of them) are numbered again; ``replay`` sends a reader that saw them
        the new ones up to its last id without ids."""
        assert self.resumer is not None
        owner_id, thread_id, run_id = record.owner_id, record.thread_id, record.run_id
        run_input, parts = await self.resumer(record)
        relayed = await self.relay.logged(owner_id, thread_id, run_id)
        batches, logged = (0, []) if relayed is None else relayed
        streams = OpenStreams()
        for event in logged:
            streams.fold(event)
        base = len(logged) or record.last_seq
        seed = (base, logged, streams.closings())
        handle = await self.manager.resume_as(owner_id, run_input, seed, *parts)
        logger.warning(
            "Run %r of a thread resumed here from event %d (resume %d of at most %d).",
            run_id,
            base,
            record.resumes,
            self.max_resumes,
        )
        self._owners[handle] = owner_id
        self._handles.add(handle)
        self._last_cancel_check[handle] = time.monotonic()
        self.relay.publish(handle, owner_id, seq=base, batches=batches)
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
            return await self.run_store.sweep(lease=self.lease_seconds)
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

    def track(self, handle: RunHandle, owner_id: str) -> None:
        """Remember the run-store owner of a run this coordinator started; start its relay."""
        self._owners[handle] = owner_id
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
        owner_id = self._owners.get(handle)
        if owner_id is not None and not handle.finalizing:
            try:
                await self.run_store.heartbeat(
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

    async def on_done(self, handle: RunHandle) -> None:
        try:
            await self._finish(handle)
        finally:
            # A finished run is answered from storage: holding its handle (and its log) would
            # keep every run this worker ever served in memory.
            self._handles.discard(handle)

    async def _finish(self, handle: RunHandle) -> None:
        await self.relay.finish(handle, retire=not handle.handed_over)
        owner_id = self._owners.pop(handle, None)
        self._last_cancel_check.pop(handle, None)
        if owner_id is None:
            return
        if handle.handed_over and isinstance(self.run_store, HandOverRunStore):
            await self.run_store.hand_over(
                owner_id=owner_id,
                thread_id=handle.thread_id,
                run_id=handle.run_id,
                last_seq=handle.last_seq,
            )
            return
        terminal = handle.terminal_event
        error = HANDED_OVER_ERROR if handle.handed_over else ""
        if isinstance(terminal, RunErrorEvent):
            error = f"[{terminal.code}] {terminal.message}" if terminal.code else terminal.message
        # Retried (bounded) while the run store is out: a run whose record stayed running
        # would be swept as errored, its stored answer complete.
        await retry_outage(
            lambda: self.run_store.finish(
                owner_id=owner_id,
                thread_id=handle.thread_id,
                run_id=handle.run_id,
                status=_status_of(handle),
                usage=_usage_of(terminal),
                last_seq=handle.last_seq,
                error=error,
            ),
            what=f"Ending run {handle.run_id!r}",
            log=logger,
        )


async def _wait_all(handles: list[RunHandle], seconds: float) -> None:
    """Wait (at most ``seconds``) until every run of ``handles`` is done."""
    waiters = [asyncio.ensure_future(handle.wait()) for handle in handles]
    _done, late = await asyncio.wait(waiters, timeout=seconds)
    for waiter in late:
        waiter.cancel()
    if late:
        await asyncio.wait(late)


def replay(
    handle: RunHandle,
    after: int,
    *,
    heartbeat_seconds: float | None = None,
    coalesce_seconds: float = 0.0,
    cancel_on_close: bool = False,
) -> AsyncIterator[str]:
    """SSE frames of ``handle`` for a reader that saw up to ``after``, then the live tail.

    With ``cancel_on_close`` (``on_disconnect="cancel"``), closing the frames before the run
    ended (a disconnect) cancels the run; otherwise it stops only the reading.

    With ``heartbeat_seconds``, ``SSE_HEARTBEAT`` goes out whenever the run is silent that
    long: the reader waits on the log with a timeout, in its own task, so a durable stream
    needs no pump task (``with_heartbeat``) between the log and the response. The events
    logged since the reader's last write go out together, in one write; with
    ``coalesce_seconds``, a live reader writes at most that often while events keep coming
    (`RunHandle.sequenced_batches`).

    ``after == 0`` replays the whole log with its ids. Otherwise the run's ``RUN_STARTED`` and
    the start of every message, tool call and reasoning step still open at ``after`` come
    first, without ids (they were seen before), then each event after ``after`` with its id.
    A run stopped mid-message (cancelled) gets the missing ``*_END`` events, without ids,
    before its terminal event, so AG-UI clients' verifiers accept the stream. A reader that
    saw the terminal event gets ``RUN_STARTED`` and the terminal event again, without ids.
    """
    seen: int | None = None
    if handle.resumed_at is not None and after > handle.resumed_at:
        # The reader saw events its run's first worker took with it: the resumed run
        # numbered its own from where that worker's log stopped.
        after, seen = handle.resumed_at, after
    terminal = handle.terminal_event
    if after and terminal is not None and after == handle.last_seq:
        # The reader saw the end: the run's start and its end again, without ids.
        started = RunStartedEvent(thread_id=handle.thread_id, run_id=handle.run_id)
        return _frames_of(started, terminal)
    batches = handle.sequenced_batches(
        after=0,
        idle=heartbeat_seconds or None,
        # Without coalescing, each event is written on its own, as it was logged.
        max_batch=CATCH_UP_BATCH if coalesce_seconds else 1,
        coalesce=coalesce_seconds,
    )
    frames = replay_entries(batches, handle.run_id, after, seen=seen)
    return _cancelling(handle, frames) if cancel_on_close else frames


async def _cancelling(handle: RunHandle, frames: AsyncIterator[str]) -> AsyncIterator[str]:
    """``frames``, cancelling the run of ``handle`` if they are closed before it ended."""
    try:
        async for frame in frames:
            yield frame
    finally:
        await aclose(frames)
        if handle.terminal_event is None:
            handle.cancel()


async def _frames_of(*events: BaseEvent) -> AsyncIterator[str]:
    for event in events:
        yield encode_event(event)


def _beyond(run_id: str, after: int, last_seq: int) -> HttpResponseBase:
    return error_response(
        400,
        f"after={after} is beyond run {run_id!r}'s last event ({last_seq}); "
        "pass a sequence number the stream sent.",
    )


class RunEndpoints:
    """The ``runs/<thread_id>/<run_id>/`` routes: reattach (``GET``) and cancel (``POST``).

    ``repositories(request)`` returns the request owner's ``(chat_repo, message_repo,
    user_uuid)``, for answering a finished run from storage.
    """

    def __init__(
        self,
        coordinator: RunCoordinator,
        store: object,
        *,
        repositories: Callable[[HttpRequest], Any],
        heartbeat_seconds: float,
        coalesce_seconds: float = 0.0,
        poll_seconds: float = 0.5,
    ) -> None:
        self._coordinator = coordinator
        self._store = store
        self._repositories = repositories
        self._heartbeat = heartbeat_seconds
        self._coalesce = coalesce_seconds
        self._poll = poll_seconds

    def routes(self) -> list[Route]:
        """``runs/<thread_id>/<run_id>/`` (reattach) and ``.../cancel/``."""
        run = "runs/<str:thread_id>/<str:run_id>/"
        return [
            Route(
                path=run,
                name="run-reattach",
                handlers={"GET": self.reattach},
                not_found=RUN_NOT_FOUND,
            ),
            Route(
                path=f"{run}cancel/",
                name="run-cancel",
                handlers={"POST": self.cancel},
                not_found=RUN_NOT_FOUND,
            ),
        ]

    async def _owned(self, request: HttpRequest, thread_id: str, run_id: str) -> Any:
        """``(owner_id, record)`` of the caller's run, or ``None`` (missing, or a stranger's)."""
        try:
            owner_id = await sync_to_async(resolve_owner_id)(
                request, allow_anonymous=serves_anonymous(self._store)
            )
        except StoreError:
            return None
        record = await self._coordinator.run_store.get(
            owner_id=owner_id, thread_id=thread_id, run_id=run_id
        )
        return None if record is None else (owner_id, record)

    async def reattach(self, request: HttpRequest, thread_id: str, run_id: str) -> HttpResponseBase:
        """``GET runs/<thread_id>/<run_id>/``: the run's events after ``after``, as SSE."""
        owned = await self._owned(request, thread_id, run_id)
        if owned is None:
            return error_response(404, RUN_NOT_FOUND)
        owner_id, record = owned
        after = parse_after(request, run_id)
        if after is None:
            return error_response(
                400,
                "after (or Last-Event-ID) must be a sequence number of this run, such as "
                f"?after=12 or Last-Event-ID: {run_id}:12.",
            )
        coordinator = self._coordinator
        handle = coordinator.manager.get(thread_id, run_id, owner=owner_id)
        if handle is None and record.running and coordinator.resuming and record.resume_input:
            # Its worker drained or died: take it over here now, rather than at the next
            # sweep (a worker that died is waited for until its lease has passed).
            handle, record = await self._taken_over(owner_id, record, after)
        frames: AsyncIterator[str]
        if handle is not None:
            resumed_past = handle.resumed_at is not None and after > handle.resumed_at
            if after > handle.last_seq and not resumed_past:
                return _beyond(run_id, after, handle.last_seq)
            if handle.first_seq > 1:
                # The log held here lacks its start (a long run, or one resumed without its
                # first worker's relayed log): the snapshot stands for it.
                frames = self._from_storage(request, owner_id, record, after)
            else:
                return sse_response(
                    replay(
                        handle,
                        after,
                        heartbeat_seconds=self._heartbeat,
                        coalesce_seconds=self._coalesce,
                    )
                )
        elif record.running:
            # Running on another worker: follow its log relayed through the cache, if any.
            relay = self._coordinator.relay
            log = await relay.follow(owner_id, thread_id, run_id, grace=_RELAY_GRACE_SECONDS)
            if log is None:
                frames = self._from_storage(request, owner_id, record, after)
            elif not await log.wait_for(after, seconds=_RELAY_GRACE_SECONDS):
                return _beyond(run_id, after, log.last_seq)
            else:
                frames = self._relayed(request, owner_id, record, log, after)
        else:
            frames = self._from_storage(request, owner_id, record, after)
        if self._heartbeat or self._coalesce:
            frames = with_heartbeat(frames, self._heartbeat, coalesce=self._coalesce)
        return sse_response(frames)

    async def _taken_over(
        self, owner_id: str, record: RunRecord, after: int
    ) -> tuple[RunHandle | None, RunRecord]:
        """The run's handle once this worker has taken it over, and its record.

        ``(None, record)`` while its worker is alive, or once another worker resumed or
        ended it. A run whose relayed log stops short of ``after`` (the reader saw events its
        worker may have taken with it) is watched: while its worker renews its heartbeat,
        for at most ``_RELAY_GRACE_SECONDS`` (or two heartbeats, up to 3 s), then the relay
        path answers; once the heartbeats stop, until its lease has passed and it is taken
        over here (at most ``lease_seconds`` plus a second).
        """
        coordinator = self._coordinator
        key = (owner_id, record.thread_id, record.run_id)
        beat = coordinator.heartbeat_seconds
        loop = asyncio.get_running_loop()
        alive_until = loop.time() + max(_RELAY_GRACE_SECONDS, min(2 * beat, 3.0))
        deadline = loop.time() + coordinator.lease_seconds + 1.0
        while True:
            if record.stale(coordinator.lease_seconds):
                await coordinator.take_over(run=key)
                handle = coordinator.manager.get(record.thread_id, record.run_id, owner=owner_id)
                found = await coordinator.run_store.get(
                    owner_id=owner_id, thread_id=record.thread_id, run_id=record.run_id
                )
                return handle, found or record
            alive = not record.stale(2 * beat)
            relayed = await coordinator.relay.last_seq(*key)
            if relayed is None and alive:
                return None, record  # no relayed log (a per-process cache): storage answers
            if relayed is not None and relayed >= after:
                return None, record
            now = loop.time()
            if (alive and now >= alive_until) or now >= deadline:
                return None, record
            await asyncio.sleep(min(self._poll, 0.2))
            found = await coordinator.run_store.get(
                owner_id=owner_id, thread_id=record.thread_id, run_id=record.run_id
            )
            if found is None or not found.running:
                return None, found or record
            record = found

    async def _relayed(
        self, request: HttpRequest, owner_id: str, record: RunRecord, log: RelayedLog, after: int
    ) -> AsyncIterator[str]:
        """A run held by another worker, from its relayed log; from storage if the log is lost
        mid-stream (evicted), after closing what it left open."""
        run_store = self._coordinator.run_store

        async def still_running() -> bool:
            found = await run_store.get(
                owner_id=owner_id, thread_id=record.thread_id, run_id=record.run_id
            )
            return found is not None and found.running

        batches = log.batches(still_running=still_running)
        async for frame in replay_entries(batches, record.run_id, after):
            yield frame
        if log.lost:
            async for frame in self._from_storage(request, owner_id, record, after, started=True):
                yield frame

    async def _from_storage(
        self,
        request: HttpRequest,
        owner_id: str,
        record: RunRecord,
        after: int = 0,
        *,
        started: bool = False,
    ) -> AsyncIterator[str]:
        """A run this worker does not hold: wait while it runs elsewhere, then answer from
        storage with ``RUN_STARTED`` (unless ``started``), ``MESSAGES_SNAPSHOT`` and its
        terminal event.

        The terminal event carries the run's last sequence number as its id, unless the
        reader saw that far (``after``): then it is re-sent without one, as no duplicate."""
        thread_id, run_id = record.thread_id, record.run_id
        if not started:
            yield encode_event(RunStartedEvent(thread_id=thread_id, run_id=run_id))
        while record.running:
            await asyncio.sleep(self._poll)
            found = await self._coordinator.run_store.get(
                owner_id=owner_id, thread_id=thread_id, run_id=run_id
            )
            if found is None:
                break
            record = found
        chat_repo, message_repo, user_uuid = await self._repositories(request)
        chat = await chat_repo.get_chat_by_thread_id(user_uuid, thread_id)
        stored = await message_repo.get_chat_messages(chat.chat_uuid) if chat is not None else []
        yield encode_event(MessagesSnapshotEvent(messages=translate_messages(stored)))
        terminal: BaseEvent
        if record.status == RunStatus.ERRORED:
            terminal = RunErrorEvent(message=record.error or "The run failed.")
        elif record.status == RunStatus.INTERRUPTED:
            terminal = RunFinishedEvent(
                thread_id=thread_id, run_id=run_id, outcome=RunFinishedCancelledOutcome()
            )
        else:
            terminal = RunFinishedEvent(thread_id=thread_id, run_id=run_id)
        last = record.last_seq or 1
        yield encode_event(terminal, event_id=event_id(run_id, last) if last > after else None)

    async def cancel(self, request: HttpRequest, thread_id: str, run_id: str) -> HttpResponseBase:
        """``POST runs/<thread_id>/<run_id>/cancel/``: 202 while it stops, 200 once ended.

        Idempotent; reaches the worker running the run through a cancel intent in the cache.
        """
        owned = await self._owned(request, thread_id, run_id)
        if owned is None:
            return error_response(404, RUN_NOT_FOUND)
        owner_id, record = owned
        if not record.running:
            return JsonResponse({"runId": run_id, "status": record.status, "cancelled": False})
        await self._coordinator.request_cancel(owner_id, thread_id, run_id)
        return JsonResponse(
            {"runId": run_id, "status": "cancelling", "cancelled": True}, status=202
        )
