"""The durable run engine of a mount, behind every transport: runs in, event batches out.

A transport (AG-UI's SSE routes in ``run.py`` and ``reattach.py``; any other wire) parses a
request into a ``RunAgentInput`` and encodes what the engine streams; the engine knows no
wire. ``RunEngine`` admits, starts and follows runs, finds a run wherever it is (``read``:
this worker's log, another worker's log relayed through the cache, or storage once it ended),
takes over a run whose worker drained or died, and cancels runs. Its streams are
``EventStream``s: batches of ``(seq, event)``, ``seq`` ``None`` for an event the reader saw
already (sent again to re-open what it had open), and ``None`` when the run was idle for the
heartbeat interval. Refusals before a stream starts are ``Refusal``s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ag_ui.core import (
    BaseEvent,
    MessagesSnapshotEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunStartedEvent,
)
from asgiref.sync import sync_to_async
from django.http import HttpRequest
from pydantic_ai.agent import AbstractAgent

from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.inner import PydanticAIAgent, run_agent
from django_pydantic_agent.agui.options import RunOptions
from django_pydantic_agent.agui.owners import (
    ensure_anonymous_session,
    owner_repositories,
    owner_request,
    request_owner,
)
from django_pydantic_agent.agui.relay import (
    Batch,
    EventStream,
    RelayedLog,
    RunStream,
    replay_batches,
)
from django_pydantic_agent.agui.runs import RunCoordinator, ThreadBusy
from django_pydantic_agent.agui.spend import SpendGate
from django_pydantic_agent.agui.threads import stored_thread
from django_pydantic_agent.chat_history import RunHandle
from django_pydantic_agent.chat_history.manager import CATCH_UP_BATCH, epoch_base, epoch_of
from django_pydantic_agent.chat_history.window import HistoryWindow, read_window
from django_pydantic_agent.persistence import (
    AttachmentStore,
    ConversationStore,
    StoreError,
    refuse_over_quota,
    resolve_owner_id,
    serves_anonymous,
)
from django_pydantic_agent.persistence.conversation import RunScope
from django_pydantic_agent.persistence.runs import HeldRun, RunRecord, RunStatus

__all__ = ["RUN_NOT_FOUND", "Batch", "EventStream", "RunEngine", "RunStream", "replay"]

#: The 404 of the run routes (a stranger's run reads the same).
RUN_NOT_FOUND = "No such run."
# How long a reader waits for another worker's relayed log to appear (a run that just started).
_RELAY_GRACE_SECONDS = 1.0


class RunEngine:
    """The mount's runs on ``store``, executed by ``coordinator`` (see the module docstring).

    ``agent``, ``options``, ``attachment_store`` (``None`` without uploads) and ``spend``
    (``None`` without spend limits) build each run's inner agent; ``history`` is the window
    of stored history a run's model sees.
    """

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        store: ConversationStore,
        *,
        coordinator: RunCoordinator,
        options: RunOptions,
        history: HistoryWindow | None = None,
        attachment_store: AttachmentStore | None = None,
        spend: SpendGate | None = None,
        poll_seconds: float = 0.5,
    ) -> None:
        self.agent = agent
        self.store = store
        self.coordinator = coordinator
        self.options = options
        self.history = HistoryWindow() if history is None else history
        self.attachment_store = attachment_store
        self.spend = spend
        self._poll = poll_seconds

    # -- starting and following a run -------------------------------------------------------

    async def start(
        self, request: HttpRequest, run_input: RunAgentInput, accept: str | None
    ) -> RunHandle:
        """Start ``run_input`` for the request's owner (or find it running here already).

        Raises ``Refusal`` before anything is written: 403 or 413 (the store refuses this
        caller, or the run would create a thread over quota), 429 (a spent budget) and 409
        (``runs.ThreadBusy``). An anonymous caller's session is created first: its cookie
        must go out with the response headers, never after streaming started.
        """
        await ensure_anonymous_session(request, self.store)
        try:
            owner_id = await request_owner(request, self.store)
            chat_repo, message_repo, user_uuid = await owner_repositories(request, self.store)
            # A repository that can tell a run would create a thread over quota says so now,
            # as a 413, rather than in a RUN_ERROR once streaming started.
            await refuse_over_quota(chat_repo, run_input.thread_id)
        except StoreError as exc:
            raise Refusal.of_store(exc, store="conversation") from exc
        coordinator = self.coordinator
        thread_id, run_id = run_input.thread_id, run_input.run_id
        handle = coordinator.manager.get(thread_id, run_id, owner=owner_id)
        if handle is not None:
            return handle
        inner = await self._inner(request, accept, owner_id, thread_id)
        if self.spend is not None:
            await self.spend.refuse(
                deps=inner.deps, owner_id=owner_id, thread_id=thread_id, run_id=run_id
            )
        resume_input = {
            "input": run_input.model_dump(mode="json", by_alias=True, exclude={"messages"}),
            "accept": accept,
        }
        try:
            await coordinator.claim(owner_id, thread_id, run_id, resume_input=resume_input)
        except ThreadBusy as exc:
            raise Refusal(409, str(exc)) from exc
        coordinator.fence(message_repo, HeldRun(owner_id, thread_id, run_id, 0))
        return await coordinator.start(
            owner_id, run_input, chat_repo, message_repo, user_uuid, inner
        )

    def follow(
        self, handle: RunHandle, after: int = 0, *, cancel_on_close: bool = False
    ) -> RunStream:
        """``handle``'s events after ``after``, then the live tail, paced by the heartbeat.

        With ``cancel_on_close`` (``on_disconnect="cancel"``), closing the stream before the
        run ended cancels the run. ``after`` of an earlier execution reads this one from its
        start (its ``MESSAGES_SNAPSHOT`` stands for what came before). The caller checks that
        the log holds the execution whole and that ``after`` is not beyond it.
        """
        options = self.options
        batches = replay(
            handle,
            after,
            heartbeat=options.heartbeat_seconds,
            coalesce=options.stream_coalesce_seconds,
        )
        return RunStream(_cancelling(handle, batches) if cancel_on_close else batches, paced=True)

    async def resume(self, record: RunRecord) -> tuple[RunAgentInput, tuple[Any, ...], list[Any]]:
        """``(run input, agent factory arguments, stored messages)`` to run ``record`` again on
        this worker (``RunCoordinator.resumer``): its owner's repositories, an inner agent whose
        deps are built from a request carrying only the owner (``owners.owner_request``), and
        its stored input with no messages (the stored history has them); the thread as
        ``GET threads/<id>/`` shows it now opens the resumed execution's log (its snapshot)."""
        request = await owner_request(record.owner_id)
        chat_repo, message_repo, user_uuid = await owner_repositories(request, self.store)
        self.coordinator.fence(
            message_repo, HeldRun(record.owner_id, record.thread_id, record.run_id, record.resumes)
        )
        thread = await stored_thread(self.store, record.thread_id, request=request) or []
        stored = record.resume_input
        accept = stored.get("accept")
        run_input = RunAgentInput.model_validate(
            {
                **stored.get("input", {}),
                "threadId": record.thread_id,
                "runId": record.run_id,
                "messages": [],
            }
        )
        inner = await self._inner(
            request, accept if isinstance(accept, str) else None, record.owner_id, record.thread_id
        )
        parts = (chat_repo, message_repo, user_uuid, inner, record.run_id)
        return run_input, parts, thread

    async def _inner(
        self, request: HttpRequest, accept: str | None, owner_id: str, thread_id: str
    ) -> PydanticAIAgent:
        """The inner agent of a run of ``owner_id`` on ``thread_id`` (``inner.run_agent``)."""
        return await run_agent(
            self.agent,
            self.options,
            request,
            accept,
            owner_id=owner_id,
            thread_id=thread_id,
            attachment_store=self.attachment_store,
            spend=self.spend,
            scope=RunScope(owner_id=owner_id, thread_id=thread_id),
        )

    # -- finding a run, wherever it is ------------------------------------------------------

    async def locate(
        self, request: HttpRequest, thread_id: str, run_id: str
    ) -> tuple[str, RunRecord]:
        """``(owner_id, record)`` of the caller's run; a 404 ``Refusal`` for a missing or a
        stranger's run (they read the same)."""
        try:
            owner_id = await sync_to_async(resolve_owner_id)(
                request, allow_anonymous=serves_anonymous(self.store)
            )
        except StoreError as exc:
            raise Refusal(404, RUN_NOT_FOUND) from exc
        record = await self.coordinator.run_store.get(
            owner_id=owner_id, thread_id=thread_id, run_id=run_id
        )
        if record is None:
            raise Refusal(404, RUN_NOT_FOUND)
        return owner_id, record

    async def read(
        self, request: HttpRequest, owner_id: str, record: RunRecord, after: int
    ) -> RunStream:
        """The run's events for a reader that saw up to ``after``: from this worker's log,
        from the log another worker relays, or from storage (``RUN_STARTED``, the thread as
        stored, the terminal event) once it ended. A run whose worker drained or died is taken
        over here and read from its new execution's start; a reader ahead of the relayed log
        waits for it, the take-over or the end.

        Raises a 400 ``Refusal`` for an ``after`` beyond what the run sent (this worker holds
        its log), or of an execution that never was; a cache that cannot be reached is
        ``CacheUnavailableError`` (the route's 503).
        """
        handle = self.coordinator.manager.get(record.thread_id, record.run_id, owner=owner_id)
        if handle is not None:
            if epoch_of(after) > handle.epoch or (
                epoch_of(after) == handle.epoch and after > handle.last_seq
            ):
                raise Refusal(400, _beyond(record.run_id, after, handle.last_seq))
            if handle.whole_epoch:
                return self.follow(handle, after)
            # The log held here lacks the execution's start (a long run): the snapshot
            # stands for it.
            return RunStream(self._from_storage(request, owner_id, record, after), paced=False)
        if epoch_of(after) > record.resumes:
            raise Refusal(400, _beyond(record.run_id, after, record.last_seq))
        if not record.running:
            return RunStream(self._from_storage(request, owner_id, record, after), paced=False)
        log = None
        if not self._may_take_over(record):
            # Read before the response starts: a cache outage is a 503, not a broken stream.
            log = await self.coordinator.relay.follow(
                owner_id,
                record.thread_id,
                record.run_id,
                epoch=record.resumes,
                grace=_RELAY_GRACE_SECONDS,
            )
        return RunStream(self._elsewhere(request, owner_id, record, after, log), paced=False)

    async def cancel(
        self, request: HttpRequest, thread_id: str, run_id: str
    ) -> tuple[int, dict[str, Any]]:
        """Cancel the caller's run on whichever worker runs it: ``(202, cancelling)``, or
        ``(200, its status)`` once it ended; idempotent. 404 ``Refusal`` as ``locate``."""
        owner_id, record = await self.locate(request, thread_id, run_id)
        if not record.running:
            return 200, {"runId": run_id, "status": record.status, "cancelled": False}
        await self.coordinator.request_cancel(owner_id, thread_id, run_id)
        return 202, {"runId": run_id, "status": "cancelling", "cancelled": True}

    async def _record(self, owner_id: str, record: RunRecord) -> RunRecord:
        """``record`` read again (as it was, if it has gone)."""
        found = await self.coordinator.run_store.get(
            owner_id=owner_id, thread_id=record.thread_id, run_id=record.run_id
        )
        return found or record

    def _may_take_over(self, record: RunRecord) -> bool:
        """Whether this worker may take the run over now: it resumes runs, and the run's
        worker handed it over or stopped renewing its lease (``lease_seconds``)."""
        coordinator = self.coordinator
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
    ) -> EventStream:
        """A running run this worker does not hold (see ``read``). ``log`` is the relayed log
        of ``record``'s execution, read already (or ``None``). A lost log is not followed
        again; the reader gets its open messages closed, then storage or the next execution.
        """
        coordinator = self.coordinator
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
                    async for batch in replay(handle, after, started=started):
                        yield batch
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
                # before relaying what it sent. Wait for the relay, a take-over, or the end.
                await log.wait_for(after, seconds=self._poll)
            if log is None or log.lost or log.last_seq < after:
                if log is None or log.lost or log.terminal:
                    await asyncio.sleep(self._poll)  # (wait_for waited otherwise)
                record = await self._record(owner_id, record)
                continue
            batches = log.batches(still_running=self._still(owner_id, record))
            async for batch in replay_batches(batches, after, started=started):
                yield batch
            started = True
            if not log.lost:
                return
            lost, log = epoch, None
            record = await self._record(owner_id, record)
        async for batch in self._from_storage(request, owner_id, record, after, started=started):
            yield batch

    def _still(self, owner_id: str, record: RunRecord) -> Callable[[], Awaitable[bool]]:
        """Whether the execution of ``record`` still runs: the run has not ended, no other
        worker took it over since, and its worker has not stopped renewing its lease (a
        follower then stops waiting on the old execution's log, and takes the run over)."""
        run_store, epoch = self.coordinator.run_store, record.resumes

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
    ) -> EventStream:
        """A run this worker does not hold: wait while it runs elsewhere, then answer from
        storage with ``RUN_STARTED`` (unless ``started``), ``MESSAGES_SNAPSHOT`` (the thread as
        ``GET threads/<id>/`` shows it) and its terminal event, numbered with the run's last
        sequence number unless the reader saw that far."""
        thread_id, run_id = record.thread_id, record.run_id
        if not started:
            yield [(None, RunStartedEvent(thread_id=thread_id, run_id=run_id))]
        while record.running:
            await asyncio.sleep(self._poll)
            found = await self.coordinator.run_store.get(
                owner_id=owner_id, thread_id=thread_id, run_id=run_id
            )
            if found is None:
                break
            record = found
        stored = await stored_thread(self.store, thread_id, request=request)
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
        yield [
            (None, MessagesSnapshotEvent(messages=stored or [])),
            (last if last > after else None, terminal),
        ]

    # -- what the thread routes ask ---------------------------------------------------------

    async def active_run(self, request: HttpRequest, thread_id: str) -> dict[str, Any] | None:
        """``{"runId", "lastSeq"}`` of the caller's running run on ``thread_id``, or ``None``."""
        try:
            owner_id = await request_owner(request, self.store)
        except StoreError:
            return None
        return await self.coordinator.active_run(owner_id, thread_id)

    async def settle(self, request: HttpRequest, thread_id: str | None) -> None:
        """Return once this worker's finished runs of the caller on ``thread_id`` are stored
        (bounded by ``SETTLE_SECONDS``; ``None``: every thread), so a thread read sees what the
        stream showed."""
        try:
            owner_id = await request_owner(request, self.store)
        except StoreError:
            return
        await self.coordinator.settle(owner_id, thread_id)

    async def model_view(self, request: HttpRequest, thread_id: str) -> dict[str, Any] | None:
        """Where the model's view of the caller's thread begins (``{"startsAt", "messages",
        "summary"}``: ``startsAt`` ``None`` when the window holds the whole thread, ``summary``
        the stored compaction summary sent ahead of it), or ``None`` for a thread the caller
        does not have."""
        try:
            chat_repo, message_repo, user_uuid = await owner_repositories(request, self.store)
        except StoreError:
            return None
        chat = await chat_repo.get_chat_by_thread_id(user_uuid, thread_id)
        if chat is None:
            return None
        loaded = await read_window(message_repo, chat.chat_uuid, self.history)
        summary = loaded.summary
        whole = loaded.whole and len(loaded.window) == len(loaded.read) and summary is None
        starts = None if whole or not loaded.window else loaded.window[0].agui_id
        return {
            "startsAt": starts,
            "messages": len(loaded.window),
            "summary": None if summary is None else summary.as_json(),
        }


