"""Stored chat history → the concrete ag-ui 1.0 message classes, in live order.

``translate_messages`` is what the inner agent sees as ``RunAgentInput.messages``. It builds
``UserMessage``, ``AssistantMessage`` (with ``ToolCall`` / ``FunctionCall``), ``ToolMessage``,
``ReasoningMessage``, ``ActivityMessage``, ``SystemMessage`` and ``DeveloperMessage``, the
classes pydantic-ai's AG-UI adapter dispatches on, so nothing is silently skipped.

Rules:

- Order: stored sequence order; within an agent message, its reasoning steps first, then the
  message, then one tool result per tool call (live order).
- Ids are exactly the stored ones: the message's ``agui_id``, the tool call's id, the result's
  ``result_message_id`` (the id AG-UI clients echo back); a uuid only when none was stored.
- Content parts (multimodal user content, list tool results) and encrypted values replay as
  stored.
- A tool call with no recorded result replays as a ``ToolMessage`` whose ``content`` and
  ``error`` say that no result was recorded (never a fabricated success), so a provider never
  sees a dangling call and the model knows the call did not complete. The exception: a call
  named by an interrupt of the thread's latest run outcome (an approval the next run resumes)
  is left without a result, so the resumed agent can still execute or deny it.
- Assistant messages with neither text nor tool calls, and reasoning steps with neither text
  nor an encrypted value, carry nothing a model can use and are left out.
- Bookkeeping (uuid, status, error, run id, and on a run's last message its stored
  ``run_outcome``: outcome type, interrupts, pending tool calls, usage) goes in
  ``metadata["django_pydantic_agent"]``; pydantic-ai ignores it, other consumers can read it.
- A user message's attachment refs (the ``attachments`` list it was posted with, top level or
  in ``metadata``, kept in its ``wire_extra``) replay where they were, so the agent is told
  about the files on every run (see ``agui.attachment_fence``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ag_ui.core import (
    ActivityMessage,
    AssistantMessage,
    ContentPart,
    DeveloperMessage,
    FunctionCall,
    ReasoningMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from ag_ui.core import Message as AGUIMessage
from ag_ui.core import ToolCall as AGUIToolCall
from pydantic import TypeAdapter, ValidationError

from django_pydantic_agent.chat_history.records import Message, Reasoning, ToolCall

__all__ = [
    "BOOKKEEPING_KEY",
    "NO_RESULT_TEXT",
    "replayed_ids",
    "tool_call_agui_id",
    "tool_result_id",
    "translate_messages",
]

logger = logging.getLogger("django_pydantic_agent.chat_history")

BOOKKEEPING_KEY: Final[str] = "django_pydantic_agent"
"""The ``metadata`` key holding a replayed message's stored bookkeeping."""

NO_RESULT_TEXT: Final[str] = (
    "No result was recorded for this tool call: the run ended ({status}) before the tool returned."
)
"""Content and error of the tool message replayed for a call that never got a result."""

_PARTS: TypeAdapter[list[ContentPart]] = TypeAdapter(list[ContentPart])


def tool_call_agui_id(call: ToolCall) -> str:
    """The AG-UI id of a stored tool call (its uuid when none was stored)."""
    return call.tool_call_id or call.agui_id or str(call.uuid)


def tool_result_id(call: ToolCall) -> str:
    """The id of the tool message a stored call replays as."""
    return call.result_message_id or tool_call_agui_id(call)


def _message_id(message: Message) -> str:
    return message.agui_id or str(message.message_uuid)


def _reasoning_id(step: Reasoning) -> str:
    return step.agui_id or str(step.uuid)


def _bookkeeping(record: Message | ToolCall | Reasoning, uuid: str) -> dict[str, Any]:
    data: dict[str, Any] = {"uuid": uuid, "status": record.status}
    if record.error is not None:
        data["error"] = record.error
    if record.run_id is not None:
        data["run_id"] = record.run_id
    outcome = getattr(record, "run_outcome", None)
    if outcome:
        data["run_outcome"] = outcome
    return {BOOKKEEPING_KEY: data}


def _parts(raw: list[dict[str, Any]] | None, owner: str) -> list[ContentPart] | None:
    if not raw:
        return None
    try:
        return _PARTS.validate_python(raw)
    except ValidationError:
        logger.warning(
            "The stored content parts of %s do not validate as AG-UI content parts; its "
            "flattened text is replayed instead.",
            owner,
        )
        return None


def _ordered(messages: Sequence[Message]) -> list[Message]:
    if all(m.sequence_id >= 0 for m in messages):
        return sorted(messages, key=lambda m: m.sequence_id)
    return list(messages)


