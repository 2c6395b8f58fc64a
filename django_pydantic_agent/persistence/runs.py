"""Run records: who runs what on which thread, how it ended, and whether its worker is alive.

A run record keeps owner, thread, run id, status, the worker running it, a heartbeat, start
and finish times, token usage and the sequence number of its last event (specs/runs.md §3).
``RunStore`` is the interface the run path calls; two implementations ship:

- ``DefaultRunStore`` in ``django_pydantic_agent.contrib.store.runs``: rows of the
  ``StoredAgentRun`` model, for ``DefaultConversationStore``;
- :class:`CacheRunStore` here: entries in Django's cache (Redis in production), for every
  other store (session, Memory Service, third-party).

Both refuse a second ``running`` run on one thread: ``start`` then returns the active run and
``started=False``, and the caller applies its policy (reject with 409, or cancel it first). A
``running`` run whose heartbeat is older than the lease is stale: ``sweep`` finalises it as
``errored`` (the ORM store finds them all; the cache store, which cannot list keys, takes a
stale run over when a new run starts on its thread, and lets entries expire).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Final, NamedTuple, Protocol, runtime_checkable

from django.utils import timezone

from django_pydantic_agent.persistence.outages import unit_of_work

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "HANDED_OVER_HEARTBEAT",
    "TERMINAL_RUN_STATUSES",
    "CacheRunStore",
    "HandOverRunStore",
    "HeldRun",
    "KeepsRunsInCache",
    "ResumableRunStore",
    "RunRecord",
    "RunStatus",
    "RunStore",
    "SyncRunStore",
    "TakesFence",
    "check_terminal",
]

DEFAULT_LEASE_SECONDS: Final[float] = 8.0
"""How long a run may go without a heartbeat before its worker is taken for dead (four of the
default two-second heartbeats): a dead worker's run is back on another worker within 10 s."""


HANDED_OVER_HEARTBEAT: Final[datetime] = datetime(2000, 1, 1, tzinfo=UTC)
"""The heartbeat of a handed-over run (``HandOverRunStore.hand_over``): older than any lease."""


class RunStatus(StrEnum):
    """The status of a run record."""

    RUNNING = "running"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    ERRORED = "errored"
    INTERRUPT = "interrupt"
    """The run ended waiting for a human (an open interrupt the next run answers)."""


TERMINAL_RUN_STATUSES: Final[frozenset[str]] = frozenset(
    {RunStatus.COMPLETE, RunStatus.INTERRUPTED, RunStatus.ERRORED, RunStatus.INTERRUPT}
)


