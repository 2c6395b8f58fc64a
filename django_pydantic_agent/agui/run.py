"""The run endpoint: ``RunAgentInput`` JSON in, an AG-UI event stream out as SSE.

The stream is an async generator handed to ``StreamingHttpResponse``, which streams only under
ASGI. Between the pydantic-ai adapter and the socket sit, in order: the redacting error hook
(``RUN_ERROR`` text is generic unless the server exposes it; the real exception is logged), the
reasoning filter (when ``forward_reasoning`` is off), the transcript observer (when persisting,
it folds each forwarded event, see ``transcript.py``), a guard that turns any other exception into
``RUN_ERROR``, the save (when persisting: the terminal event is held back until the run is saved,
and a failed save ends the stream with ``RUN_ERROR`` instead of ``RUN_FINISHED``), the SSE encoder
and the heartbeat. A client disconnect cancels the whole chain in the task that runs it;
persistence then still runs, shielded, before the cancellation is re-raised, and saves what the
stream announced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ag_ui.core import BaseEvent, EventType, RunAgentInput, RunErrorEvent, RunStartedEvent
from ag_ui.encoder import EventEncoder
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from pydantic import ValidationError
from pydantic_ai.ui.ag_ui import AGUIAdapter, AGUIEventStream

from django_pydantic_agent.agui.access import store_refusal
from django_pydantic_agent.agui.http import (
    is_json_request,
    not_json_response,
    read_json_body,
    refuse_input,
)
from django_pydantic_agent.agui.ids import ID_RULE, is_valid_id
from django_pydantic_agent.agui.input import (
    clashing_tool_problem,
    history_problem,
    may_hold_unstorable_values,
    unstorable_problem,
)
from django_pydantic_agent.agui.transcript import Transcript, wire_message
from django_pydantic_agent.persistence import (
    AnonymousOperationError,
    Conversation,
    StoreError,
    StoreLimitError,
)

if TYPE_CHECKING:
    from pydantic_ai.agent import AgentRunResult
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.ui import UIEventStream

    from django_pydantic_agent.agui.server import AGUIServer

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
    "is_json_request",
    "not_json_response",
    "parse_run_input",
    "read_json_body",
    "with_heartbeat",
    "without_reasoning",
]

logger = logging.getLogger("django_pydantic_agent.agui")

#: The ``RUN_ERROR`` message a client sees unless the server exposes error messages.
REDACTED_RUN_ERROR = "The agent run failed. The error has been logged on the server."
#: The SSE comment written after ``heartbeat_seconds`` of silence; AG-UI clients ignore it.
SSE_HEARTBEAT = ": ping\n\n"

#: What the 413 of the run endpoint asks the caller to send instead.
RUN_TOO_BIG = "send a shorter history, or raise the limit."

_MAX_REPORTED_PROBLEMS = 5
_TERMINAL_EVENTS = frozenset({EventType.RUN_FINISHED, EventType.RUN_ERROR})
_T = TypeVar("_T")


class RunInputError(ValueError):
    """The request body is not a usable ``RunAgentInput``; the message is safe to return."""


def _describe_validation_error(exc: ValidationError) -> str:
    """Name the failing fields and error kinds, never the submitted values."""
    problems = []
    for error in exc.errors()[:_MAX_REPORTED_PROBLEMS]:
        location = ".".join(str(part) for part in error["loc"]) or "(body)"
        problems.append(f"{location} ({error['type']})")
    more = exc.error_count() - len(problems)
    suffix = f" and {more} more" if more > 0 else ""
    return "; ".join(problems) + suffix


#: The 400 message for a JSON body nested deeper than the parser's recursion limit.
NESTED_TOO_DEEPLY = (
    "The request body is nested too deeply to parse; send at most a few hundred levels of "
    "nested arrays and objects."
)


def _load_json(body: bytes) -> Any:
    """``json.loads(body)``, raising ``RunInputError`` with a safe message on any failure."""
    try:
        return json.loads(body)
    except RecursionError as exc:
        raise RunInputError(NESTED_TOO_DEEPLY) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunInputError("The request body is not valid JSON; send a RunAgentInput.") from exc


def parse_run_input(body: bytes) -> RunAgentInput:
    """Parse a request body into a ``RunAgentInput`` (camelCase JSON).

    Raises ``RunInputError`` with a message naming what is wrong (not JSON, nested too deeply,
    not an object, NaN, NUL or an unpaired surrogate anywhere, the failing fields and error
    kinds, a ``threadId``/``runId`` outside the id alphabet of ``ids.py``, no messages) and
    never echoing the payload.
    """
    try:
        run_input = AGUIAdapter.build_run_input(body)
    except ValidationError as exc:
        # The body is parsed a second time only to word the refusal: pydantic rejects every
        # body that json.loads rejects, so the common, valid case is parsed once.
        payload = _load_json(body)
        # pydantic's parser refuses an unpaired surrogate as mere "invalid JSON"; name it.
        unstorable = unstorable_problem(body) if isinstance(payload, dict) else None
        if unstorable is not None:
            raise RunInputError(unstorable) from exc
        if not isinstance(payload, dict):
            raise RunInputError(
                f"The request body is a JSON {type(payload).__name__}, not an object; send a "
                "RunAgentInput object with threadId, runId and messages."
            ) from exc
        raise RunInputError(
            f"The request body is not a valid RunAgentInput: {_describe_validation_error(exc)}."
        ) from exc
    for name, value in (("threadId", run_input.thread_id), ("runId", run_input.run_id)):
        if not is_valid_id(value):
            raise RunInputError(f"{name} must be {ID_RULE}.")
    if not run_input.messages:
        raise RunInputError(
            "messages is empty: send at least one message (the user's turn) to run the agent."
        )
    # Only a body that could hold such a value is parsed a second time, to find it.
    unstorable = unstorable_problem(body) if may_hold_unstorable_values(body) else None
    if unstorable is not None:
        raise RunInputError(unstorable)
    return run_input


def _history_problem(run_input: RunAgentInput) -> str:
    """Name what makes the posted messages unusable as a history, without echoing values."""
    called: set[str] = set()
    for index, message in enumerate(run_input.messages):
        for call in getattr(message, "tool_calls", None) or ():
            called.add(call.id)
        if message.role == "tool" and message.tool_call_id not in called:
            return (
                f"messages.{index} is a tool message whose toolCallId answers no tool call "
                "of an earlier assistant message; send the history as it was streamed."
            )
    return (
        "The messages are not a usable conversation history (for example a file part with "
        "neither url nor data); send the history as it was streamed."
    )


@dataclass
class _ServerEventStream(AGUIEventStream[Any, Any]):
    """The AG-UI event stream with ``RUN_ERROR`` messages redacted and the error logged."""

    expose_error_messages: bool = field(default=False, kw_only=True)

    async def on_error(self, error: Exception) -> AsyncIterator[BaseEvent]:
        run_input = self.run_input
        logger.error(
            "The agent run %r on thread %r failed.",
            run_input.run_id if run_input else None,
            run_input.thread_id if run_input else None,
            exc_info=error,
        )
        async for event in super().on_error(error):
            if isinstance(event, RunErrorEvent) and not self.expose_error_messages:
                yield event.model_copy(update={"message": REDACTED_RUN_ERROR})
            else:  # pragma: no cover - the AG-UI stream yields only RUN_ERROR here
                yield event


@dataclass
class _ServerAGUIAdapter(AGUIAdapter[Any, Any]):
    """``AGUIAdapter`` whose event stream redacts errors (see ``_ServerEventStream``)."""

    expose_error_messages: bool = field(default=False, kw_only=True)

    def build_event_stream(self) -> UIEventStream[RunAgentInput, BaseEvent, Any, Any]:
        return _ServerEventStream(
            self.run_input,
            accept=self.accept,
            ag_ui_version=self.ag_ui_version,
            manage_system_prompt=self.manage_system_prompt,
            preserve_file_data=self.preserve_file_data,
            expose_error_messages=self.expose_error_messages,
        )


async def without_reasoning(events: AsyncIterator[BaseEvent]) -> AsyncIterator[BaseEvent]:
    """Drop every ``REASONING_*`` event, so chain-of-thought never reaches the browser."""
    async for event in events:
        if not event.type.value.startswith("REASONING_"):
            yield event


async def with_heartbeat(frames: AsyncIterator[str], interval: float) -> AsyncIterator[str]:
    """Yield ``frames``, plus ``SSE_HEARTBEAT`` whenever ``interval`` seconds pass in silence.

    ``frames`` is driven by one pump task feeding a one-slot queue, so it runs entirely in a
    single task (its cancel scopes stay valid) and a heartbeat never cancels a pending read.
    Closing or cancelling this generator cancels the pump and waits for it; no task outlives it.
    """
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(maxsize=1)

    async def pump() -> None:
        try:
            async for frame in frames:
                await queue.put(("frame", frame))
            await queue.put(("end", None))
        except Exception as exc:  # handed to the consumer, re-raised there
            await queue.put(("error", exc))
        finally:
            await _aclose(frames)

    task = asyncio.create_task(pump())
    try:
        while True:
            try:
                # Not asyncio.wait_for: on Python 3.11 it swallows a cancel that lands while a
                # frame is already queued, and the stream would outlive its client.
                async with asyncio.timeout(interval):
                    kind, value = await queue.get()
            except TimeoutError:
                yield SSE_HEARTBEAT
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _aclose(iterator: AsyncIterator[Any]) -> None:
    aclose = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()


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


_wsgi_warned: list[bool] = []


def _warn_wsgi_once() -> None:
    """Log, once per process, that a WSGI server buffers the whole event stream."""
    if not _wsgi_warned:
        _wsgi_warned.append(True)
        logger.warning(
            "The AG-UI run endpoint is being served over WSGI, which buffers the whole "
            "event stream until the run ends. Serve the project with an ASGI server "
            "(uvicorn, daphne, or gunicorn with uvicorn workers) to stream."
        )


#: ``RUN_ERROR`` codes the run endpoint sets itself, when a finished run could not be saved.
STORE_LIMIT_CODE = "STORE_LIMIT"
STORE_REFUSED_CODE = "STORE_REFUSED"
STORE_FAILED_CODE = "STORE_FAILED"
#: The message of a ``STORE_FAILED`` ``RUN_ERROR`` unless the server exposes error messages.
REDACTED_SAVE_ERROR = (
    "The agent run finished but could not be saved. The error has been logged on the server."
)


class RunEndpoint:
    """The ``POST <mount>/`` handler of an ``AGUIServer``."""

    def __init__(self, server: AGUIServer) -> None:
        self._server = server

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        """Validate the run, prepare per-request parts, and return the SSE response.

        Every refusal happens before streaming starts and is a JSON error: 429 (throttle),
        415 (not ``application/json``), 413 (body over the server's ``json_body_limit()``),
        400 (invalid ``RunAgentInput`` or history, or a client tool shadowing a server tool,
        each logged as one ``WARNING`` line) and 403 (a persisting store refuses this
        caller). Afterwards, failures are ``RUN_ERROR``, and every stream ends with
        ``RUN_FINISHED`` or ``RUN_ERROR``.
        """
        server = self._server
        refusal = await server.access.check_throttle(request)
        if refusal is not None:
            return refusal
        body = read_json_body(request, limit=server.json_body_limit(), too_big=RUN_TOO_BIG)
        if not isinstance(body, bytes):
            return body
        try:
            run_input = parse_run_input(body)
        except RunInputError as exc:
            return refuse_input(request, str(exc))
        problem = history_problem(run_input) or clashing_tool_problem(server.agent, run_input)
        if problem is not None:
            return refuse_input(request, problem)
        adapter = _ServerAGUIAdapter(
            agent=server.agent,
            run_input=run_input,
            accept=request.headers.get("accept"),
            allowed_file_url_schemes=server.allowed_file_url_schemes,
            expose_error_messages=server.expose_error_messages,
        )
        try:
            adapter.messages  # noqa: B018 - converts (and caches) the history, or raises
        except (ValueError, TypeError):
            return refuse_input(request, _history_problem(run_input))
        persisting = server.persists_conversations
        thread_existed = False
        if persisting:
            store = server.conversation_store
            # The session cookie must go out with the response headers, so an anonymous
            # caller's session is created now, never after streaming started.
            await server.ensure_anonymous_session(request, store)
            try:
                # Fail before streaming if the store refuses this caller.
                thread_existed = await store.exists(run_input.thread_id, request=request)
            except StoreError as exc:
                return store_refusal(exc, store="conversation")
        if getattr(request, "scope", None) is None:
            _warn_wsgi_once()
        deps = await server.build_deps(request)
        response = StreamingHttpResponse(
            self._stream(
                request, adapter, deps, persisting=persisting, thread_existed=thread_existed
            ),
            content_type=EventEncoder().get_content_type(),
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        # GZipMiddleware skips responses that already declare an encoding; gzip breaks SSE.
        response["Content-Encoding"] = "identity"
        return response

    async def _stream(
        self,
        request: HttpRequest,
        adapter: _ServerAGUIAdapter,
        deps: Any,
        *,
        persisting: bool,
        thread_existed: bool,
    ) -> AsyncIterator[str]:
        server = self._server
        run_input = adapter.run_input
        record = _RunRecord(
            Transcript(include_reasoning=server.forward_reasoning), thread_existed=thread_existed
        )

        async def agent_events() -> AsyncIterator[BaseEvent]:
            # Inside the generator, so an exception raised while starting the run is caught
            # by ``_guarded`` like any other.
            events = adapter.run_stream(
                deps=deps,
                instructions=server.instructions,
                on_complete=record.complete if persisting else None,
            )
            try:
                async for event in events:
                    yield event
            finally:
                await _aclose(events)

        root = agent_events()
        events: AsyncIterator[BaseEvent] = root
        if not server.forward_reasoning:
            events = without_reasoning(events)
        if persisting:
            events = record.observe(events)
        events = self._guarded(events, run_input)
        if persisting:
            events = self._saved_before_the_end(events, request, run_input, record)
        encoder = EventEncoder()
        frames: AsyncIterator[str] = (encoder.encode(event) async for event in events)
        if server.heartbeat_seconds:
            frames = with_heartbeat(frames, server.heartbeat_seconds)
        try:
            async for frame in frames:
                yield frame
        finally:
            await _aclose(frames)
            await _aclose(root)  # in case a layer above it failed without closing it
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
            logger.error(
                "The agent run %r on thread %r failed.",
                run_input.run_id,
                run_input.thread_id,
                exc_info=exc,
            )
            if ended:  # pragma: no cover - pydantic-ai yields nothing after the terminal event
                return
            if not started:
                yield RunStartedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id)
            yield RunErrorEvent(
                message=str(exc) if self._server.expose_error_messages else REDACTED_RUN_ERROR
            )
        finally:
            await _aclose(events)

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
            await _aclose(events)

    async def _persist(
        self, request: HttpRequest, run_input: RunAgentInput, record: _RunRecord
    ) -> RunErrorEvent | None:
        """Save posted + run messages; return ``None``, or the ``RUN_ERROR`` for a failure.

        A thread that existed when the run started and is gone now was deleted meanwhile: the
        save is skipped (logged at ``INFO``), so the run does not bring it back. Never raises: a
        failure is logged, and described by the returned event.
        """
        store = self._server.conversation_store
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
            return self._save_error(exc)
        return None

    def _save_error(self, exc: Exception) -> RunErrorEvent:
        """The ``RUN_ERROR`` a client gets instead of ``RUN_FINISHED`` when the save failed."""
        if isinstance(exc, StoreLimitError):
            return RunErrorEvent(message=str(exc), code=STORE_LIMIT_CODE)
        if isinstance(exc, AnonymousOperationError):
            return RunErrorEvent(
                message="This agent's conversation store does not serve anonymous visitors.",
                code=STORE_REFUSED_CODE,
            )
        if isinstance(exc, StoreError):
            # Store refusals are written for the caller, as in the thread routes' 409.
            return RunErrorEvent(message=str(exc), code=STORE_REFUSED_CODE)
        message = str(exc) if self._server.expose_error_messages else REDACTED_SAVE_ERROR
        return RunErrorEvent(message=message, code=STORE_FAILED_CODE)
