"""The run endpoint: ``RunAgentInput`` JSON in, an AG-UI event stream out as SSE.

``RunEndpoint`` refuses what it can before streaming (``input.py`` parses and checks the body,
``inner.py`` builds the adapter), then hands an async generator to ``sse_response``
(``sse.py``). Between the pydantic-ai adapter and the socket sit, in order: the redacting error
hook (``inner.py``), the reasoning filter (when ``forward_reasoning`` is off), the transcript
observer (when persisting, it folds each forwarded event, see ``transcript.py``), a guard that
turns any other exception into ``RUN_ERROR``, the save (when persisting: the terminal event is
held back until the run is saved, and a failed save ends the stream with ``RUN_ERROR`` instead of
``RUN_FINISHED``), the SSE encoder and the heartbeat. A client disconnect cancels the whole chain
in the task that runs it; persistence then still runs, shielded, before the cancellation is
re-raised, and saves what the stream announced.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ag_ui.core import BaseEvent, EventType, RunAgentInput, RunErrorEvent, RunStartedEvent
from django.http import HttpRequest, HttpResponseBase
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.ui.ag_ui import AGUIAdapter

from django_pydantic_agent.agui.access import AccessPolicy
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
from django_pydantic_agent.agui.http import read_json_body, refuse_input
from django_pydantic_agent.agui.inner import (
    RedactingAGUIAdapter,
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
from django_pydantic_agent.agui.sse import (
    SSE_HEARTBEAT,
    aclose,
    encode_event,
    sse_response,
    warn_if_wsgi,
    with_heartbeat,
)
from django_pydantic_agent.agui.transcript import Transcript, wire_message
from django_pydantic_agent.persistence import (
    Conversation,
    ConversationStore,
    StoreError,
    is_persistent,
)

if TYPE_CHECKING:
    from pydantic_ai.agent import AgentRunResult
    from pydantic_ai.messages import ModelMessage

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
    "parse_run_input",
    "with_heartbeat",
    "without_reasoning",
]

logger = logging.getLogger("django_pydantic_agent.agui")

#: What the 413 of the run endpoint asks the caller to send instead.
RUN_TOO_BIG = "send a shorter history, or raise the limit."

_TERMINAL_EVENTS = frozenset({EventType.RUN_FINISHED, EventType.RUN_ERROR})
_T = TypeVar("_T")


@dataclass
class _RunRecord:
    """What a persisting run saves: the folded stream, and the run's result if it completed."""

    transcript: Transcript
    new_messages: list[ModelMessage] | None = None
    #: Whether the thread was stored when the run started: if it is gone by the end, a DELETE
    #: arrived meanwhile, and saving would bring it back.
    thread_existed: bool = False
    #: Set once a save has started, so a run is saved exactly once however it ends.
    saving: bool = False

    async def complete(self, result: AgentRunResult[Any]) -> None:
        """``on_complete`` hook: keep the run's new messages (async: no worker thread)."""
        self.new_messages = result.new_messages()

    async def observe(self, events: AsyncIterator[BaseEvent]) -> AsyncIterator[BaseEvent]:
        """Pass ``events`` through, folding each into the transcript as it is forwarded."""
        async for event in events:
            self.transcript.fold(event)
            yield event

    def saved_messages(self) -> list[dict[str, Any]]:
        """The run's messages to save after the posted ones, however the run ended.

        A completed run saves its result (``dump_messages``, which keeps tool outcomes and
        provider metadata) re-keyed to the streamed ids; a run cut short by an error or a
        client disconnect has no result, so it saves what the stream announced.
        """
        if self.new_messages is not None:
            return self.transcript.align(AGUIAdapter.dump_messages(self.new_messages))
        return self.transcript.messages()


async def _finish_even_if_cancelled(work: Callable[[], Awaitable[_T]]) -> _T:
    """Run the coroutine ``work()`` to completion even when the caller is being cancelled.

    The work runs in its own task; a cancellation of the caller waits for it, then propagates.
    Returns what ``work()`` returned.
    """
    task = asyncio.ensure_future(work())
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