def check_terminal(status: str) -> str:
    """Return ``status`` if a run may end with it, else raise ``ValueError``."""
    if status not in TERMINAL_RUN_STATUSES:
        raise ValueError(
            f"status={status!r} is not a final run status; pass one of "
            f"{', '.join(sorted(TERMINAL_RUN_STATUSES))}."
        )
    return str(status)


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """One run, as a run store holds it."""

    owner_id: str
    thread_id: str
    run_id: str
    status: str = RunStatus.RUNNING.value
    worker_id: str = ""
    heartbeat_at: datetime = field(default_factory=timezone.now)
    started_at: datetime = field(default_factory=timezone.now)
    finished_at: datetime | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    last_seq: int = 0
    error: str = ""
    #: How many times another worker took the run over (``ResumableRunStore.take_over``).
    resumes: int = 0
    #: What a worker taking the run over runs it with (the run's input without its messages).
    resume_input: dict[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        """Whether the run has not ended."""
        return self.status == RunStatus.RUNNING

    def stale(self, lease: float, now: datetime | None = None) -> bool:
        """Whether the run is ``running`` with a heartbeat older than ``lease`` seconds."""
        moment = now or timezone.now()
        return self.running and self.heartbeat_at < moment - timedelta(seconds=lease)


@runtime_checkable
class RunStore(Protocol):
    """What the run path needs from a run store. Every method is async."""

    async def start(
        self, *, owner_id: str, thread_id: str, run_id: str, worker_id: str = ""
    ) -> tuple[RunRecord, bool]:
        """Record a new ``running`` run; ``(active run, False)`` when the thread is busy."""
        ...

    async def heartbeat(
        self, *, owner_id: str, thread_id: str, run_id: str, last_seq: int | None = None
    ) -> bool:
        """Renew a running run's heartbeat (and ``last_seq``); ``False`` if it is not running."""
        ...

    async def finish(
        self,
        *,
        owner_id: str,
        thread_id: str,
        run_id: str,
        status: str,
        usage: dict[str, Any] | None = None,
        last_seq: int | None = None,
        error: str = "",
    ) -> RunRecord | None:
        """End a running run with a final status; ``None`` if unknown, unchanged if ended."""
        ...

    async def get(self, *, owner_id: str, thread_id: str, run_id: str) -> RunRecord | None:
        """Return the owner's run, or ``None`` (a stranger's run is ``None`` too)."""
        ...

    async def active_run_for_thread(self, *, owner_id: str, thread_id: str) -> RunRecord | None:
        """Return the thread's running run, or ``None``."""
        ...

    async def sweep(self, *, lease: float = DEFAULT_LEASE_SECONDS) -> list[RunRecord]:
        """Finalise stale runs as ``errored`` and return them."""
        ...


@runtime_checkable
class KeepsRunsInCache(Protocol):
    """Optional: a run store whose records live in a Django cache names its ``alias``
    (``CacheRunStore``), which the system checks then require every worker to share."""

    alias: str


@runtime_checkable
class HandOverRunStore(Protocol):
    """A run store that can hand a running run over to another worker (a worker's drain)."""

    async def hand_over(
        self, *, owner_id: str, thread_id: str, run_id: str, last_seq: int | None = None
    ) -> bool:
        """Leave a ``running`` run to whichever worker sweeps next: its heartbeat becomes
        ``HANDED_OVER_HEARTBEAT`` (stale under any lease), its worker empty, its ``last_seq``
        recorded. ``False`` if the run is not running (ended, or unknown)."""
        ...


class HeldRun(NamedTuple):
    """A run a worker executes: its owner, thread and id, and which execution it is (the
    record's ``resumes`` when this worker started or took it over)."""

    owner_id: str
    thread_id: str
    run_id: str
    epoch: int


@runtime_checkable
class TakesFence(Protocol):
    """A repository whose write transactions call ``fence()`` first (``None``: no check), so a
    run store can refuse a stale worker's writes (``ResumableRunStore.fence``)."""

    fence: Callable[[], None] | None


@runtime_checkable
class ResumableRunStore(HandOverRunStore, Protocol):
    """A run store whose stale runs another worker can take over and run on (a resume).

    Its ``start`` also takes ``resume_input=`` (a JSON object): what a worker taking the run
    over runs it with (``RunRecord.resume_input``). Its ``finish`` and ``hand_over`` take
    ``epoch=`` too, and then change only a run still in that execution: a worker that stalled
    past the lease while another took its run over cannot end or hand over the new execution.
    """

    async def beat(self, *, worker_id: str, runs: Sequence[HeldRun]) -> set[HeldRun]:
        """Renew, in one write, the heartbeat of every running run ``worker_id`` holds, and
        return those of ``runs`` it no longer holds in their execution (another worker took
        them over, or they ended): the worker stops them without writing."""
        ...

    def fence(self, run: HeldRun) -> Callable[[], None]:
        """A check for the run's repositories to call first in each write transaction (a
        ``TakesFence``): it raises ``chat_history.RunFencedError`` unless the run still runs in
        execution ``run.epoch``, so a stale worker's writes are refused by the store itself."""
        ...

    async def take_over(
        self,
        *,
        lease: float,
        worker_id: str,
        max_resumes: int,
        run: tuple[str, str, str] | None = None,
    ) -> tuple[list[RunRecord], list[RunRecord]]:
        """Take over the stale runs (only ``run``, an ``(owner, thread, run id)``, if given).

        A stale run resumed fewer than ``max_resumes`` times, with a ``resume_input``, is
        claimed for ``worker_id`` (its heartbeat renewed, ``resumes`` counted, what it left
        in progress ``interrupted``); any other is finalised ``errored`` as ``sweep`` does.
        Returns ``(taken, ended)``.
        """
        ...


class SyncRunStore(ABC):
    """A ``RunStore`` written as synchronous methods, each run in one worker-thread hop.

    Subclasses implement ``_start_sync``, ``_heartbeat_sync``, ``_finish_sync``, ``_get_sync``,
    ``_active_sync`` and ``sweep``; the async methods of ``RunStore`` are written here once,
    one ``unit_of_work`` per call (``sync_to_async`` that survives a database or cache restart,
    ``persistence.outages``), so ORM and cache work stays off the event loop.
    """

    @abstractmethod
    def _start_sync(
        self, owner_id: str, thread_id: str, run_id: str, worker_id: str
    ) -> tuple[RunRecord, bool]: ...

    @abstractmethod
    def _heartbeat_sync(
        self, owner_id: str, thread_id: str, run_id: str, last_seq: int | None
    ) -> bool: ...

    @abstractmethod
    def _finish_sync(
        self,
        owner_id: str,
        thread_id: str,
        run_id: str,
        status: str,
        usage: dict[str, Any] | None,
        last_seq: int | None,
        error: str,
        epoch: int | None,
    ) -> RunRecord | None: ...

    @abstractmethod
    def _get_sync(self, owner_id: str, thread_id: str, run_id: str) -> RunRecord | None: ...

    @abstractmethod
    def _hand_over_sync(
        self, owner_id: str, thread_id: str, run_id: str, last_seq: int | None, epoch: int | None
    ) -> bool: ...

    @abstractmethod
    def _active_sync(self, owner_id: str, thread_id: str) -> RunRecord | None: ...

    @abstractmethod
    async def sweep(self, *, lease: float = DEFAULT_LEASE_SECONDS) -> list[RunRecord]:
        """Finalise stale runs as ``errored`` and return them."""

    async def start(
        self,
        *,
        owner_id: str,
        thread_id: str,
        run_id: str,
        worker_id: str = "",
        resume_input: dict[str, Any] | None = None,
    ) -> tuple[RunRecord, bool]:
        """Record a new ``running`` run, or return the thread's active run and ``False``;
        ``resume_input`` only for a ``ResumableRunStore``."""
        args: tuple[Any, ...] = (owner_id, thread_id, run_id, worker_id)
        if resume_input is not None:
            args += (resume_input,)
        return await unit_of_work(self._start_sync)(*args)

    async def heartbeat(
        self, *, owner_id: str, thread_id: str, run_id: str, last_seq: int | None = None
    ) -> bool:
        """Renew a running run's heartbeat (and ``last_seq``); ``False`` if it is not running."""
        return await unit_of_work(self._heartbeat_sync)(owner_id, thread_id, run_id, last_seq)

    async def finish(
        self,
        *,
        owner_id: str,
        thread_id: str,
        run_id: str,
        status: str,
        usage: dict[str, Any] | None = None,
        last_seq: int | None = None,
        error: str = "",
        epoch: int | None = None,
    ) -> RunRecord | None:
        """End a running run (``ValueError`` for a status that is not final); an ended run is
        returned unchanged, an unknown one as ``None``. With ``epoch``, only a run still in
        that execution is ended."""
        return await unit_of_work(self._finish_sync)(
            owner_id, thread_id, run_id, status, usage, last_seq, error, epoch
        )

    async def get(self, *, owner_id: str, thread_id: str, run_id: str) -> RunRecord | None:
        """Return the owner's run, or ``None``."""
        return await unit_of_work(self._get_sync)(owner_id, thread_id, run_id)

    async def hand_over(
        self,
        *,
        owner_id: str,
        thread_id: str,
        run_id: str,
        last_seq: int | None = None,
        epoch: int | None = None,
    ) -> bool:
        """Leave a running run to the next sweep (see ``HandOverRunStore.hand_over``); with
        ``epoch``, only a run still in that execution."""
        return await unit_of_work(self._hand_over_sync)(
            owner_id, thread_id, run_id, last_seq, epoch
        )

    async def active_run_for_thread(self, *, owner_id: str, thread_id: str) -> RunRecord | None:
        """Return the thread's running run, or ``None``."""
        return await unit_of_work(self._active_sync)(owner_id, thread_id)


#: The error of a run a ``CacheRunStore`` found stale (no heartbeat within the lease).
_WORKER_STOPPED = "The run's worker stopped."


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


class CacheRunStore(SyncRunStore):
    """A ``RunStore`` in Django's cache (``caches[alias]``), for stores without run tables.

    Keys are hashed (owner, thread, run), so no owner id appears in a cache key. The active
    run of a thread is claimed with ``cache.add`` (atomic on Redis, Memcached and locmem); a
    claim whose run is stale (no heartbeat for ``lease`` seconds) or gone is taken over, the
    stale run finalised as ``errored``. Entries live ``timeout`` seconds (a week by default)
    after their last write. ``sweep`` finalises nothing (a cache cannot be listed): a stale run
    ends as ``errored`` when it is next read (a reattach, a thread read, a cancel) or when its
    thread is next used, and no entry outlives its timeout.
    """

    def __init__(
        self,
        *,
        alias: str = "default",
        prefix: str = "django_pydantic_agent:run",
        timeout: float = 7 * 24 * 3600,
        lease: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.alias = alias
        self.prefix = prefix
        self.timeout = timeout
        self.lease = lease

    @property
    def _cache(self) -> Any:
        from django.core.cache import caches

        return caches[self.alias]

    def _run_key(self, owner_id: str, thread_id: str, run_id: str) -> str:
        return f"{self.prefix}:{_digest(owner_id, thread_id, run_id)}"

    def _active_key(self, owner_id: str, thread_id: str) -> str:
        return f"{self.prefix}:active:{_digest(owner_id, thread_id)}"

    def _write(self, record: RunRecord) -> None:
        key = self._run_key(record.owner_id, record.thread_id, record.run_id)
        self._cache.set(key, record, self.timeout)

    def _read(self, owner_id: str, thread_id: str, run_id: str) -> RunRecord | None:
        found = self._cache.get(self._run_key(owner_id, thread_id, run_id))
        return found if isinstance(found, RunRecord) else None

    def _get_sync(self, owner_id: str, thread_id: str, run_id: str) -> RunRecord | None:
        """``_read``, with a stale running run ended as ``errored`` first (its worker died)."""
        record = self._read(owner_id, thread_id, run_id)
        if record is not None and record.stale(self.lease):
            record = self._end(record, RunStatus.ERRORED.value, error=_WORKER_STOPPED)
        return record

    def _end(self, record: RunRecord, status: str, **changes: Any) -> RunRecord:
        ended = replace(record, status=status, finished_at=timezone.now(), **changes)
        self._write(ended)
        active = self._active_key(record.owner_id, record.thread_id)
        if self._cache.get(active) == record.run_id:
            self._cache.delete(active)
        return ended

    def _start_sync(
        self, owner_id: str, thread_id: str, run_id: str, worker_id: str
    ) -> tuple[RunRecord, bool]:
        known = self._read(owner_id, thread_id, run_id)
        if known is not None:
            return known, known.running
        active_key = self._active_key(owner_id, thread_id)
        for _ in range(3):
            if self._cache.add(active_key, run_id, self.timeout):
                record = RunRecord(
                    owner_id=owner_id, thread_id=thread_id, run_id=run_id, worker_id=worker_id
                )
                self._write(record)
                return record, True
            holder = self._cache.get(active_key)
            active = None if holder is None else self._read(owner_id, thread_id, str(holder))
            if active is not None and active.running and not active.stale(self.lease):
                return active, False
            if active is not None and active.running:
                self._end(active, RunStatus.ERRORED.value, error=_WORKER_STOPPED)
            self._cache.delete(active_key)
        raise RuntimeError(f"Could not claim thread {thread_id!r} for run {run_id!r}.")

    def _heartbeat_sync(
        self, owner_id: str, thread_id: str, run_id: str, last_seq: int | None
    ) -> bool:
        record = self._read(owner_id, thread_id, run_id)
        if record is None or not record.running:
            return False
        changes: dict[str, Any] = {"heartbeat_at": timezone.now()}
        if last_seq is not None:
            changes["last_seq"] = last_seq
        self._write(replace(record, **changes))
        self._cache.touch(self._active_key(owner_id, thread_id), self.timeout)
        return True

    def _hand_over_sync(
        self, owner_id: str, thread_id: str, run_id: str, last_seq: int | None, epoch: int | None
    ) -> bool:
        record = self._read(owner_id, thread_id, run_id)
        if record is None or not record.running or epoch not in (None, record.resumes):
            return False
        changes: dict[str, Any] = {"heartbeat_at": HANDED_OVER_HEARTBEAT, "worker_id": ""}
        if last_seq is not None:
            changes["last_seq"] = last_seq
        self._write(replace(record, **changes))
        return True

    def _finish_sync(
        self,
        owner_id: str,
        thread_id: str,
        run_id: str,
        status: str,
        usage: dict[str, Any] | None,
        last_seq: int | None,
        error: str,
        epoch: int | None,
    ) -> RunRecord | None:
        check_terminal(status)
        record = self._read(owner_id, thread_id, run_id)
        if record is None or not record.running or epoch not in (None, record.resumes):
            return record
        changes: dict[str, Any] = {"error": error}
        if usage is not None:
            changes["usage"] = dict(usage)
        if last_seq is not None:
            changes["last_seq"] = last_seq
        return self._end(record, status, **changes)

    def _active_sync(self, owner_id: str, thread_id: str) -> RunRecord | None:
        holder = self._cache.get(self._active_key(owner_id, thread_id))
        if holder is None:
            return None
        record = self._get_sync(owner_id, thread_id, str(holder))
        return record if record is not None and record.running else None

    async def sweep(self, *, lease: float = DEFAULT_LEASE_SECONDS) -> list[RunRecord]:
        """Nothing to list in a cache: stale runs are taken over by ``start`` (see above)."""
        return []
