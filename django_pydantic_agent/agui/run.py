"""The run endpoint: ``RunAgentInput`` JSON in, an AG-UI event stream out as SSE.

``RunEndpoint`` refuses what it can before streaming (``input.py`` parses and checks the body,
``inner.py`` converts the posted history), then streams one of two ways:

- with a Null store, stateless: the mount's agent runs on the posted history inside the
  request (``inner.PydanticAIAgent``), and a client disconnect ends the run;
- with any other store, durably: the request owner's chat-history repositories (the store's
  own, or the generic adapter of ``persistence.repositories``) back an ``AGUIStorageAgent``
  wrapping ``PydanticAIAgent``, started in the mount's ``StreamPersistenceManager``
  (``runs.RunCoordinator``). The stored history is what the agent sees; a posted turn that
  is not stored and is not a new user message or an answer to a stored open call is refused
  with ``RUN_ERROR`` ``INVALID_INPUT`` and nothing is written. The request only reads the
  run's log, so a disconnect stops the reading, not the run (``on_disconnect="cancel"``
  cancels it instead). A store failure ends the stream with ``RUN_ERROR`` ``STORE_*``.

Every frame carries ``id: <run_id>:<seq>``, the run's per-run sequence number.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from ag_ui.core import BaseEvent, EventType, RunAgentInput, RunStartedEvent
from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from pydantic_ai.agent import AbstractAgent

from django_pydantic_agent.agui.access import AccessPolicy
from django_pydantic_agent.agui.attachments import server_attachment_refs
from django_pydantic_agent.agui.errors import (
    REDACTED_RUN_ERROR,
    REDACTED_SAVE_ERROR,
    STORE_FAILED_CODE,
    STORE_LIMIT_CODE,
    STORE_REFUSED_CODE,
    run_error,
    store_refusal,
    store_refusal_event,
)
from django_pydantic_agent.agui.http import error_response, read_json_body, refuse_input
from django_pydantic_agent.agui.inner import (
    PydanticAIAgent,
    build_adapter,
    build_deps,
    log_run_failure,
    without_reasoning,
)
from django_pydantic_agent.agui.input import (
    NESTED_TOO_DEEPLY,
    RunInputError,
    clashing_tool_problem,
    history_problem,
    parse_run_input,
    unconvertible_history_problem,
)
from django_pydantic_agent.agui.options import RunOptions
from django_pydantic_agent.agui.owners import ensure_anonymous_session
from django_pydantic_agent.agui.runs import WORKER_ID, RunCoordinator, event_id, replay
from django_pydantic_agent.agui.sse import (
    SSE_HEARTBEAT,
    aclose,
    encode_event,
    sse_response,
    warn_if_wsgi,
    with_heartbeat,
)
from django_pydantic_agent.agui.views import ABANDONED_HOOK
from django_pydantic_agent.chat_history import AGUIStorageAgent
from django_pydantic_agent.chat_history.manager import TERMINAL_EVENT_TYPES
from django_pydantic_agent.persistence import (
    ConversationStore,
    StoreError,
    is_persistent,
    refuse_over_quota,
    repository_user_uuid,
    resolve_owner_id,
    serves_anonymous,
)
from django_pydantic_agent.persistence.owner import owner_user_uuid
from django_pydantic_agent.persistence.repositories import repositories_for
from django_pydantic_agent.persistence.runs import RunStore

__all__ = [
    "NESTED_TOO_DEEPLY",
    "REDACTED_RUN_ERROR",
    "REDACTED_SAVE_ERROR",
    "RUN_TOO_BIG",
    "SSE_HEARTBEAT",
    "STORE_FAILED_CODE",
    "STORE_LIMIT_CODE",
    "STORE_REFUSED_CODE",
    "RunEndpoint",
    "StoreGuard",
    "parse_run_input",
    "stateless_frames",
    "with_heartbeat",
    "without_reasoning",
]

logger = logging.getLogger("django_pydantic_agent.agui")

#: What the 413 of the run endpoint asks the caller to send instead.
RUN_TOO_BIG = "send a shorter history, or raise the limit."
#: The 409 of a second run on a busy thread (``concurrent_runs="reject"``).
THREAD_BUSY = (
    "Thread {thread_id!r} is running run {run_id!r}; wait for it to end, cancel it "
    "(POST runs/<thread_id>/<run_id>/cancel/), or reattach to it."
)


_OWNER_ATTR = "_django_pydantic_agent_owner"
"""Where ``RunEndpoint.owner_id`` keeps a request's resolved owner (by ``allow_anonymous``)."""


