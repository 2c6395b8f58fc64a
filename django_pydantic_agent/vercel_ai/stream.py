"""The AI SDK's UI message stream: a run's AG-UI events as its chunks, written as SSE.

``UIMessageStreamEncoder`` follows one run (the engine's ``(seq, event)`` batches) and writes
what the AI SDK's ``readUIMessageStream`` builds one assistant message from: ``start`` (with
the message id: the stored id of the answer's first message, ``vercel_ai.messages``),
``start-step``/``finish-step`` around each model response, ``text-*``, ``reasoning-*``,
``tool-input-*``, ``tool-output-available``/``-error``/``-denied``, ``tool-approval-request``
for an approval the run waits for, ``error``, ``abort`` for a stopped run, ``finish`` with
``{"runId", "status", "usage"}`` as message metadata, then ``[DONE]``.

The SDK has no snapshot part. A ``MESSAGES_SNAPSHOT`` (a resumed run's log opens with one, a
run read from storage answers with one) and the stored start of an answer that began in an
earlier run are *replayed*: each part of the answer the stream has not sent yet goes out as
the chunks that build it, so a stream that starts with a replay (``DefaultChatTransport``
treats a resumed stream as one) rebuilds the whole answer, and one that meets a snapshot
midway adds only what it lacked.

The chunk models are pydantic-ai's (``pydantic_ai.ui.vercel_ai.response_types``), encoded as
the AI SDK 6 and 7 both read them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import BaseEvent, EventType
from django.http import StreamingHttpResponse
from pydantic_ai.ui.vercel_ai.response_types import (
    AbortChunk,
    BaseChunk,
    ErrorChunk,
    FinishChunk,
    FinishReason,
    FinishStepChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolInputDeltaChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
)

from django_pydantic_agent.agui.relay import EventStream, RunStream
from django_pydantic_agent.agui.sse import SSE_HEARTBEAT, aclose, sse_response, with_heartbeat
from django_pydantic_agent.vercel_ai.messages import (
    ReasoningItem,
    StepItem,
    TextItem,
    ToolItem,
    answer_items,
    last_answer,
    result_outcome,
    tool_input,
    tool_output,
)

__all__ = [
    "DONE",
    "SDK_VERSION",
    "STOPPED",
    "UI_MESSAGE_STREAM_HEADER",
    "UIMessageStreamEncoder",
    "ui_message_frames",
    "ui_message_response",
]

#: The header that tells the AI SDK the body is a UI message stream, and its version.
UI_MESSAGE_STREAM_HEADER = ("x-vercel-ai-ui-message-stream", "v1")
#: The AI SDK major version the chunks are encoded for (``BaseChunk.encode``); 6 and 7 read
#: the same wire.
SDK_VERSION = 6
#: The last frame of a stream whose run ended.
DONE = "data: [DONE]\n\n"
#: The ``abort`` reason of a run that was stopped (the stop route, or ``concurrent_runs``).
STOPPED = "The run was stopped."

# Tool results pydantic-ai marks with a non-success outcome (``{"pydantic_ai": {"outcome"}}``).
_DENIED = "denied"


@dataclass(kw_only=True)
class _Call:
    """A tool call the stream has sent: its name, streamed arguments, and what went out."""

    name: str
    arguments: list[str] = field(default_factory=list)
    input_sent: bool = False
    output_sent: bool = False
    approval_sent: bool = False


class UIMessageStreamEncoder:
    """One run's events as UI message stream chunks (see the module docstring).

    ``message_id``: the id of the answer the run continues (a page's tool output or
    approval continues the answer it was given on), sent at once with ``start``; without it
    the answer is new and ``start`` waits for the run's first message, whose id it takes.
    ``server_tools``: the agent's own tools, sent with ``providerExecuted`` so the SDK never
    waits for the page to run them.
    """

    def __init__(
        self, *, message_id: str | None = None, server_tools: frozenset[str] = frozenset()
    ) -> None:
        self.message_id = message_id
        self.run_id: str | None = None
        self.started = False
        #: The run's terminal event has been encoded (``finish`` went out).
        self.done = False
        self._server_tools = server_tools
        self._step_open = False
        self._after_results = False
        self._texts: dict[str, bool] = {}  # open text messages: started (text-start sent)?
        self._reasonings: dict[str, bool] = {}
        self._sent: set[str] = set()  # text and reasoning ids whose part went out
        self._calls: dict[str, _Call] = {}
        self._waiting: set[str] = set()  # calls of the current step that have no output
        self._pending: Any = None  # a tool result, until its outcome is known

    # -- the live events ---------------------------------------------------------------------

    def feed(self, event: BaseEvent) -> list[BaseChunk]:
        """The chunks ``event`` adds (none for an event the SDK has no part for)."""
        out: list[BaseChunk] = []
        kind = event.type
        e: Any = event  # each branch reads the fields of its own event type
        if self._pending is not None:
            pending, self._pending = self._pending, None
            if kind == EventType.REASONING_ENCRYPTED_VALUE and e.entity_id == pending.message_id:
                self._result(out, pending, result_outcome(e.encrypted_value))
                return out
            self._result(out, pending, None)
        if kind == EventType.TEXT_MESSAGE_CONTENT:  # the hot path: one delta
            message_id = e.message_id
            if not self._texts.get(message_id):
                self._content(out, message_id)
                out.append(TextStartChunk(id=message_id))
                self._texts[message_id] = True
                self._sent.add(message_id)
            out.append(TextDeltaChunk(id=message_id, delta=e.delta))
        elif kind == EventType.RUN_STARTED:
            self.run_id = e.run_id
            if self.message_id is not None:
                self._start(out, None)
        elif kind == EventType.TEXT_MESSAGE_START:
            self._start(out, e.message_id)
            self._texts.setdefault(e.message_id, False)
        elif kind == EventType.TEXT_MESSAGE_END:
            if self._texts.pop(e.message_id, False):
                out.append(TextEndChunk(id=e.message_id))
        elif kind in (EventType.REASONING_START, EventType.REASONING_MESSAGE_START):
            self._start(out, e.message_id)
            if kind == EventType.REASONING_MESSAGE_START:
                self._reasonings.setdefault(e.message_id, False)
        elif kind == EventType.REASONING_MESSAGE_CONTENT:
            message_id = e.message_id
            if not self._reasonings.get(message_id):
                self._content(out, message_id)
                out.append(ReasoningStartChunk(id=message_id))
                self._reasonings[message_id] = True
                self._sent.add(message_id)
            out.append(ReasoningDeltaChunk(id=message_id, delta=e.delta))
        elif kind == EventType.REASONING_MESSAGE_END:
            if self._reasonings.pop(e.message_id, False):
                out.append(ReasoningEndChunk(id=e.message_id))
        elif kind == EventType.TOOL_CALL_START:
            self._tool_start(out, e)
        elif kind == EventType.TOOL_CALL_ARGS:
            call = self._calls.get(e.tool_call_id)
            if call is not None and not call.input_sent:
                call.arguments.append(e.delta)
                out.append(
                    ToolInputDeltaChunk(
                        tool_call_id=e.tool_call_id,
                        input_text_delta=e.delta,
                    )
                )
        elif kind == EventType.TOOL_CALL_END:
            call_id = e.tool_call_id
            call = self._calls.get(call_id)
            if call is not None and not call.input_sent:
                call.input_sent = True
                out.append(
                    ToolInputAvailableChunk(
                        tool_call_id=call_id,
                        tool_name=call.name,
                        input=tool_input("".join(call.arguments)),
                        provider_executed=self._executed(call.name),
                    )
                )
        elif kind == EventType.TOOL_CALL_RESULT:
            self._pending = event
        elif kind == EventType.MESSAGES_SNAPSHOT:
            messages = [
                m if isinstance(m, dict) else m.model_dump(mode="json", by_alias=True)
                for m in e.messages
            ]
            out.extend(self.replay(last_answer(messages)))
        elif kind == EventType.RUN_FINISHED:
            self._finished(out, e)
        elif kind == EventType.RUN_ERROR:
            self._failed(out, e)
        return out

    def flush(self) -> list[BaseChunk]:
        """The chunks held back (a tool result waiting to learn its outcome), sent now."""
        out: list[BaseChunk] = []
        if self._pending is not None:
            pending, self._pending = self._pending, None
            self._result(out, pending, None)
        return out

    # -- a stored answer ---------------------------------------------------------------------

    def replay(self, group: Sequence[dict[str, Any]]) -> list[BaseChunk]:
        """The chunks that build the parts of a stored answer (its messages, ``group``) this
        stream has not sent yet."""
        out: list[BaseChunk] = []
        if not group:
            return out
        self._start(out, str(group[0].get("id")))
        step = False
        for item in answer_items(group, server_tools=self._server_tools):
            if isinstance(item, StepItem):
                step = True
                continue
            if isinstance(item, TextItem | ReasoningItem):
                if item.id in self._sent:
                    step = False  # its step went out with it
                    continue
                if step:
                    self._new_step(out)
                    step = False
                self._sent.add(item.id)
                if isinstance(item, TextItem):
                    out += [
                        TextStartChunk(id=item.id),
                        TextDeltaChunk(id=item.id, delta=item.text),
                        TextEndChunk(id=item.id),
                    ]
                else:
                    out += [
                        ReasoningStartChunk(id=item.id),
                        ReasoningDeltaChunk(id=item.id, delta=item.text),
                        ReasoningEndChunk(id=item.id),
                    ]
                self._after_results = False
                continue
            call = self._calls.get(item.call_id)
            if call is None or not call.input_sent:
                if step:
                    self._new_step(out)
                    step = False
                call = call or _Call(name=item.name)
                self._calls[item.call_id] = call
                call.input_sent = True
                out.append(
                    ToolInputAvailableChunk(
                        tool_call_id=item.call_id,
                        tool_name=item.name,
                        input=item.input,
                        provider_executed=True if item.provider_executed else None,
                    )
                )
                self._waiting.add(item.call_id)
            step = False
            self._replay_state(out, item, call)
        return out

    def _replay_state(self, out: list[BaseChunk], item: ToolItem, call: _Call) -> None:
        executed = True if item.provider_executed else None
        if item.state in ("output-available", "output-error", "output-denied"):
            self._waiting.discard(item.call_id)
            self._after_results = True
            if call.output_sent:
                return
            call.output_sent = True
            if item.state == "output-available":
                out.append(
                    ToolOutputAvailableChunk(
                        tool_call_id=item.call_id, output=item.output, provider_executed=executed
                    )
                )
            elif item.state == "output-error":
                out.append(
                    ToolOutputErrorChunk(
                        tool_call_id=item.call_id,
                        error_text=item.error_text or "",
                        provider_executed=executed,
                    )
                )
            else:
                out.append(ToolOutputDeniedChunk(tool_call_id=item.call_id))
        elif item.approval_id is not None and not call.approval_sent:
            call.approval_sent = True
            out.append(
                ToolApprovalRequestChunk(approval_id=item.approval_id, tool_call_id=item.call_id)
            )

    # -- helpers -----------------------------------------------------------------------------

    def _start(self, out: list[BaseChunk], message_id: str | None) -> None:
        """``start``, once: with ``message_id`` unless the answer's id is known already."""
        if self.started:
            return
        self.started = True
        if self.message_id is None:
            self.message_id = message_id
        metadata = None if self.run_id is None else {"runId": self.run_id}
        out.append(StartChunk(message_id=self.message_id, message_metadata=metadata))

    def _new_step(self, out: list[BaseChunk]) -> None:
        if self._step_open:
            out.append(FinishStepChunk())
        out.append(StartStepChunk())
        self._step_open = True
        self._after_results = False
        self._waiting.clear()

    def _content(self, out: list[BaseChunk], message_id: str) -> None:
        """Before a new part: ``start`` if not sent, and a new step when the model answers
        after tool results (or nothing opened one yet)."""
        self._start(out, message_id)
        if not self._step_open or self._after_results:
            self._new_step(out)

    def _executed(self, name: str) -> bool | None:
        return True if name in self._server_tools else None

    def _tool_start(self, out: list[BaseChunk], event: Any) -> None:
        call_id = event.tool_call_id
        if call_id in self._calls:
            return  # sent again by a reattach: the SDK has the part
        self._content(out, event.parent_message_id or call_id)
        name = event.tool_call_name
        self._calls[call_id] = _Call(name=name)
        self._waiting.add(call_id)
        out.append(
            ToolInputStartChunk(
                tool_call_id=call_id, tool_name=name, provider_executed=self._executed(name)
            )
        )

    def _result(self, out: list[BaseChunk], event: Any, outcome: str | None) -> None:
        call_id = event.tool_call_id
        call = self._calls.setdefault(call_id, _Call(name="", input_sent=True))
        self._waiting.discard(call_id)
        self._after_results = True
        if call.output_sent:
            return
        call.output_sent = True
        self._start(out, None)
        content = event.content if isinstance(event.content, str) else str(event.content)
        if outcome == _DENIED:
            out.append(ToolOutputDeniedChunk(tool_call_id=call_id))
        elif outcome is not None:
            out.append(
                ToolOutputErrorChunk(
                    tool_call_id=call_id, error_text=content, provider_executed=True
                )
            )
        else:
            out.append(
                ToolOutputAvailableChunk(
                    tool_call_id=call_id, output=tool_output(content), provider_executed=True
                )
            )

    def _close(self, out: list[BaseChunk]) -> None:
        """End every open text and reasoning part, and the step."""
        out.extend(TextEndChunk(id=i) for i, started in self._texts.items() if started)
        out.extend(ReasoningEndChunk(id=i) for i, started in self._reasonings.items() if started)
        self._texts.clear()
        self._reasonings.clear()

    def _metadata(self, status: str, **more: Any) -> dict[str, Any]:
        metadata: dict[str, Any] = {} if self.run_id is None else {"runId": self.run_id}
        metadata["status"] = status
        metadata.update({key: value for key, value in more.items() if value})
        return metadata

    def _finished(self, out: list[BaseChunk], event: Any) -> None:
        self.run_id = self.run_id or event.run_id
        self._close(out)
        self._start(out, None)
        outcome = event.outcome
        kind = getattr(outcome, "type", None)
        for interrupt in getattr(outcome, "interrupts", None) or ():
            call_id = interrupt.tool_call_id
            call = self._calls.get(call_id) if call_id else None
            if call_id and not (call is not None and call.approval_sent):
                if call is not None:
                    call.approval_sent = True
                out.append(ToolApprovalRequestChunk(approval_id=interrupt.id, tool_call_id=call_id))
        if self._step_open:
            out.append(FinishStepChunk())
            self._step_open = False
        usage = [
            u
            if isinstance(u, dict)
            else u.model_dump(mode="json", by_alias=True, exclude_none=True)
            for u in event.usage or ()
        ]
        reason: FinishReason
        if kind == "cancelled":
            out.append(AbortChunk(reason=STOPPED))
            reason, status = None, "interrupted"
        else:
            waiting = kind == "interrupt" or bool(self._waiting)
            reason, status = ("tool-calls" if waiting else "stop"), "complete"
        out.append(
            FinishChunk(finish_reason=reason, message_metadata=self._metadata(status, usage=usage))
        )
        self.done = True

    def _failed(self, out: list[BaseChunk], event: Any) -> None:
        self._close(out)
        self._start(out, None)
        if self._step_open:
            out.append(FinishStepChunk())
            self._step_open = False
        out.append(ErrorChunk(error_text=event.message))
        metadata = self._metadata("errored", errorCode=event.code)
        out.append(FinishChunk(finish_reason="error", message_metadata=metadata))
        self.done = True