def _tool_result(call: ToolCall) -> ToolMessage:
    meta = _bookkeeping(call, str(call.uuid))
    if call.answered:
        content: str | list[ContentPart] = (
            _parts(call.content_parts, f"tool call {tool_call_agui_id(call)!r}") or call.content
        )
        return ToolMessage(
            id=tool_result_id(call),
            tool_call_id=tool_call_agui_id(call),
            content=content,
            encrypted_value=call.result_encrypted_value,
            metadata=meta,
        )
    text = NO_RESULT_TEXT.format(status=call.status)
    return ToolMessage(
        id=tool_result_id(call),
        tool_call_id=tool_call_agui_id(call),
        content=text,
        error=call.error or text,
        metadata=meta,
    )


def _awaiting(messages: Sequence[Message]) -> set[str]:
    """Tool-call ids held by the interrupts of the latest run outcome."""
    for message in reversed(messages):
        outcome = message.run_outcome
        if outcome:
            if outcome.get("type") != "interrupt":
                return set()
            return {
                str(i["toolCallId"]) for i in outcome.get("interrupts") or [] if i.get("toolCallId")
            }
    return set()


def _agent_messages(message: Message, awaiting: set[str]) -> Iterable[AGUIMessage]:
    for step in message.reasonings:
        if step.content or step.encrypted_value:
            yield ReasoningMessage(
                id=_reasoning_id(step),
                content=step.content,
                encrypted_value=step.encrypted_value,
                metadata=_bookkeeping(step, str(step.uuid)),
            )
    calls = [
        AGUIToolCall(
            id=tool_call_agui_id(call),
            function=FunctionCall(name=call.name, arguments=call.arguments),
            encrypted_value=call.encrypted_value,
        )
        for call in message.tool_calls
    ]
    if message.content or calls:
        yield AssistantMessage(
            id=_message_id(message),
            content=message.content or None,
            tool_calls=calls or None,
            name=message.name or None,
            encrypted_value=message.encrypted_value,
            metadata=_bookkeeping(message, str(message.message_uuid)),
        )
    for call in message.tool_calls:
        if call.answered or tool_call_agui_id(call) not in awaiting:
            yield _tool_result(call)


def _one(message: Message, awaiting: set[str]) -> Iterable[AGUIMessage]:
    meta = _bookkeeping(message, str(message.message_uuid))
    role = message.role
    if role == "user":
        parts = _parts(message.content_parts, f"message {_message_id(message)!r}")
        extra = message.wire_extra or {}
        posted_meta = extra.get("metadata")
        if isinstance(posted_meta, dict) and isinstance(posted_meta.get("attachments"), list):
            meta["attachments"] = posted_meta["attachments"]
        refs = extra.get("attachments")
        yield UserMessage(
            id=_message_id(message),
            content=parts or message.content,
            name=message.name or None,
            encrypted_value=message.encrypted_value,
            metadata=meta,
            **({"attachments": refs} if isinstance(refs, list) else {}),
        )
    elif role == "system":
        yield SystemMessage(id=_message_id(message), content=message.content, metadata=meta)
    elif role == "developer":
        yield DeveloperMessage(id=_message_id(message), content=message.content, metadata=meta)
    elif role == "activity":
        yield ActivityMessage(
            id=_message_id(message),
            activity_type=message.activity_type or "",
            content=message.activity_content or {},
            metadata=meta,
        )
    else:
        yield from _agent_messages(message, awaiting)


def translate_messages(messages: Sequence[Message]) -> list[AGUIMessage]:
    """Return the AG-UI history for stored ``messages`` (see the module docstring)."""
    ordered = _ordered(messages)
    awaiting = _awaiting(ordered)
    result: list[AGUIMessage] = []
    for message in ordered:
        result.extend(_one(message, awaiting))
    return result


def replayed_ids(messages: Sequence[Message]) -> set[str]:
    """Every id a client may echo back for ``messages``: stored ids and replayed ones.

    Every id ``translate_messages`` gives a message is one of these (``_message_id``,
    ``_reasoning_id``, ``tool_result_id``), so nothing is translated here: the run path
    checks the inbound list against the history it read without building it twice.
    """
    ids: set[str] = set()
    for message in messages:
        ids.update(filter(None, (message.agui_id, str(message.message_uuid))))
        for call in message.tool_calls:
            ids.update(filter(None, (call.agui_id, call.tool_call_id, call.result_message_id)))
            ids.add(tool_result_id(call))
        for step in message.reasonings:
            ids.update(filter(None, (step.agui_id, str(step.uuid))))
    return ids
