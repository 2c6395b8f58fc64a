"""The run routes: reattach to a run (``GET runs/<thread_id>/<run_id>/``) and cancel it.

``RunEndpoints.reattach`` answers the run's log after ``?after=<seq>`` or ``Last-Event-ID``,
opened with ``RUN_STARTED`` and every message still streaming re-opened, then the live tail:
from this worker's handle (``replay``) or, for a run running on another worker, from the log
it relays through the cache. A finished run, or one whose log the cache does not hold, is
answered from storage with ``MESSAGES_SNAPSHOT`` and its terminal event; a run whose worker
drained or died is taken over here first when the mount resumes runs.
``POST .../cancel/`` records a cancel intent that reaches the worker running the run. Both are
owner-checked through the run store: a stranger's run is a 404 exactly like a missing one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
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
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.chat_history import RunHandle, translate_messages
from django_pydantic_agent.chat_history.manager import CATCH_UP_BATCH
from django_pydantic_agent.persistence import StoreError, resolve_owner_id, serves_anonymous
from django_pydantic_agent.persistence.runs import RunRecord, RunStatus

__all__ = ["RUN_NOT_FOUND", "RunEndpoints", "parse_after", "replay"]

#: The 404 of the run routes (a stranger's run reads the same).
RUN_NOT_FOUND: Final[str] = "No such run."
# How long a reattach waits for another worker's relayed log to appear, or to catch up with
# the ``after`` its client saw (the relay lags the live stream by up to one interval).
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