def _frames(chunks: list[BaseChunk]) -> str:
    return "".join(f"data: {chunk.encode(SDK_VERSION)}\n\n" for chunk in chunks)


async def ui_message_frames(
    batches: EventStream,
    encoder: UIMessageStreamEncoder,
    *,
    replayed: Sequence[dict[str, Any]] = (),
) -> AsyncIterator[str]:
    """The run's ``batches`` as UI message stream frames (a batch as one string: one write),
    after the chunks that replay ``replayed`` (stored messages of the answer the run goes on
    with); an idle mark as an SSE comment; ``[DONE]`` after the run's ``finish``.

    A stream that ends without the run's end (its worker handed it over) ends without
    ``finish``: a client reconnects (``GET <prefix>/<id>/stream``) to follow it on.
    """
    try:
        if replayed:
            yield _frames(encoder.replay(replayed))
        async for batch in batches:
            if batch is None:
                held = encoder.flush()
                yield _frames(held) if held else SSE_HEARTBEAT
                continue
            chunks: list[BaseChunk] = []
            for _seq, event in batch:
                chunks += encoder.feed(event)
            frames = _frames(chunks)
            if encoder.done:
                yield frames + DONE
                return
            if frames:
                yield frames
        held = encoder.flush()
        if held:
            yield _frames(held)
    finally:
        await aclose(batches)


def ui_message_response(
    stream: RunStream,
    encoder: UIMessageStreamEncoder,
    *,
    heartbeat_seconds: float | None,
    coalesce_seconds: float,
    replayed: Sequence[dict[str, Any]] = (),
) -> StreamingHttpResponse:
    """A run's events as a UI message stream response (``text/event-stream`` with the
    ``x-vercel-ai-ui-message-stream: v1`` header, unbuffered and uncompressed as every SSE
    response of the package), kept alive and coalesced as AG-UI's streams are."""
    frames = ui_message_frames(stream.batches, encoder, replayed=replayed)
    if not stream.paced and (heartbeat_seconds or coalesce_seconds):
        frames = with_heartbeat(frames, heartbeat_seconds, coalesce=coalesce_seconds)
    response = sse_response(frames)
    name, version = UI_MESSAGE_STREAM_HEADER
    response[name] = version
    return response