def stateless_frames(
    events: AsyncIterator[BaseEvent],
    run_id: str,
    *,
    heartbeat_seconds: float | None,
    coalesce_seconds: float,
) -> AsyncIterator[str]:
    """The stateless stream: ``events`` as SSE frames numbered from 1 (``id: <run_id>:<seq>``),
    with heartbeats and coalesced writes (``with_heartbeat``) when either is set."""

    async def numbered() -> AsyncIterator[str]:
        seq = 0
        try:
            async for event in events:
                seq += 1
                yield encode_event(event, event_id=event_id(run_id, seq))
        finally:
            await aclose(events)

    frames: AsyncIterator[str] = numbered()
    if heartbeat_seconds or coalesce_seconds:
        frames = with_heartbeat(frames, heartbeat_seconds, coalesce=coalesce_seconds)
    return frames


class StoreGuard:
    """The storage agent of one run, with its store failures turned into ``RUN_ERROR``
    (``STORE_REFUSED`` / ``STORE_LIMIT`` for a refusal, ``STORE_FAILED`` redacted for anything
    else), so a client learns its run was not kept.

    The inner agent ends its own failures with ``RUN_ERROR`` (``InnerAgent``), so what the
    storage agent raises is the store's: before the stream, or on a new thread while the
    chat and the user message are written behind it.

    ``RUN_STARTED`` goes out at once, before the store is read: a client sees its run start
    without waiting for the thread's lookup. The one the run then emits (the inner agent's,
    with the same thread and run ids) is not forwarded twice; the storage agent still folds it.
    """

    def __init__(self, agent: AGUIStorageAgent, *, expose_error_messages: bool) -> None:
        self.agent = agent
        self._expose = expose_error_messages

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        yield RunStartedEvent(
            thread_id=input.thread_id,
            run_id=input.run_id,
            parent_run_id=input.parent_run_id,
            timestamp=int(time.time() * 1000),
        )
        echoed = False
        last: BaseEvent | None = None  # the event forwarded last
        stream = self.agent.run(input)
        try:
            async for last in stream:
                if not echoed and last.type == EventType.RUN_STARTED:
                    echoed = True
                    continue
                yield last
        except Exception as exc:
            if last is not None and last.type in TERMINAL_EVENT_TYPES:
                raise  # it failed after its terminal event: nothing to tell the client
            log_run_failure(input, exc)
            if isinstance(exc, StoreError):
                yield store_refusal_event(exc, store="conversation")
            else:
                yield run_error(
                    exc,
                    expose=self._expose,
                    code=STORE_FAILED_CODE,
                    redacted=REDACTED_SAVE_ERROR,
                )
        finally:
            await stream.aclose()


