"""The run routes: reattach to a run (``GET runs/<thread_id>/<run_id>/``) and cancel it.

``RunEndpoints.reattach`` answers the run's log after ``?after=<seq>`` or ``Last-Event-ID``,
opened with ``RUN_STARTED`` and every message still streaming re-opened, then the live tail:
from this worker's handle (``replay``) or, for a run running on another worker, from the log
it relays through the cache. A finished run, or one whose log the cache does not hold, is
answered from storage with ``MESSAGES_SNAPSHOT`` and its terminal event.

A run whose worker drained or died is taken over here when the mount resumes runs, as a new
execution (an epoch, ``chat_history.manager.epoch_of``) whose log opens with a
``MESSAGES_SNAPSHOT`` of what is stored. A reader that names an id of an earlier execution
gets that execution's successor from its start; one that is ahead of what the cache relayed
(its worker sent events and died before relaying them) waits, with heartbeats, until the
relay catches up, the run is resumed, or it ends. Never a 4xx for an id a stream sent.
``POST .../cancel/`` records a cancel intent that reaches the worker running the run. Both are
owner-checked through the run store: a stranger's run is a 404 exactly like a missing one.
"""

from __future__ import annotations

import asyncio
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
from django.http import HttpRequest, HttpResponseBase, JsonResponse

from django_pydantic_agent.agui.http import error_response
from django_pydantic_agent.agui.relay import RelayedLog, event_id, replay_entries
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.agui.sse import aclose, encode_event, sse_response, with_heartbeat
from django_pydantic_agent.agui.threads import stored_thread
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.chat_history import RunHandle
from django_pydantic_agent.chat_history.manager import CATCH_UP_BATCH, epoch_base, epoch_of
from django_pydantic_agent.persistence import StoreError, resolve_owner_id, serves_anonymous
from django_pydantic_agent.persistence.runs import RunRecord, RunStatus

__all__ = ["RUN_NOT_FOUND", "RunEndpoints", "parse_after", "replay"]

#: The 404 of the run routes (a stranger's run reads the same).
RUN_NOT_FOUND: Final[str] = "No such run."
# How long a reattach waits for another worker's relayed log to appear (a run that just started).
_RELAY_GRACE_SECONDS = 1.0


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


