"""Stored chat history → the concrete ag-ui 1.0 message classes, in live order.

``translate_messages`` is what the inner agent sees as ``RunAgentInput.messages``: the
``UserMessage``, ``AssistantMessage``, ``ToolMessage``, ``ReasoningMessage``,
``ActivityMessage``, ``SystemMessage`` and ``DeveloperMessage`` classes pydantic-ai's AG-UI
adapter dispatches on, built from the messages clients get (``chat_history.agui_messages``:
live order, the stored ids, content parts and encrypted values as stored), in stored sequence
order. What only the model gets:

- A tool call with no recorded result replays as a ``ToolMessage`` whose ``content`` and
  ``error`` say that no result was recorded (never a fabricated success), so a provider never
  sees a dangling call and the model knows the call did not complete. The exception: a call
  named by an interrupt of the thread's latest run outcome (an approval the next run resumes)
  is left without a result, so the resumed agent can still execute or deny it.
- Assistant messages with neither text nor tool calls, and reasoning steps with neither text
  nor an encrypted value, carry nothing a model can use and are left out; content parts that
  do not validate replay as their flattened text.
- Bookkeeping (uuid, status, error, run id, and on a run's last message its stored
  ``run_outcome``: outcome type, interrupts, pending tool calls, usage) goes in
  ``metadata["django_pydantic_agent"]``; pydantic-ai ignores it, other consumers can read it.
  It is the wire's, renamed at one place (``_bookkeeping``: ``run_id``, ``run_outcome``, as
  this metadata always spelled them).
- A user message's attachment refs (the ``attachments`` list it was posted with, top level or
  in ``metadata``) replay where they were, so the agent is told about the files on every run
  (see ``agui.attachment_fence``).
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

from django_pydantic_agent.chat_history import agui_messages as wire
from django_pydantic_agent.chat_history.agui_messages import (
    result_id,
    tool_call_id,
)
from django_pydantic_agent.chat_history.records import Message

__all__ = [
    "BOOKKEEPING_KEY",
    "NO_RESULT_TEXT",
    "replayed_ids",
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


def _bookkeeping(message: dict[str, Any]) -> dict[str, Any]:
    """The model's copy of a wire message's bookkeeping (the one place it is renamed)."""
    book = message[wire.BOOKKEEPING_KEY]
    data: dict[str, Any] = {"uuid": book[wire.UUID], "status": message[wire.STATUS]}
    if wire.ERROR in message:
        data["error"] = message[wire.ERROR]
    if wire.RUN_ID in message:
        data["run_id"] = message[wire.RUN_ID]
    if wire.RUN_OUTCOME in book:
        data["run_outcome"] = book[wire.RUN_OUTCOME]
    return {BOOKKEEPING_KEY: data}


def _text(message: dict[str, Any]) -> str:
    """A wire message's text: its flattened text beside list content, else its content."""
    book = message[wire.BOOKKEEPING_KEY]
    return book["text"] if "text" in book else message.get("content") or ""


def _content(message: dict[str, Any], owner: str) -> str | list[ContentPart]:
    """A wire message's content for the model: its parts when they validate, else its text."""
    raw = message.get("content")
    if not isinstance(raw, list) or not raw:
        return _text(message)
    try:
        return _PARTS.validate_python(raw)
    except ValidationError:
        logger.warning(
            "The stored content parts of %s do not validate as AG-UI content parts; its "
            "flattened text is replayed instead.",
            owner,
        )
        return _text(message)


def _ordered(messages: Sequence[Message]) -> list[Message]:
    if all(m.sequence_id >= 0 for m in messages):
        return sorted(messages, key=lambda m: m.sequence_id)
    return list(messages)


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
            reasoning = wire.reasoning_message(step)
            yield ReasoningMessage(
                id=reasoning["id"],
                content=reasoning["content"],
                encrypted_value=reasoning.get("encryptedValue"),
                metadata=_bookkeeping(reasoning),
            )
    anchor = wire.record_message(message, full=False)
    calls = [
        AGUIToolCall(
            id=entry["id"],
            function=FunctionCall(**entry["function"]),
            encrypted_value=entry.get("encryptedValue"),
        )
        for entry in anchor.get("toolCalls", ())
    ]
    text = _text(anchor)
    if text or calls:
        yield AssistantMessage(
            id=anchor["id"],
            content=text or None,
            tool_calls=calls or None,
            name=anchor.get("name"),
            encrypted_value=anchor.get("encryptedValue"),
            metadata=_bookkeeping(anchor),
        )
    for call in message.tool_calls:
        if call.answered:
            result = wire.result_message(call)
            yield ToolMessage(
                id=result["id"],
                tool_call_id=result["toolCallId"],
                content=_content(result, f"tool call {result['toolCallId']!r}"),
                encrypted_value=result.get("encryptedValue"),
                metadata=_bookkeeping(result),
            )
        elif tool_call_id(call) not in awaiting:
            result = wire.result_message(call)
            text = NO_RESULT_TEXT.format(status=call.status)
            yield ToolMessage(
                id=result["id"],
                tool_call_id=result["toolCallId"],
                content=text,
                error=call.error or text,
                metadata=_bookkeeping(result),
            )


def _one(message: Message, awaiting: set[str]) -> Iterable[AGUIMessage]:
    if message.role not in ("user", "system", "developer", "activity"):
        yield from _agent_messages(message, awaiting)
        return
    anchor = wire.record_message(message, full=False)
    meta = _bookkeeping(anchor)
    role = message.role
    if role == "user":
        posted_meta = anchor.get("metadata")
        if isinstance(posted_meta, dict) and isinstance(posted_meta.get("attachments"), list):
            meta["attachments"] = posted_meta["attachments"]
        refs = anchor.get("attachments")
        yield UserMessage(
            id=anchor["id"],
            content=_content(anchor, f"message {anchor['id']!r}"),
            name=anchor.get("name"),
            encrypted_value=anchor.get("encryptedValue"),
            metadata=meta,
            **({"attachments": refs} if isinstance(refs, list) else {}),
        )
    elif role == "system":
        yield SystemMessage(id=anchor["id"], content=_text(anchor), metadata=meta)
    elif role == "developer":
        yield DeveloperMessage(id=anchor["id"], content=_text(anchor), metadata=meta)
    else:
        yield ActivityMessage(
            id=anchor["id"],
            activity_type=anchor["activityType"],
            content=anchor["content"],
            metadata=meta,
        )


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

    Every id ``translate_messages`` gives a message is one of these (``message_id``,
    ``reasoning_id``, ``result_id`` of ``chat_history.agui_messages``), so nothing is
    translated here: the run path checks the inbound list against the history it read
    without building it twice.
    """
    ids: set[str] = set()
    for message in messages:
        ids.update(filter(None, (message.agui_id, str(message.message_uuid))))
        for call in message.tool_calls:
            ids.update(filter(None, (call.agui_id, call.tool_call_id, call.result_message_id)))
            ids.add(result_id(call))
        for step in message.reasonings:
            ids.update(filter(None, (step.agui_id, str(step.uuid))))
    return ids