class RunEndpoint:
    """The ``POST <mount>/`` handler: run ``agent`` for one ``RunAgentInput``, stream it as SSE.

    ``store`` is the conversation store (a Null store: stateless, nothing saved) and
    ``run_store`` where its runs are recorded; ``access`` supplies the throttle,
    ``body_limit()`` the body cap per request, and ``options`` how the agent runs and streams.
    ``coordinator`` is the mount's run manager (``None`` for a Null store).
    """

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        store: ConversationStore,
        *,
        access: AccessPolicy,
        body_limit: Callable[[], int],
        options: RunOptions,
        run_store: RunStore | None = None,
        attachment_store: Any = None,
    ) -> None:
        self._agent = agent
        self._attachment_store = attachment_store
        self._store = store
        self._access = access
        self._body_limit = body_limit
        self._options = options
        self.coordinator: RunCoordinator | None = None
        if is_persistent(store):
            if run_store is None:
                raise ValueError("A persisting RunEndpoint needs a run_store.")
            self.coordinator = RunCoordinator(
                self._storage_agent,
                run_store=run_store,
                heartbeat_seconds=options.run_heartbeat_seconds,
                lease_seconds=options.run_lease_seconds,
                sweep_interval_seconds=options.sweep_interval_seconds,
            )

    def _storage_agent(
        self,
        chat_repo: Any,
        message_repo: Any,
        user_uuid: uuid.UUID,
        inner: PydanticAIAgent,
    ) -> StoreGuard:
        agent = AGUIStorageAgent(inner.name, user_uuid, chat_repo, message_repo, inner)
        return StoreGuard(agent, expose_error_messages=self._options.expose_error_messages)

    async def repositories(self, request: HttpRequest) -> tuple[Any, Any, uuid.UUID]:
        """The request owner's ``(chat_repo, message_repo, user_uuid)`` on the store.

        Raises the store's ``StoreError`` (an anonymous caller it refuses, for example).
        """
        chat_repo, message_repo = await repositories_for(self._store, request=request)
        user_uuid = repository_user_uuid(chat_repo)
        if user_uuid is None:
            owner_id = await self.owner_id(request)
            user_uuid = owner_user_uuid(owner_id)
        return chat_repo, message_repo, user_uuid

    async def owner_id(self, request: HttpRequest) -> str:
        """The store owner of ``request`` (``StoreError`` if the store refuses the caller).

        Resolved once per request (off the event loop: it may read the session).
        """
        allow_anonymous = serves_anonymous(self._store)
        known: dict[bool, str] = request.__dict__.setdefault(_OWNER_ATTR, {})
        if allow_anonymous not in known:
            known[allow_anonymous] = await sync_to_async(resolve_owner_id)(
                request, allow_anonymous=allow_anonymous
            )
        return known[allow_anonymous]

    async def active_run(self, request: HttpRequest, thread_id: str) -> dict[str, Any] | None:
        """``{"runId", "lastSeq"}`` of the caller's running run on ``thread_id``, or ``None``."""
        if self.coordinator is None:
            return None
        try:
            owner_id = await self.owner_id(request)
        except StoreError:
            return None
        record = await self.coordinator.run_store.active_run_for_thread(
            owner_id=owner_id, thread_id=thread_id
        )
        if record is None:
            return None
        handle = self.coordinator.manager.get(thread_id, record.run_id, owner=owner_id)
        if handle is not None:
            return {"runId": record.run_id, "lastSeq": handle.last_seq}
        # Running on another worker: its relayed log is fresher than the record's heartbeat.
        relayed = await self.coordinator.relay.last_seq(owner_id, thread_id, record.run_id)
        return {"runId": record.run_id, "lastSeq": max(record.last_seq, relayed or 0)}

    async def settle(self, request: HttpRequest, thread_id: str | None) -> None:
        """Return once this worker's finished runs of the caller on ``thread_id`` are stored.

        A stream ends at its terminal event while the run's last writes go on behind it; a
        thread read waits for them (bounded by ``SETTLE_SECONDS``), so it sees what the stream
        showed. ``thread_id`` ``None`` waits for the caller's runs on every thread.
        """
        if self.coordinator is None:
            return
        try:
            owner_id = await self.owner_id(request)
        except StoreError:
            return
        await self.coordinator.settle(owner_id, thread_id)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        """Validate the run, prepare per-request parts, and return the SSE response.

        Every refusal happens before streaming starts and is a JSON error: 429 (throttle),
        415 (not ``application/json``), 413 (body over ``body_limit()``), 400 (invalid
        ``RunAgentInput`` or history, a client tool shadowing a server tool, or an attachment
        reference that names no upload of the caller, each logged as one ``WARNING`` line), 403
        (a persisting store refuses this caller) and 409 (the thread is running another run,
        with ``concurrent_runs="reject"``; a run of this worker that only stores its last
        writes after its stream ended is waited for instead). Afterwards, failures are
        ``RUN_ERROR``, and every stream ends with ``RUN_FINISHED`` or ``RUN_ERROR``.
        """
        options = self._options
        refusal = await self._access.check_throttle(request)
        if refusal is not None:
            return refusal
        body = read_json_body(request, limit=self._body_limit(), too_big=RUN_TOO_BIG)
        if not isinstance(body, bytes):
            return body
        try:
            run_input = parse_run_input(body)
        except RunInputError as exc:
            return refuse_input(request, str(exc))
        problem = history_problem(run_input) or clashing_tool_problem(self._agent, run_input)
        if problem is not None:
            return refuse_input(request, problem)
        try:
            run_input = await server_attachment_refs(
                run_input, self._attachment_store, request=request
            )
        except RunInputError as exc:
            return refuse_input(request, str(exc))
        except StoreError as exc:
            return store_refusal(exc, store="attachment")
        accept = request.headers.get("accept")
        try:
            build_adapter(
                self._agent,
                run_input,
                accept=accept,
                allowed_file_url_schemes=options.allowed_file_url_schemes,
                expose_error_messages=options.expose_error_messages,
            )
        except (ValueError, TypeError):
            return refuse_input(request, unconvertible_history_problem(run_input))
        warn_if_wsgi(request)
        if self.coordinator is None:
            deps = await build_deps(
                options.deps_factory, request, attachment_store=self._attachment_store
            )
            events = self._inner(request, deps, accept).run(run_input)
            return sse_response(self._frames(events, run_input.run_id))
        # The session cookie must go out with the response headers, so an anonymous caller's
        # session is created now, never after streaming started.
        await ensure_anonymous_session(request, self._store)
        try:
            owner_id = await self.owner_id(request)
            chat_repo, message_repo, user_uuid = await self.repositories(request)
            # A repository that can tell a run would create a thread over quota says so now,
            # as a 413, rather than in a RUN_ERROR once streaming started.
            await refuse_over_quota(chat_repo, run_input.thread_id)
        except StoreError as exc:
            return store_refusal(exc, store="conversation")
        coordinator = self.coordinator
        handle = coordinator.manager.get(run_input.thread_id, run_input.run_id, owner=owner_id)
        if handle is None:
            busy = await self._claim(owner_id, run_input)
            if busy is not None:
                return busy
            deps = await build_deps(
                options.deps_factory, request, attachment_store=self._attachment_store
            )
            handle = await coordinator.manager.run_as(
                owner_id,
                run_input,
                chat_repo,
                message_repo,
                user_uuid,
                self._inner(request, deps, accept),
            )
            coordinator.track(handle, owner_id)
        frames = replay(
            handle,
            0,
            heartbeat_seconds=options.heartbeat_seconds,
            coalesce_seconds=options.stream_coalesce_seconds,
        )
        if options.on_disconnect == "cancel":
            frames = self._cancelling(handle, frames)
        response = sse_response(frames)
        if options.on_disconnect == "cancel":
            # The client left before the response started: no reader will ever close it.
            setattr(response, ABANDONED_HOOK, handle.cancel)
        return response

    async def _claim(self, owner_id: str, run_input: RunAgentInput) -> HttpResponseBase | None:
        """Record the run as ``running``; a 409 if the thread is busy (or the run ran)."""
        assert self.coordinator is not None
        run_store = self.coordinator.run_store
        thread_id, run_id = run_input.thread_id, run_input.run_id
        for _attempt in range(2):
            record, started = await run_store.start(
                owner_id=owner_id, thread_id=thread_id, run_id=run_id, worker_id=WORKER_ID
            )
            if started:
                return None
            if record.run_id == run_id:
                return error_response(
                    409,
                    f"Run {run_id!r} already ran on thread {thread_id!r} ({record.status}); "
                    "start a new run with a new runId, or reattach to this one.",
                )
            if await self._finishing(owner_id, thread_id, record.run_id):
                continue  # it ended for its readers and has now stored its last events
            if self._options.concurrent_runs != "interrupt":
                response = error_response(
                    409, THREAD_BUSY.format(thread_id=thread_id, run_id=record.run_id)
                )
                assert isinstance(response, JsonResponse)
                return response
            await self.coordinator.request_cancel(owner_id, thread_id, record.run_id)
            await self._wait_until_idle(owner_id, thread_id, record.run_id)
        return error_response(409, THREAD_BUSY.format(thread_id=thread_id, run_id="?"))

    async def _finishing(self, owner_id: str, thread_id: str, run_id: str) -> bool:
        """Wait (a bounded time) for a run of this worker that already sent its terminal event
        and is still storing its last events; ``True`` once it is done.

        A client sends its next turn as soon as it reads ``RUN_FINISHED``: that turn must not
        find the thread busy with a run that has ended for every reader.
        """
        assert self.coordinator is not None
        handle = self.coordinator.manager.get(thread_id, run_id, owner=owner_id)
        if handle is None:
            return await self._finishing_elsewhere(owner_id, thread_id, run_id)
        if handle.terminal_event is None:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(handle.wait(), timeout=self._options.interrupt_wait_seconds)
        return handle.done()

    async def _finishing_elsewhere(self, owner_id: str, thread_id: str, run_id: str) -> bool:
        """The same for a run this worker does not hold: ``True`` once its record has ended.

        It may have ended between the claim's read and now; or it runs on another worker and
        has relayed its terminal event, and then its record is waited for (bounded).
        """
        assert self.coordinator is not None
        coordinator = self.coordinator
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._options.interrupt_wait_seconds
        while True:
            record = await coordinator.run_store.get(
                owner_id=owner_id, thread_id=thread_id, run_id=run_id
            )
            if record is None or not record.running:
                return True
            if loop.time() >= deadline or not await coordinator.relay.ended(
                owner_id, thread_id, run_id
            ):
                return False
            await asyncio.sleep(0.05)

    async def _wait_until_idle(self, owner_id: str, thread_id: str, run_id: str) -> None:
        """Wait (a bounded time) for a cancelled run to end, here or on another worker."""
        assert self.coordinator is not None
        handle = self.coordinator.manager.get(thread_id, run_id, owner=owner_id)
        if handle is not None:
            with contextlib.suppress(TimeoutError):  # still running: the caller answers 409
                await asyncio.wait_for(handle.wait(), timeout=self._options.interrupt_wait_seconds)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._options.interrupt_wait_seconds
        while loop.time() < deadline:
            record = await self.coordinator.run_store.get(
                owner_id=owner_id, thread_id=thread_id, run_id=run_id
            )
            if record is None or not record.running:
                return
            await asyncio.sleep(0.1)

    def _inner(self, request: HttpRequest, deps: Any, accept: str | None) -> PydanticAIAgent:
        options = self._options
        return PydanticAIAgent(
            self._agent,
            deps=deps,
            accept=accept,
            instructions=options.instructions,
            allowed_file_url_schemes=options.allowed_file_url_schemes,
            expose_error_messages=options.expose_error_messages,
            forward_reasoning=options.forward_reasoning,
        )

    def _frames(self, events: AsyncIterator[BaseEvent], run_id: str) -> AsyncIterator[str]:
        options = self._options
        return stateless_frames(
            events,
            run_id,
            heartbeat_seconds=options.heartbeat_seconds,
            coalesce_seconds=options.stream_coalesce_seconds,
        )

    @staticmethod
    async def _cancelling(handle: Any, frames: AsyncIterator[str]) -> AsyncIterator[str]:
        """The durable stream of ``on_disconnect="cancel"``: closing it (a disconnect) cancels
        the run; otherwise a disconnect stops only the reading."""
        try:
            async for frame in frames:
                yield frame
        finally:
            await aclose(frames)
            if handle.terminal_event is None:
                handle.cancel()
