"""Chat-history records as AG-UI messages: the one conversion, for clients and for the model.

``records_to_wire`` turns records into the AG-UI wire messages a ``ConversationStore`` keeps
and clients get (camelCase JSON, no nulls, ids as streamed; ``persistence.wire`` reads them
back); ``chat_history.translate`` builds what the model is sent from the same messages. A
record becomes, in live order, its reasoning steps (``reasoning_message``), the message itself
(``record_message``) and one ``role: "tool"`` message per tool call that has a result
(``result_message``), with the ids ``message_id``, ``reasoning_id``, ``tool_call_id`` and
``result_id`` give.

Bookkeeping travels in extra keys that AG-UI clients ignore, spelled here once (``STATUS``,
``RUN_ID``, ``ERROR``; in ``chatHistory``: ``UUID``, ``RUN_OUTCOME`` and the rest; the table
is in ``docs/stores.md``). Every other key of a message is the record's ``wire_extra``;
``chatBranches`` / ``chatRootBranches`` (``persistence.message_tree``) never are. A record's
stored messages are written back verbatim while its ``record_fingerprint`` is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from django_pydantic_agent.chat_history.records import Message, Reasoning, Role, ToolCall

__all__ = [
    "BOOKKEEPING_KEY",
    "BRANCHES_KEY",
    "ERROR",
    "MANAGED_KEYS",
    "ROOT_BRANCHES_KEY",
    "RUN_ID",
    "RUN_OUTCOME",
    "STATUS",
    "UUID",
    "message_id",
    "reasoning_id",
    "reasoning_message",
    "record_fingerprint",
    "record_message",
    "records_to_wire",
    "result_id",
    "result_message",
    "tool_call_id",
]

BOOKKEEPING_KEY: Final[str] = "chatHistory"
"""The extra key of a stored wire message holding its record bookkeeping."""
STATUS, RUN_ID, ERROR = "status", "runId", "error"
UUID, RUN_OUTCOME = "uuid", "runOutcome"  # in chatHistory

BRANCHES_KEY: Final[str] = "chatBranches"
"""The key of a stored main message holding its children's other branches
(``persistence.message_tree``)."""

ROOT_BRANCHES_KEY: Final[str] = "chatRootBranches"
"""The key of a thread's first stored main message holding the other first branches."""

MANAGED_KEYS: Final[frozenset[str]] = frozenset(
    {
        "id",
        "role",
        "content",
        "name",
        "toolCalls",
        "toolCallId",
        "encryptedValue",
        "activityType",
        STATUS,
        RUN_ID,
        ERROR,
        BOOKKEEPING_KEY,
        BRANCHES_KEY,
        ROOT_BRANCHES_KEY,
    }
)
"""The keys ``records_to_wire`` writes; any other key of a message is the caller's."""

_NO_ID = ""  # a bookkeeping id of "" means the record field is None
_PLAIN_ROLES: Final[frozenset[str]] = frozenset(
    {"activity", Role.USER.value, Role.SYSTEM.value, Role.DEVELOPER.value}
)
"""Roles whose record is one message (no reasoning steps, tool calls or results)."""


def message_id(message: Message) -> str:
    """The AG-UI id of a record's message."""
    return message.agui_id or str(message.message_uuid)


def reasoning_id(step: Reasoning) -> str:
    """The AG-UI id of a reasoning step's message."""
    return step.agui_id or str(step.uuid)


def tool_call_id(call: ToolCall) -> str:
    """The AG-UI id of a tool call."""
    return call.tool_call_id or call.agui_id or str(call.uuid)


def result_id(call: ToolCall) -> str:
    """The AG-UI id of the tool message holding a call's result."""
    return call.result_message_id or tool_call_id(call)


def _put_id(book: dict[str, Any], key: str, value: str | None, wire_id: str) -> None:
    if value != wire_id:
        book[key] = value if value is not None else _NO_ID


_VOLATILE: Final[dict[str, Any]] = {
    "message_uuid": True,
    "chat_uuid": True,
    "v": True,
    "emitter_type": True,
    "emitter_id": True,
    "wire": True,
    "wire_fingerprint": True,
    "tool_calls": {"__all__": {"uuid"}},
    "reasonings": {"__all__": {"uuid"}},
}


