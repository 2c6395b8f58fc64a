"""What a run streamed, folded into the AG-UI messages a client holds after reading it.

``Transcript`` consumes AG-UI events in stream order and produces AG-UI **wire** messages
(camelCase dicts, no nulls, ids exactly as the stream announced them), so the run endpoint can
save what the user saw even when the run never completes (client disconnect, ``RUN_ERROR``).
It is pure: no I/O, no clock, no task; folding never raises, whatever the event sequence.

The folding rules (also in ``docs/agui.md``):

- ``TEXT_MESSAGE_START``/``CONTENT``/``END`` (and ``TEXT_MESSAGE_CHUNK``) build a text message
  with the streamed id and role (assistant unless stated). A message that is never ended keeps
  the text received so far. A message with no text and no kept tool call is left out: that is
  the empty ``START``/``END`` pair pydantic-ai announces before a tool call, until a call is
  attached to it.
- ``TOOL_CALL_START``/``ARGS``/``END`` (and ``TOOL_CALL_CHUNK``) add a tool call, with its
  streamed id, name and arguments, to the assistant message named by ``parentMessageId`` (or,
  without one, to an assistant message whose id is the tool call id, as AG-UI clients do). A
  call is kept only once it ended and its arguments are valid JSON (no arguments at all are
  saved as ``"{}"``): arguments cut off mid-stream may not parse. A chunked call ends when any
  other event follows it.
- ``TOOL_CALL_RESULT`` becomes a tool message (``id``, ``toolCallId``, ``content``). A result
  for a call that this stream started and that was dropped is dropped with it; a result for a
  call from an earlier run (a resumed deferred call) is kept.
- ``REASONING_MESSAGE_START``/``CONTENT``/``END`` (and ``REASONING_MESSAGE_CHUNK``) build a
  reasoning message, left out when empty, and always left out with ``include_reasoning=False``.
- ``REASONING_ENCRYPTED_VALUE`` sets ``encryptedValue`` on the tool call (``tool-call``) or
  the message (``message``) it names, as the AG-UI client reducer does.
- Every other event (run lifecycle, steps, state, activity, custom, raw, snapshots) and every
  event naming an id of the wrong kind is ignored.

Messages come out in the order they were first announced.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    DeveloperMessage,
    FunctionCall,
    Message,
    ReasoningEncryptedValueEvent,
    ReasoningMessage,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageStartEvent,
    SystemMessage,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

__all__ = ["Transcript", "wire_message"]

_ASSISTANT = "assistant"
_REASONING = "reasoning"
_TOOL = "tool"
_TEXT_ROLES = frozenset({_ASSISTANT, "user", "system", "developer"})
_OTHER_TEXT_ROLES: dict[str, type[UserMessage | SystemMessage | DeveloperMessage]] = {
    "user": UserMessage,
    "system": SystemMessage,
    "developer": DeveloperMessage,
}


def wire_message(message: Message) -> dict[str, Any]:
    """An AG-UI message in stored wire shape: camelCase, no nulls, extra fields kept."""
    dumped: dict[str, Any] = message.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


@dataclass
class _Call:
    id: str
    name: str
    parent_id: str
    args: list[str] = field(default_factory=list)
    ended: bool = False
    encrypted_value: str | None = None

    def arguments(self) -> str | None:
        """The streamed arguments, or ``None`` while they are unfinished or not JSON."""
        if not self.ended:
            return None
        arguments = "".join(self.args) or "{}"
        try:
            json.loads(arguments)
        except ValueError:
            return None
        return arguments


@dataclass
class _Entry:
    id: str
    role: str
    name: str | None = None
    text: list[str] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    tool_call_id: str = ""
    tool_content: Any = None
    encrypted_value: str | None = None


class Transcript:
    """Fold AG-UI events into the wire messages they announce (see the module docstring).

    Call ``fold(event)`` for each event in stream order, then ``messages()`` at any point for
    the messages so far. ``align(messages)`` re-keys messages built elsewhere (a completed run's
    result) to the ids this stream announced. With ``include_reasoning=False`` reasoning is
    never recorded, so neither method can return it.
    """

    def __init__(self, *, include_reasoning: bool = True) -> None:
        self.include_reasoning = include_reasoning
        self._entries: list[_Entry] = []
        self._by_id: dict[str, _Entry] = {}
        self._calls: dict[str, _Call] = {}
        self._results: dict[str, str] = {}
        # The chunk sequences in progress (a chunk without an id continues these).
        self._text_chunk: str | None = None
        self._reasoning_chunk: str | None = None
        self._call_chunk: _Call | None = None

    def fold(self, event: BaseEvent) -> None:
        """Take one event into account; unknown or inconsistent events change nothing."""
        self._end_chunk_sequences(event)
        match event:
            case TextMessageStartEvent():
                self._text(event.message_id, event.role, event.name)
            case TextMessageContentEvent():
                self._append(self._text(event.message_id, None, None), event.delta)
            case TextMessageChunkEvent():
                message_id = event.message_id or self._text_chunk
                if message_id is not None:
                    self._text_chunk = message_id
                    self._append(self._text(message_id, event.role, event.name), event.delta)
            case ReasoningMessageStartEvent():
                self._reasoning(event.message_id)
            case ReasoningMessageContentEvent():
                self._append(self._reasoning(event.message_id), event.delta)
            case ReasoningMessageChunkEvent():
                message_id = event.message_id or self._reasoning_chunk
                if message_id is not None:
                    self._reasoning_chunk = message_id
                    self._append(self._reasoning(message_id), event.delta)
            case ToolCallStartEvent():
                self._start_call(event.tool_call_id, event.tool_call_name, event.parent_message_id)
            case ToolCallArgsEvent():
                call = self._calls.get(event.tool_call_id)
                if call is not None and not call.ended:
                    call.args.append(event.delta)
            case ToolCallEndEvent():
                if (call := self._calls.get(event.tool_call_id)) is not None:
                    call.ended = True
            case ToolCallChunkEvent():
                self._call_chunk_event(event)
            case ToolCallResultEvent():
                self._result(event)
            case ReasoningEncryptedValueEvent():
                self._encrypted_value(event)
            case _:
                pass

    def messages(self) -> list[dict[str, Any]]:
        """The messages folded so far, as AG-UI wire dicts, in the order first announced."""
        dumped = (self._dump(entry) for entry in self._entries)
        return [wire_message(message) for message in dumped if message is not None]

    def align(self, messages: Iterable[Message]) -> list[dict[str, Any]]:
        """``messages`` as wire dicts, re-keyed to the ids this stream announced.

        For a completed run's new messages (``AGUIAdapter.dump_messages``), which carry freshly
        minted ids. Tool messages and assistant messages with tool calls match exactly by tool
        call id; text-only assistant messages and reasoning messages take the remaining streamed
        ids in order. A message the stream never announced keeps its id. Without
        ``include_reasoning``, reasoning messages are left out.
        """
        parent_ids = {call.parent_id for call in self._calls.values()}
        free_text_ids = self._ids(_ASSISTANT, exclude=parent_ids)
        reasoning_ids = self._ids(_REASONING, exclude=set())
        aligned: list[dict[str, Any]] = []
        for message in messages:
            streamed: str | None = None
            if isinstance(message, ToolMessage):
                streamed = self._results.get(message.tool_call_id)
            elif isinstance(message, AssistantMessage):
                if message.tool_calls:
                    call = self._calls.get(message.tool_calls[0].id)
                    streamed = call.parent_id if call is not None else None
                else:
                    streamed = next(free_text_ids, None)
            elif isinstance(message, ReasoningMessage):
                if not self.include_reasoning:
                    continue
                streamed = next(reasoning_ids, None)
            wire = wire_message(message)
            if streamed:
                wire["id"] = streamed
            aligned.append(wire)
        return aligned

    # Folding helpers.

    def _end_chunk_sequences(self, event: BaseEvent) -> None:
        """A chunk sequence ends at any event that is not a chunk of the same kind."""
        if not isinstance(event, TextMessageChunkEvent):
            self._text_chunk = None
        if not isinstance(event, ReasoningMessageChunkEvent):
            self._reasoning_chunk = None
        current = self._call_chunk
        if current is not None and not (
            isinstance(event, ToolCallChunkEvent) and event.tool_call_id in (None, current.id)
        ):
            current.ended = True
            self._call_chunk = None

    def _entry(self, message_id: str, role: str, name: str | None = None) -> _Entry | None:
        """The message with this id, created if new; ``None`` if the id has another role."""
        entry = self._by_id.get(message_id)
        if entry is None:
            entry = _Entry(id=message_id, role=role, name=name)
            self._by_id[message_id] = entry
            self._entries.append(entry)
        return entry if entry.role == role else None

    def _text(self, message_id: str, role: str | None, name: str | None) -> _Entry | None:
        """The text message with this id; without a ``role``, whatever role it started with."""
        if role is None:
            existing = self._by_id.get(message_id)
            role = existing.role if existing is not None else _ASSISTANT
        return self._entry(message_id, role, name) if role in _TEXT_ROLES else None

    def _reasoning(self, message_id: str) -> _Entry | None:
        return self._entry(message_id, _REASONING) if self.include_reasoning else None

    @staticmethod
    def _append(entry: _Entry | None, delta: str | None) -> None:
        if entry is not None and delta:
            entry.text.append(delta)

    def _start_call(self, call_id: str, name: str, parent_id: str | None) -> _Call | None:
        if call_id in self._calls:
            return None
        parent = self._entry(parent_id or call_id, _ASSISTANT)
        if parent is None:
            return None
        call = _Call(id=call_id, name=name, parent_id=parent.id)
        self._calls[call_id] = call
        parent.calls.append(call)
        return call

    def _call_chunk_event(self, event: ToolCallChunkEvent) -> None:
        call = self._call_chunk
        if call is None:
            if event.tool_call_id is None or event.tool_call_name is None:
                return
            call = self._start_call(
                event.tool_call_id, event.tool_call_name, event.parent_message_id
            )
            if call is None:
                return
            self._call_chunk = call
        if event.delta:
            call.args.append(event.delta)

    def _result(self, event: ToolCallResultEvent) -> None:
        entry = self._entry(event.message_id, _TOOL)
        if entry is None or entry.tool_call_id:
            return
        entry.tool_call_id = event.tool_call_id
        entry.tool_content = event.content
        self._results[event.tool_call_id] = event.message_id

    def _encrypted_value(self, event: ReasoningEncryptedValueEvent) -> None:
        target: _Call | _Entry | None
        if event.subtype == "tool-call":
            target = self._calls.get(event.entity_id)
        else:
            target = self._by_id.get(event.entity_id)
        if target is not None:
            target.encrypted_value = event.encrypted_value

    # Output helpers.

    def _ids(self, role: str, *, exclude: set[str]) -> Iterator[str]:
        return iter([e.id for e in self._entries if e.role == role and e.id not in exclude])

    def _dump(self, entry: _Entry) -> Message | None:
        text = "".join(entry.text)
        if entry.role == _TOOL:
            call = self._calls.get(entry.tool_call_id)
            if call is not None and call.arguments() is None:
                return None
            return ToolMessage(
                id=entry.id,
                content=entry.tool_content,
                tool_call_id=entry.tool_call_id,
                encrypted_value=entry.encrypted_value,
            )
        if entry.role == _REASONING:
            if not text:
                return None
            return ReasoningMessage(
                id=entry.id, content=text, encrypted_value=entry.encrypted_value
            )
        if entry.role == _ASSISTANT:
            calls = [
                ToolCall(
                    id=call.id,
                    function=FunctionCall(name=call.name, arguments=arguments),
                    encrypted_value=call.encrypted_value,
                )
                for call in entry.calls
                if (arguments := call.arguments()) is not None
            ]
            if not text and not calls:
                return None
            return AssistantMessage(
                id=entry.id,
                name=entry.name,
                content=text or None,
                tool_calls=calls or None,
                encrypted_value=entry.encrypted_value,
            )
        if not text:
            return None
        return _OTHER_TEXT_ROLES[entry.role](
            id=entry.id, name=entry.name, content=text, encrypted_value=entry.encrypted_value
        )