def replay(
    handle: RunHandle,
    after: int,
    *,
    heartbeat_seconds: float | None = None,
    coalesce_seconds: float = 0.0,
    cancel_on_close: bool = False,
    started: bool = False,
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
    An ``after`` of an earlier execution of a resumed run reads this one from its start (its
    ``MESSAGES_SNAPSHOT`` stands for what came before). ``started``: the stream sent
    ``RUN_STARTED`` already (``relay.replay_entries``). The caller checks that the log holds
    the execution whole (``RunHandle.whole_epoch``) and that ``after`` is not beyond it.
    """
    if epoch_of(after) < handle.epoch:
        after = handle.epoch_base
    terminal = handle.terminal_event
    if after > handle.epoch_base and terminal is not None and after == handle.last_seq:
        # The reader saw the end: the run's start and its end again, without ids.
        started_event = RunStartedEvent(thread_id=handle.thread_id, run_id=handle.run_id)
        return _frames_of(terminal) if started else _frames_of(started_event, terminal)
    batches = handle.sequenced_batches(
        after=handle.epoch_base,
        idle=heartbeat_seconds or None,
        # Without coalescing, each event is written on its own, as it was logged.
        max_batch=CATCH_UP_BATCH if coalesce_seconds else 1,
        coalesce=coalesce_seconds,
    )
    frames = replay_entries(batches, handle.run_id, after, started=started)
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

    A run this worker cannot follow is answered from ``store`` (``threads.stored_thread``).
    """

    def __init__(
        self,
        coordinator: RunCoordinator,
        store: object,
        *,
        heartbeat_seconds: float,
        coalesce_seconds: float = 0.0,
        poll_seconds: float = 0.5,
    ) -> None:
        self._coordinator = coordinator
        self._store = store
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
        handle = self._coordinator.manager.get(thread_id, run_id, owner=owner_id)
        frames: AsyncIterator[str]
        if handle is not None:
            # This worker runs it: its log is the authority on what was sent.
            if epoch_of(after) > handle.epoch or (
                epoch_of(after) == handle.epoch and after > handle.last_seq
            ):
                return _beyond(run_id, after, handle.last_seq)
            if handle.whole_epoch:
                return sse_response(
                    replay(
                        handle,
                        after,
                        heartbeat_seconds=self._heartbeat,
                        coalesce_seconds=self._coalesce,
                    )
                )
            # The log held here lacks the execution's start (a long run): the snapshot
            # stands for it.
            frames = self._from_storage(request, owner_id, record, after)
        elif epoch_of(after) > record.resumes:
            return _beyond(run_id, after, record.last_seq)  # an execution that never was
        elif record.running:
            log = None
            if not self._may_take_over(record):
                # Read before the response starts: a cache outage is a 503, not a broken stream.
                log = await self._coordinator.relay.follow(
                    owner_id, thread_id, run_id, epoch=record.resumes, grace=_RELAY_GRACE_SECONDS
                )
            frames = self._elsewhere(request, owner_id, record, after, log)
        else:
            frames = self._from_storage(request, owner_id, record, after)
        if self._heartbeat or self._coalesce:
            frames = with_heartbeat(frames, self._heartbeat, coalesce=self._coalesce)
        return sse_response(frames)

    async def _record(self, owner_id: str, record: RunRecord) -> RunRecord:
        """``record`` read again (as it was, if it has gone)."""
        found = await self._coordinator.run_store.get(
            owner_id=owner_id, thread_id=record.thread_id, run_id=record.run_id
        )
        return found or record

    def _may_take_over(self, record: RunRecord) -> bool:
        """Whether this worker may take the run over now: it resumes runs, and the run's
        worker handed it over or stopped renewing its heartbeat (``lease_seconds``)."""
        coordinator = self._coordinator
        return (
            coordinator.resuming
            and bool(record.resume_input)
            and record.stale(coordinator.lease_seconds)
        )

    async def _elsewhere(
        self,
        request: HttpRequest,
        owner_id: str,
        record: RunRecord,
        after: int,
        log: RelayedLog | None,
    ) -> AsyncIterator[str]:
        """A running run this worker does not hold, for a reader that saw up to ``after``.

        Followed through the log its worker relays. A run whose worker drained or died is
        taken over here (``_may_take_over``) and read from the new execution's start; a reader
        ahead of the relayed log waits for it, or for that take-over (here or on another
        worker). Without a relayed log (a per-process cache, or one lost), storage answers
        once the run ends; a lost log is not followed again, its open messages closed. ``log``
        is the relayed log of ``record``'s execution, read already (or ``None``).
        """
        coordinator = self._coordinator
        key = (owner_id, record.thread_id, record.run_id)
        started = False
        lost = -1  # the last execution whose relayed log was lost while followed
        while record.running:
            if epoch_of(after) < record.resumes:
                after = epoch_base(record.resumes)  # a later execution, from its start
            if self._may_take_over(record):
                await coordinator.take_over(run=key)
                handle = coordinator.manager.get(record.thread_id, record.run_id, owner=owner_id)
                if handle is not None:
                    async for frame in replay(handle, after, started=started):
                        yield frame
                    return
                record = await self._record(owner_id, record)  # another worker took it
                continue
            epoch = record.resumes
            if log is not None and (log.epoch != epoch or log.lost):
                log = None
            if log is None and epoch > lost:
                log = await coordinator.relay.follow(*key, epoch=epoch, strict=False)
            if log is not None and log.last_seq < after:
                # Ahead of what the cache holds: its worker is behind with its relay, or died
                # before relaying what it sent. Wait (the heartbeat wrapper keeps the stream
                # open) for the relay, a take-over, or the end.
                await log.wait_for(after, seconds=self._poll)
            if log is None or log.lost or log.last_seq < after:
                if log is None or log.lost or log.terminal:
                    await asyncio.sleep(self._poll)  # (wait_for waited otherwise)
                record = await self._record(owner_id, record)
                continue
            batches = log.batches(still_running=self._still(owner_id, record))
            async for frame in replay_entries(batches, record.run_id, after, started=started):
                yield frame
            started = True
            if not log.lost:
                return
            lost, log = epoch, None
            record = await self._record(owner_id, record)
        async for frame in self._from_storage(request, owner_id, record, after, started=started):
            yield frame

    def _still(self, owner_id: str, record: RunRecord) -> Callable[[], Awaitable[bool]]:
        """Whether the execution of ``record`` still runs: the run has not ended, no other
        worker took it over since, and its worker has not stopped renewing its lease (a
        follower then stops waiting on the old execution's log, and takes the run over)."""
        run_store, epoch = self._coordinator.run_store, record.resumes

        async def still_running() -> bool:
            found = await run_store.get(
                owner_id=owner_id, thread_id=record.thread_id, run_id=record.run_id
            )
            return (
                found is not None
                and found.running
                and found.resumes == epoch
                and not self._may_take_over(found)
            )

        return still_running

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
        stored = await stored_thread(self._store, thread_id, request=request)
        yield encode_event(MessagesSnapshotEvent(messages=stored or []))
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