def _beyond(run_id: str, after: int, last_seq: int) -> str:
    return (
        f"after={after} is beyond run {run_id!r}'s last event ({last_seq}); "
        "pass a sequence number the stream sent."
    )


def replay(
    handle: RunHandle,
    after: int,
    *,
    heartbeat: float | None = None,
    coalesce: float = 0.0,
    started: bool = False,
) -> EventStream:
    """``handle``'s log for a reader that saw up to ``after`` (see ``RunEngine.follow``), as
    ``relay.replay_batches`` reads any log; ``None`` after ``heartbeat`` seconds of silence."""
    if epoch_of(after) < handle.epoch:
        after = handle.epoch_base
    batches = handle.sequenced_batches(
        after=handle.epoch_base,
        idle=heartbeat or None,
        # Without coalescing, each event goes out on its own, as it was logged.
        max_batch=CATCH_UP_BATCH if coalesce else 1,
        coalesce=coalesce,
    )
    return replay_batches(batches, after, started=started)


async def _cancelling(handle: RunHandle, batches: EventStream) -> EventStream:
    """``batches``, cancelling the run of ``handle`` if they are closed before it ended."""
    try:
        async for batch in batches:
            yield batch
    finally:
        close = getattr(batches, "aclose", None)
        if close is not None:
            await close()
        if handle.terminal_event is None:
            handle.cancel()