class RunEndpoint:
    """The ``POST <mount>/`` handler: run ``agent`` for one ``RunAgentInput``, stream it as SSE.

    ``store`` is the conversation store (a Null store: stateless, nothing saved); ``access``
    supplies the throttle, ``body_limit()`` the body cap per request, and ``options`` how the
    agent runs and streams.
    """

    def __init__(
        self,
        agent: AbstractAgent[Any, Any],
        store: ConversationStore,
        *,
        access: AccessPolicy,
        body_limit: Callable[[], int],
        options: RunOptions,
    ) -> None:
        self._agent = agent
        self._store = store
        self._access = access
        self._body_limit = body_limit
        self._options = options

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        """Validate the run, prepare per-request parts, and return the SSE response.

        Every refusal happens before streaming starts and is a JSON error: 429 (throttle),
        415 (not ``application/json``), 413 (body over ``body_limit()``), 400 (invalid
        ``RunAgentInput`` or history, or a client tool shadowing a server tool, each logged as
        one ``WARNING`` line) and 403 (a persisting store refuses this caller). Afterwards,
        failures are ``RUN_ERROR``, and every stream ends with ``RUN_FINISHED`` or
        ``RUN_ERROR``.
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
            adapter = build_adapter(
                self._agent,
                run_input,
                accept=request.headers.get("accept"),
                allowed_file_url_schemes=options.allowed_file_url_schemes,
                expose_error_messages=options.expose_error_messages,
            )
        except (ValueError, TypeError):
            return refuse_input(request, unconvertible_history_problem(run_input))
        persisting = is_persistent(self._store)
        thread_existed = False
        if persisting:
            # The session cookie must go out with the response headers, so an anonymous
            # caller's session is created now, never after streaming started.
            await ensure_anonymous_session(request, self._store)
            try:
                # Fail before streaming if the store refuses this caller.
                thread_existed = await self._store.exists(run_input.thread_id, request=request)
            except StoreError as exc:
                return store_refusal(exc, store="conversation")
        warn_if_wsgi(request)
        deps = await build_deps(options.deps_factory, request)
        return sse_response(
            self._stream(
                request, adapter, deps, persisting=persisting, thread_existed=thread_existed
            )
        )

    async def _stream(
        self,
        request: HttpRequest,
        adapter: RedactingAGUIAdapter,
        deps: Any,
        *,
        persisting: bool,
        thread_existed: bool,
    ) -> AsyncIterator[str]:
        options = self._options
        run_input = adapter.run_input
        record = _RunRecord(
            Transcript(include_reasoning=options.forward_reasoning), thread_existed=thread_existed
        )

        async def agent_events() -> AsyncIterator[BaseEvent]:
            # Inside the generator, so an exception raised while starting the run is caught
            # by ``_guarded`` like any other.
            events = adapter.run_stream(
                deps=deps,
                instructions=options.instructions,
                on_complete=record.complete if persisting else None,
            )
            try:
                async for event in events:
                    yield event
            finally:
                await aclose(events)

        root = agent_events()
        events: AsyncIterator[BaseEvent] = root
        if not options.forward_reasoning:
            events = without_reasoning(events)
        if persisting:
            events = record.observe(events)
        events = self._guarded(events, run_input)
        if persisting:
            events = self._saved_before_the_end(events, request, run_input, record)
        frames: AsyncIterator[str] = (encode_event(event) async for event in events)
        if options.heartbeat_seconds:
            frames = with_heartbeat(frames, options.heartbeat_seconds)
        try:
            async for frame in frames:
                yield frame
        finally:
            await aclose(frames)
            await aclose(root)  # in case a layer above it failed without closing it
            if persisting and not record.saving:
                # The client went away before the run ended: save what it was shown.
                record.saving = True
                await _finish_even_if_cancelled(lambda: self._persist(request, run_input, record))

    async def _guarded(
        self, events: AsyncIterator[BaseEvent], run_input: RunAgentInput
    ) -> AsyncIterator[BaseEvent]:
        """Pass ``events`` through; turn an exception into ``RUN_STARTED`` + ``RUN_ERROR``.

        pydantic-ai reports the agent's own failures as ``RUN_ERROR``; this catches what it
        cannot (a failure while starting the run, or in a filter), so no stream ever ends
        without a terminal event. The error is logged, and redacted unless exposed.
        """
        started = ended = False
        try:
            async for event in events:
                started = started or event.type == EventType.RUN_STARTED
                ended = event.type in _TERMINAL_EVENTS
                yield event
        except Exception as exc:
            log_run_failure(run_input, exc)
            if ended:  # pragma: no cover - pydantic-ai yields nothing after the terminal event
                return
            if not started:
                yield RunStartedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id)
            yield run_error(exc, expose=self._options.expose_error_messages)
        finally:
            await aclose(events)

    async def _saved_before_the_end(
        self,
        events: AsyncIterator[BaseEvent],
        request: HttpRequest,
        run_input: RunAgentInput,
        record: _RunRecord,
    ) -> AsyncIterator[BaseEvent]:
        """Hold back the terminal event until the run is saved.

        ``RUN_FINISHED`` goes out only once the save succeeded; a failed save replaces it with
        ``RUN_ERROR`` (code ``STORE_LIMIT``, ``STORE_REFUSED`` or ``STORE_FAILED``), so a
        client never believes an unsaved run was kept. A run that already failed keeps its own
        ``RUN_ERROR``. The save is shielded: a disconnect meanwhile does not interrupt it.
        """
        try:
            async for event in events:
                if event.type not in _TERMINAL_EVENTS:
                    yield event
                    continue
                record.saving = True
                failure = await _finish_even_if_cancelled(
                    lambda: self._persist(request, run_input, record)
                )
                yield event if failure is None or event.type == EventType.RUN_ERROR else failure
        finally:
            await aclose(events)

    async def _persist(
        self, request: HttpRequest, run_input: RunAgentInput, record: _RunRecord
    ) -> RunErrorEvent | None:
        """Save posted + run messages; return ``None``, or the ``RUN_ERROR`` for a failure.

        A thread that existed when the run started and is gone now was deleted meanwhile: the
        save is skipped (logged at ``INFO``), so the run does not bring it back. Never raises: a
        failure is logged, and described by the returned event.
        """
        store = self._store
        try:
            if record.thread_existed and not await store.exists(
                run_input.thread_id, request=request
            ):
                logger.info(
                    "Thread %r was deleted while run %r streamed; the run is not saved.",
                    run_input.thread_id,
                    run_input.run_id,
                )
                return None
            messages = [wire_message(message) for message in run_input.messages]
            messages.extend(record.saved_messages())
            conversation = Conversation(thread_id=run_input.thread_id, messages=messages)
            await store.save(conversation, request=request)
        except Exception as exc:
            logger.error(
                "Saving thread %r after run %r failed; the run was not persisted.",
                run_input.thread_id,
                run_input.run_id,
                exc_info=exc,
            )
            if isinstance(exc, StoreError):
                # Store refusals are written for the caller, as in the thread routes' answers.
                return store_refusal_event(exc, store="conversation")
            return run_error(
                exc,
                expose=self._options.expose_error_messages,
                code=STORE_FAILED_CODE,
                redacted=REDACTED_SAVE_ERROR,
            )
        return None