def record_fingerprint(message: Message) -> str:
    """A digest of what ``message`` holds, ignoring its uuids and where it is stored.

    Equal for a record and its copy written to any backend and read back, so it tells whether
    a run changed the record since it was read.
    """
    dumped = message.model_dump(mode="json", exclude=_VOLATILE)
    raw = json.dumps(dumped, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def _common(record: Message | ToolCall | Reasoning) -> dict[str, Any]:
    data: dict[str, Any] = {STATUS: record.status}
    if record.run_id is not None:
        data[RUN_ID] = record.run_id
    return data


def _closed(
    wire: dict[str, Any], record: Message | Reasoning, book: dict[str, Any]
) -> dict[str, Any]:
    """``wire`` with the record's encrypted value, status, run id, error and ``book``."""
    if record.encrypted_value is not None:
        wire["encryptedValue"] = record.encrypted_value
    wire.update(_common(record))
    if record.error is not None:
        wire[ERROR] = record.error
    wire[BOOKKEEPING_KEY] = book
    return wire


def reasoning_message(step: Reasoning) -> dict[str, Any]:
    """The ``role: "reasoning"`` wire message of a reasoning step."""
    wire_id = reasoning_id(step)
    book: dict[str, Any] = {
        UUID: str(step.uuid),
        "inProgress": step.in_progress,
        "createdAt": step.created_at.isoformat(),
    }
    _put_id(book, "aguiId", step.agui_id, wire_id)
    if step.name:
        book["name"] = step.name
    if step.role != Role.REASONING.value:
        book["role"] = step.role
    return _closed({"id": wire_id, "role": "reasoning", "content": step.content}, step, book)


def _call_entry(call: ToolCall, full: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    wire_id = tool_call_id(call)
    entry: dict[str, Any] = {
        "id": wire_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if call.encrypted_value is not None:
        entry["encryptedValue"] = call.encrypted_value
    if not full:
        return entry, {}
    book: dict[str, Any] = {
        UUID: str(call.uuid),
        "inProgress": call.in_progress,
        "createdAt": call.created_at.isoformat(),
        "hasResult": call.has_result,
        **_common(call),
    }
    _put_id(book, "aguiId", call.agui_id, wire_id)
    _put_id(book, "toolCallId", call.tool_call_id, wire_id)
    if call.error is not None:
        book[ERROR] = call.error
    if call.role != Role.TOOL.value:
        book["role"] = call.role
    return entry, book


def _has_result(call: ToolCall) -> bool:
    return call.answered or bool(call.content_parts)


def result_message(call: ToolCall) -> dict[str, Any]:
    """The ``role: "tool"`` wire message of a tool call's result."""
    call_id = tool_call_id(call)
    wire_id = result_id(call)
    book: dict[str, Any] = {UUID: str(call.uuid)}
    _put_id(book, "resultMessageId", call.result_message_id, wire_id)
    wire: dict[str, Any] = {"id": wire_id, "role": "tool", "toolCallId": call_id}
    if call.content_parts:
        wire["content"] = call.content_parts
        book["text"] = call.content
    else:
        wire["content"] = call.content
    if call.error is not None:
        wire[ERROR] = call.error
    if call.result_encrypted_value is not None:
        wire["encryptedValue"] = call.result_encrypted_value
    wire.update(_common(call))
    wire[BOOKKEEPING_KEY] = book
    return wire


def record_message(
    message: Message, extra: Mapping[str, Any] | None = None, *, full: bool = True
) -> dict[str, Any]:
    """The wire message of a record itself (its tool calls included, its reasoning steps and
    results not), with the record's ``wire_extra`` and ``extra``'s unmanaged keys first.
    ``full=False`` leaves out of ``chatHistory`` all but ``uuid``, ``runOutcome`` and
    ``text``, which is what the model's copy reads (``translate``: a fifth of its time)."""
    wire_id = message_id(message)
    kept = {**(message.wire_extra or {}), **(extra or {})}
    anchor: dict[str, Any] = {k: v for k, v in kept.items() if k not in MANAGED_KEYS}
    anchor.update(id=wire_id, role=message.role)
    book: dict[str, Any] = {UUID: str(message.message_uuid)}
    if full:
        book.update(inProgress=message.in_progress, timestamp=message.timestamp.isoformat())
        _put_id(book, "aguiId", message.agui_id, wire_id)
    if full and message.step is not None:
        book["step"] = message.step
    if message.run_outcome:
        book[RUN_OUTCOME] = message.run_outcome
    if message.content_parts:
        book["text"] = message.content
    if message.role == "activity":
        anchor["activityType"] = message.activity_type or ""
        anchor["content"] = message.activity_content or {}
    elif message.role in _PLAIN_ROLES:
        anchor["content"] = message.content_parts or message.content
    else:
        if message.content:
            anchor["content"] = message.content
        entries = [_call_entry(call, full) for call in message.tool_calls]
        if entries:
            anchor["toolCalls"] = [entry for entry, _ in entries]
        if entries and full:
            book["toolCalls"] = [call_book for _, call_book in entries]
        if message.content_parts:
            anchor["content"] = message.content_parts
    if message.name:
        anchor["name"] = message.name
    return _closed(anchor, message, book)


def records_to_wire(
    messages: Sequence[Message],
    extras: Mapping[uuid.UUID, Mapping[str, Any]] | None = None,
    originals: Mapping[uuid.UUID, tuple[str, Sequence[Mapping[str, Any]]]] | None = None,
) -> list[dict[str, Any]]:
    """Return the wire messages of ``messages`` (in their order), JSON-ready.

    ``extras`` maps a record's uuid to keys of its stored message that this module does not
    manage (``attachments``, ``metadata``...); they are written back unchanged. ``originals``
    maps a record's uuid to ``(fingerprint, stored messages)`` as ``wire_to_records`` read
    them: while ``record_fingerprint`` of the record still matches, those are written instead.
    """
    extras = extras or {}
    originals = originals or {}
    wire: list[dict[str, Any]] = []
    for message in messages:
        original = originals.get(message.message_uuid)
        if original is not None and original[0] == record_fingerprint(message):
            wire.extend(dict(item) for item in original[1])
        elif message.role in _PLAIN_ROLES:
            wire.append(record_message(message, extras.get(message.message_uuid)))
        else:
            wire.extend(reasoning_message(step) for step in message.reasonings)
            wire.append(record_message(message, extras.get(message.message_uuid)))
            wire.extend(result_message(call) for call in message.tool_calls if _has_result(call))
    return wire
