"""The run endpoint: ``RunAgentInput`` JSON in, an AG-UI event stream out as SSE.

The stream is an async generator handed to ``StreamingHttpResponse``, which streams only under
ASGI. Between the pydantic-ai adapter and the socket sit, in order: the redacting error hook
(``RUN_ERROR`` text is generic unless the server exposes it; the real exception is logged), the
reasoning filter (when ``forward_reasoning`` is off), the transcript observer (when persisting,
it folds each forwarded event, see ``transcript.py``), the SSE encoder and the heartbeat. A
client disconnect cancels the whole chain in the task that runs it; persistence then still runs,
shielded, before the cancellation is re-raised, and saves what the stream announced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ag_ui.core import BaseEvent, RunAgentInput, RunErrorEvent
from ag_ui.encoder import EventEncoder
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from pydantic import ValidationError
from pydantic_ai.ui.ag_ui import AGUIAdapter, AGUIEventStream

from django_pydantic_agent.agui.access import error_response, store_refusal
from django_pydantic_agent.agui.transcript import Transcript, wire_message
from django_pydantic_agent.persistence import Conversation, StoreError

if TYPE_CHECKING:
    from pydantic_ai.agent import AgentRunResult
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.ui import UIEventStream

    from django_pydantic_agent.agui.server import AGUIServer

__all__ = [
    "REDACTED_RUN_ERROR",
    "SSE_HEARTBEAT",
    "RunEndpoint",
    "parse_run_input",
    "with_heartbeat",
    "without_reasoning",
]

logger = logging.getLogger("django_pydantic_agent.agui")

#: The ``RUN_ERROR`` message a client sees unless the server exposes error messages.
REDACTED_RUN_ERROR = "The agent run failed. The error has been logged on the server."
#: The SSE comment written after ``heartbeat_seconds`` of silence; AG-UI clients ignore it.
SSE_HEARTBEAT = ": ping\n\n"

_MAX_ID_LENGTH = 255
_MAX_REPORTED_PROBLEMS = 5


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


def parse_run_input(body: bytes) -> RunAgentInput:
    """Parse a request body into a ``RunAgentInput`` (camelCase JSON).

    Raises ``RunInputError`` with a message naming what is wrong (not JSON, not an object, the
    failing fields and error kinds, an empty or over-long ``threadId``/``runId``) and never
    echoing the payload.
    """
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunInputError("The request body is not valid JSON; send a RunAgentInput.") from exc
    if not isinstance(payload, dict):
        raise RunInputError(
            f"The request body is a JSON {type(payload).__name__}, not an object; send a "
            "RunAgentInput object with threadId, runId and messages."
        )
    try:
        run_input = AGUIAdapter.build_run_input(body)
    except ValidationError as exc:
        raise RunInputError(
            f"The request body is not a valid RunAgentInput: {_describe_validation_error(exc)}."
        ) from exc
    for name, value in (("threadId", run_input.thread_id), ("runId", run_input.run_id)):
        if not value or len(value) > _MAX_ID_LENGTH:
            raise RunInputError(
                f"{name} must be a non-empty string of at most {_MAX_ID_LENGTH} characters."
            )
    return run_input


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
                kind, value = await asyncio.wait_for(queue.get(), timeout=interval)
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


async def _finish_even_if_cancelled(work: Callable[[], Any]) -> None:
    """Run the coroutine ``work()`` to completion even when the caller is being cancelled.

    The work runs in its own task; a cancellation of the caller waits for it, then propagates.
    """
    task = asyncio.ensure_future(work())
    try:
        await asyncio.shield(task)
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


class RunEndpoint:
    """The ``POST <mount>/`` handler of an ``AGUIServer``."""

    def __init__(self, server: AGUIServer) -> None:
        self._server = server

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        """Validate the run, prepare per-request parts, and return the SSE response.

        Every refusal happens before streaming starts and is a JSON error: 429 (throttle),
        413 (body over ``DATA_UPLOAD_MAX_MEMORY_SIZE``), 400 (invalid ``RunAgentInput``) and
        403 (a persisting store refuses this caller). Afterwards, failures are ``RUN_ERROR``.
        """
        server = self._server
        refusal = await server.access.check_throttle(request)
        if refusal is not None:
            return refusal
        try:
            body = request.body
        except RequestDataTooBig:
            return error_response(
                413,
                "The request body exceeds DATA_UPLOAD_MAX_MEMORY_SIZE; send a shorter "
                "history or raise that setting.",
            )
        try:
            run_input = parse_run_input(body)
        except RunInputError as exc:
            return error_response(400, str(exc))
        persisting = server.persists_conversations
        if persisting:
            # The session cookie must go out with the response headers, so an anonymous
            # caller's session is created now, never after streaming started.
            await server.ensure_anonymous_session(request)
            try:
                # Fail before streaming if the store refuses this caller.
                await server.conversation_store.exists(run_input.thread_id, request=request)
            except StoreError as exc:
                return store_refusal(exc, store="conversation")
        if getattr(request, "scope", None) is None:
            _warn_wsgi_once()
        deps = await server.build_deps(request)
        response = StreamingHttpResponse(
            self._stream(request, run_input, deps, persisting=persisting),
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
        run_input: RunAgentInput,
        deps: Any,
        *,
        persisting: bool,
    ) -> AsyncIterator[str]:
        server = self._server
        record = _RunRecord(Transcript(include_reasoning=server.forward_reasoning))
        adapter = _ServerAGUIAdapter(
            agent=server.agent,
            run_input=run_input,
            accept=request.headers.get("accept"),
            expose_error_messages=server.expose_error_messages,
        )
        events: AsyncIterator[BaseEvent] = adapter.run_stream(
            deps=deps,
            instructions=server.instructions,
            on_complete=record.complete if persisting else None,
        )
        if not server.forward_reasoning:
            events = without_reasoning(events)
        if persisting:
            events = record.observe(events)
        encoder = EventEncoder()
        frames: AsyncIterator[str] = (encoder.encode(event) async for event in events)
        if server.heartbeat_seconds:
            frames = with_heartbeat(frames, server.heartbeat_seconds)
        try:
            async for frame in frames:
                yield frame
        finally:
            await _aclose(frames)
            if persisting:
                await _finish_even_if_cancelled(lambda: self._persist(request, run_input, record))

    async def _persist(
        self, request: HttpRequest, run_input: RunAgentInput, record: _RunRecord
    ) -> None:
        """Save posted + run messages; log (never raise) a failure, the stream is gone."""
        try:
            messages = [wire_message(message) for message in run_input.messages]
            messages.extend(record.saved_messages())
            conversation = Conversation(thread_id=run_input.thread_id, messages=messages)
            await self._server.conversation_store.save(conversation, request=request)
        except Exception:
            logger.exception(
                "Saving thread %r after run %r failed; the run was not persisted.",
                run_input.thread_id,
                run_input.run_id,
            )
