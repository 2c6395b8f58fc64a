"""Chat-history records ↔ the AG-UI wire messages a ``ConversationStore`` keeps.

``records_to_wire`` turns a chat's ``Message`` records into ``Conversation.messages`` (AG-UI
wire messages: camelCase, no nulls, ids as streamed); ``wire_to_records`` reads them back.
The pair round-trips every field of the records. One record becomes, in live order, its
reasoning steps (``role: "reasoning"``), the message itself and one ``role: "tool"`` message
per tool call that has a result.

Bookkeeping travels in extra keys, which AG-UI clients ignore and the thread route returns:

- ``status``: ``complete`` / ``active`` / ``interrupted`` / ``errored``, on every message
  written from a record (on a tool message: its call's status); a message without it, as a
  client posted it, reads as ``complete``.
- ``runId``: the run that wrote the record, when known.
- ``error``: the record's error text, when set (a tool message's AG-UI ``error`` is its call's).
- ``chatHistory``: everything else, an object: ``uuid`` (the record's uuid), ``inProgress``,
  ``timestamp`` / ``createdAt``, and when set ``step``, ``runOutcome``, ``text`` (the flattened
  text beside list content), ``name`` (of a reasoning step), ``aguiId`` / ``toolCallId`` /
  ``resultMessageId`` (only when they differ from the wire id; ``""`` stands for none), and on
  an assistant message ``toolCalls``: one object per entry of the AG-UI ``toolCalls``, with
  the call's ``uuid``, ``status``, ``inProgress``, ``createdAt``, ``hasResult`` and when set
  ``runId``, ``error``, ``role``.
- ``chatBranches`` / ``chatRootBranches``: the other branches a load/save store keeps
  (``persistence.message_tree``); the adapter reads and writes them, these functions never do
  (a record's ``wire_extra`` cannot carry them).

Every other key of a message (``attachments``, ``metadata``...) is a record's ``wire_extra``:
``wire_to_records`` reads it into the record and ``records_to_wire`` writes it out again.

Messages without ``chatHistory`` (written by a client-posted save, another transport or an
older version) are read too: each becomes a complete record with a deterministic uuid, and a
tool message answers the call with its ``toolCallId``.

Nothing is rewritten that did not change: ``wire_to_records`` returns, per record, the stored
messages it was read from and a fingerprint of the record as read; ``records_to_wire`` writes
those messages back verbatim while the record's fingerprint is unchanged, and converts it
(keeping its unmanaged keys, such as ``attachments``, and those of the record's
``wire_extra``) once a run has changed it.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from django_pydantic_agent.chat_history.keys import emitter_for_role
from django_pydantic_agent.chat_history.records import (
    Message,
    MessageStatus,
    Reasoning,
    Role,
    ToolCall,
)
from django_pydantic_agent.persistence.derive import message_text

__all__ = [
    "BOOKKEEPING_KEY",
    "BRANCHES_KEY",
    "MANAGED_KEYS",
    "ROOT_BRANCHES_KEY",
    "WireRecords",
    "derived_uuid",
    "record_fingerprint",
    "records_to_wire",
    "strip_branches",
    "wire_to_records",
]

BOOKKEEPING_KEY: Final[str] = "chatHistory"
"""The extra key of a stored wire message holding its record bookkeeping."""

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
        "status",
        "runId",
        "error",
        BOOKKEEPING_KEY,
        BRANCHES_KEY,
        ROOT_BRANCHES_KEY,
    }
)
"""The keys ``records_to_wire`` writes; any other key of a message is the caller's."""

_BRANCH_KEYS: Final[frozenset[str]] = frozenset({BRANCHES_KEY, ROOT_BRANCHES_KEY})


def strip_branches(messages: Sequence[Any]) -> list[Any]:
    """``messages`` without the branch keys (copies of the messages that had them): what a
    client, a fork or an export gets of a thread that keeps its branches in its messages."""
    return [
        {k: v for k, v in m.items() if k not in _BRANCH_KEYS}
        if isinstance(m, Mapping) and not _BRANCH_KEYS.isdisjoint(m)
        else m
        for m in messages
    ]


_COMPLETE = MessageStatus.COMPLETE.value
_NO_ID = ""  # a bookkeeping id of "" means the record field is None
_WIRE_UUID_NAMESPACE: Final[uuid.UUID] = uuid.uuid5(
    uuid.NAMESPACE_URL, "django-pydantic-agent:wire-message"
)


def _iso(value: datetime) -> str:
    return value.isoformat()


_UNKNOWN_TIME: Final[datetime] = datetime(1970, 1, 1, tzinfo=UTC)
"""The time of a record whose stored message has none: fixed, so every reader agrees."""


def _when(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return _UNKNOWN_TIME
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return _UNKNOWN_TIME


def _uuid(value: Any, fallback: uuid.UUID) -> uuid.UUID:
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            return fallback
    return fallback


def _id_field(book: Mapping[str, Any], key: str, wire_id: str) -> str | None:
    """A record id stored beside ``wire_id``: absent means equal, ``""`` means ``None``."""
    if key not in book:
        return wire_id
    value = book[key]
    return value if isinstance(value, str) and value else None


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
    data: dict[str, Any] = {"status": record.status}
    if record.run_id is not None:
        data["runId"] = record.run_id
    return data


# -- records → wire ------------------------------------------------------------------------


def _reasoning_wire(step: Reasoning) -> dict[str, Any]:
    wire_id = step.agui_id or str(step.uuid)
    book: dict[str, Any] = {
        "uuid": str(step.uuid),
        "inProgress": step.in_progress,
        "createdAt": _iso(step.created_at),
    }
    _put_id(book, "aguiId", step.agui_id, wire_id)
    if step.name:
        book["name"] = step.name
    if step.role != Role.REASONING.value:
        book["role"] = step.role
    wire: dict[str, Any] = {"id": wire_id, "role": "reasoning", "content": step.content}
    if step.encrypted_value is not None:
        wire["encryptedValue"] = step.encrypted_value
    wire.update(_common(step))
    if step.error is not None:
        wire["error"] = step.error
    wire[BOOKKEEPING_KEY] = book
    return wire


def _call_id(call: ToolCall) -> str:
    return call.tool_call_id or call.agui_id or str(call.uuid)


def _call_entry(call: ToolCall) -> tuple[dict[str, Any], dict[str, Any]]:
    wire_id = _call_id(call)
    entry: dict[str, Any] = {
        "id": wire_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if call.encrypted_value is not None:
        entry["encryptedValue"] = call.encrypted_value
    book: dict[str, Any] = {
        "uuid": str(call.uuid),
        "inProgress": call.in_progress,
        "createdAt": _iso(call.created_at),
        "hasResult": call.has_result,
        **_common(call),
    }
    _put_id(book, "aguiId", call.agui_id, wire_id)
    _put_id(book, "toolCallId", call.tool_call_id, wire_id)
    if call.error is not None:
        book["error"] = call.error
    if call.role != Role.TOOL.value:
        book["role"] = call.role
    return entry, book


def _has_result(call: ToolCall) -> bool:
    return (
        call.has_result
        or bool(call.content)
        or call.result_message_id is not None
        or bool(call.content_parts)
    )


def _result_wire(call: ToolCall) -> dict[str, Any]:
    call_id = _call_id(call)
    wire_id = call.result_message_id or call_id
    book: dict[str, Any] = {"uuid": str(call.uuid)}
    _put_id(book, "resultMessageId", call.result_message_id, wire_id)
    wire: dict[str, Any] = {"id": wire_id, "role": "tool", "toolCallId": call_id}
    if call.content_parts:
        wire["content"] = call.content_parts
        book["text"] = call.content
    else:
        wire["content"] = call.content
    if call.error is not None:
        wire["error"] = call.error
    if call.result_encrypted_value is not None:
        wire["encryptedValue"] = call.result_encrypted_value
    wire.update(_common(call))
    wire[BOOKKEEPING_KEY] = book
    return wire


def _anchor_book(message: Message, wire_id: str) -> dict[str, Any]:
    book: dict[str, Any] = {
        "uuid": str(message.message_uuid),
        "inProgress": message.in_progress,
        "timestamp": _iso(message.timestamp),
    }
    _put_id(book, "aguiId", message.agui_id, wire_id)
    if message.step is not None:
        book["step"] = message.step
    if message.run_outcome:
        book["runOutcome"] = message.run_outcome
    if message.content_parts:
        book["text"] = message.content
    return book


def _message_wire(message: Message, extra: Mapping[str, Any]) -> list[dict[str, Any]]:
    wire_id = message.agui_id or str(message.message_uuid)
    kept = {**(message.wire_extra or {}), **extra}
    anchor: dict[str, Any] = {k: v for k, v in kept.items() if k not in MANAGED_KEYS}
    anchor.update(id=wire_id, role=message.role)
    book = _anchor_book(message, wire_id)
    out: list[dict[str, Any]] = []
    if message.role == "activity":
        anchor["activityType"] = message.activity_type or ""
        anchor["content"] = message.activity_content or {}
    elif message.role in (Role.USER.value, Role.SYSTEM.value, Role.DEVELOPER.value):
        anchor["content"] = message.content_parts or message.content
    else:
        out.extend(_reasoning_wire(step) for step in message.reasonings)
        if message.content:
            anchor["content"] = message.content
        entries = [_call_entry(call) for call in message.tool_calls]
        if entries:
            anchor["toolCalls"] = [entry for entry, _ in entries]
            book["toolCalls"] = [call_book for _, call_book in entries]
        if message.content_parts:
            anchor["content"] = message.content_parts
    if message.name:
        anchor["name"] = message.name
    if message.encrypted_value is not None:
        anchor["encryptedValue"] = message.encrypted_value
    anchor.update(_common(message))
    if message.error is not None:
        anchor["error"] = message.error
    anchor[BOOKKEEPING_KEY] = book
    out.append(anchor)
    if message.role not in ("activity", Role.USER.value, Role.SYSTEM.value, Role.DEVELOPER.value):
        out.extend(_result_wire(call) for call in message.tool_calls if _has_result(call))
    return out


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
            continue
        wire.extend(_message_wire(message, extras.get(message.message_uuid, {})))
    return wire


# -- wire → records ------------------------------------------------------------------------


@dataclass(kw_only=True)
class WireRecords:
    """What ``wire_to_records`` read: the records in order, each one's unmanaged keys, and
    per record ``(fingerprint, the stored messages it was read from)``."""

    messages: list[Message] = field(default_factory=list)
    extras: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    originals: dict[uuid.UUID, tuple[str, list[dict[str, Any]]]] = field(default_factory=dict)
    indices: dict[uuid.UUID, list[int]] = field(default_factory=dict)
    """Per record, the positions (in the list read) of the messages it was read from."""
    orphans: int = 0
    """Tool results read that answer no call read before them (kept with the record before)."""
    derived: set[uuid.UUID] = field(default_factory=set)
    """The uuids derived for records and nested records that have no bookkeeping uuid."""
    sent: set[uuid.UUID] = field(default_factory=set)
    """The uuids bookkeeping gave (one may equal a derived one: a client can send any)."""


def _book(wire: Mapping[str, Any]) -> dict[str, Any]:
    book = wire.get(BOOKKEEPING_KEY)
    return dict(book) if isinstance(book, Mapping) else {}


def _status(wire: Mapping[str, Any]) -> str:
    status = wire.get("status")
    return status if isinstance(status, str) and status else _COMPLETE


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _text_and_parts(
    content: Any, book: Mapping[str, Any]
) -> tuple[str, list[dict[str, Any]] | None]:
    if isinstance(content, list):
        parts = [dict(part) for part in content if isinstance(part, Mapping)]
        text = book.get("text")
        return (text if isinstance(text, str) else message_text({"content": parts})), parts
    return (content if isinstance(content, str) else ""), None


def derived_uuid(
    salt: str,
    index: int,
    wire: Mapping[str, Any],
    namespace: uuid.UUID = _WIRE_UUID_NAMESPACE,
) -> uuid.UUID:
    """The uuid ``wire_to_records`` (given ``namespace``) gives the message at ``index`` that
    has no bookkeeping."""
    key = f"{salt}\0{index}\0{wire.get('id')}\0{wire.get('role')}"
    return uuid.uuid5(namespace, key)


class _Reader:
    def __init__(
        self,
        chat_uuid: uuid.UUID,
        participant: str | None,
        salt: str,
        fingerprints: bool = True,
        namespace: uuid.UUID = _WIRE_UUID_NAMESPACE,
    ) -> None:
        self.namespace = namespace
        self.fingerprints = fingerprints
        self.chat_uuid = chat_uuid
        self.participant = participant
        self.salt = salt
        self.result = WireRecords()
        self.pending_steps: list[Reasoning] = []
        self.pending_wire: list[dict[str, Any]] = []
        self.pending_indices: list[int] = []
        self.calls: dict[str, ToolCall] = {}
        self.call_owner: dict[str, uuid.UUID] = {}
        self.sources: dict[uuid.UUID, list[dict[str, Any]]] = {}

    def own_uuid(self, sent: Any, index: int, wire: Mapping[str, Any]) -> uuid.UUID:
        """The uuid the bookkeeping ``sent``, else one derived (and listed in ``derived``)."""
        fallback = derived_uuid(self.salt, index, wire, self.namespace)
        chosen = _uuid(sent, fallback)
        (self.result.derived if chosen is fallback else self.result.sent).add(chosen)
        return chosen

    def add(self, message: Message, wire: Mapping[str, Any], index: int | None) -> None:
        sources: list[dict[str, Any]] = []
        indices: list[int] = []
        if message.reasonings:  # the steps read before it are its own
            sources, self.pending_wire = self.pending_wire, []
            indices, self.pending_indices = self.pending_indices, []
        if wire:
            sources.append(dict(wire))
        if index is not None:
            indices.append(index)
        self.sources[message.message_uuid] = sources
        self.result.indices[message.message_uuid] = indices
        message._sequence_id = len(self.result.messages) + 1
        emitter_type, emitter_id = emitter_for_role(message.role, self.participant)
        message.emitter_type = emitter_type
        message.emitter_id = emitter_id
        self.result.messages.append(message)
        extra = {k: v for k, v in wire.items() if k not in MANAGED_KEYS}
        if extra:
            self.result.extras[message.message_uuid] = extra

    def step(self, index: int, wire: Mapping[str, Any]) -> None:
        book = _book(wire)
        wire_id = str(wire.get("id") or "")
        content = wire.get("content")
        self.pending_wire.append(dict(wire))
        self.pending_indices.append(index)
        self.pending_steps.append(
            Reasoning(
                uuid=self.own_uuid(book.get("uuid"), index, wire),
                agui_id=_id_field(book, "aguiId", wire_id),
                role=str(book.get("role") or Role.REASONING.value),
                name=str(book.get("name") or ""),
                content=content if isinstance(content, str) else "",
                in_progress=bool(book.get("inProgress", False)),
                error=_opt_str(wire.get("error")),
                status=_status(wire),
                created_at=_when(book.get("createdAt")),
                run_id=_opt_str(wire.get("runId")),
                encrypted_value=_opt_str(wire.get("encryptedValue")),
            )
        )

    def call(self, index: int, position: int, entry: Any, book: Mapping[str, Any]) -> ToolCall:
        entry = entry if isinstance(entry, Mapping) else {}
        function = entry.get("function") if isinstance(entry.get("function"), Mapping) else {}
        wire_id = str(entry.get("id") or "")
        call = {"id": f"{wire_id}#{position}", "role": "call"}
        return ToolCall(
            uuid=self.own_uuid(book.get("uuid"), index, call),
            agui_id=_id_field(book, "aguiId", wire_id),
            tool_call_id=_id_field(book, "toolCallId", wire_id),
            role=str(book.get("role") or Role.TOOL.value),
            name=str(function.get("name") or ""),
            arguments=str(function.get("arguments") or ""),
            in_progress=bool(book.get("inProgress", False)),
            error=_opt_str(book.get("error")),
            status=str(book.get("status") or _COMPLETE),
            created_at=_when(book.get("createdAt")),
            run_id=_opt_str(book.get("runId")),
            has_result=bool(book.get("hasResult", False)),
            encrypted_value=_opt_str(entry.get("encryptedValue")),
        )

    def anchor(self, index: int, wire: Mapping[str, Any]) -> None:
        book = _book(wire)
        role = str(wire.get("role"))
        wire_id = str(wire.get("id") or "")
        message_uuid = self.own_uuid(book.get("uuid"), index, wire)
        fields: dict[str, Any] = {}
        content: Any = wire.get("content")
        if role == "activity":
            fields["activity_type"] = _opt_str(wire.get("activityType"))
            fields["activity_content"] = dict(content) if isinstance(content, Mapping) else {}
            text, parts = "", None
        else:
            text, parts = _text_and_parts(content, book)
        calls: list[ToolCall] = []
        steps: list[Reasoning] = []
        if role == Role.ASSISTANT.value or role not in (
            "activity",
            Role.USER.value,
            Role.SYSTEM.value,
            Role.DEVELOPER.value,
        ):
            entries = wire.get("toolCalls")
            entries = entries if isinstance(entries, list) else []
            books = book.get("toolCalls")
            books = books if isinstance(books, list) else []
            for position, entry in enumerate(entries):
                call_book = books[position] if position < len(books) else {}
                call_book = call_book if isinstance(call_book, Mapping) else {}
                call = self.call(index, position, entry, call_book)
                calls.append(call)
                self.calls[_call_id(call)] = call
                self.call_owner[_call_id(call)] = message_uuid
            steps, self.pending_steps = self.pending_steps, []
        message = Message(
            message_uuid=message_uuid,
            chat_uuid=self.chat_uuid,
            agui_id=_id_field(book, "aguiId", wire_id),
            role=role,
            name=str(wire.get("name") or ""),
            content=text,
            step=_opt_str(book.get("step")),
            in_progress=bool(book.get("inProgress", False)),
            error=_opt_str(wire.get("error")),
            status=_status(wire),
            timestamp=_when(book.get("timestamp")),
            tool_calls=calls,
            reasonings=steps,
            run_id=_opt_str(wire.get("runId")),
            encrypted_value=_opt_str(wire.get("encryptedValue")),
            content_parts=parts,
            run_outcome=dict(book["runOutcome"])
            if isinstance(book.get("runOutcome"), Mapping)
            else None,
            wire_extra={k: v for k, v in wire.items() if k not in MANAGED_KEYS} or None,
            **fields,
        )
        self.add(message, wire, index)

    def result_of(self, index: int, wire: Mapping[str, Any]) -> None:
        call_id = str(wire.get("toolCallId") or "")
        call = self.calls.get(call_id)
        if call is None:
            # A result for no known call: no record can hold it, but it is written back
            # verbatim with the record before it while that record is unchanged.
            self.result.orphans += 1
            if self.result.messages:
                last = self.result.messages[-1].message_uuid
                self.sources[last].append(dict(wire))
                self.result.indices[last].append(index)
            return
        self.sources[self.call_owner[call_id]].append(dict(wire))
        self.result.indices[self.call_owner[call_id]].append(index)
        book = _book(wire)
        wire_id = str(wire.get("id") or "")
        text, parts = _text_and_parts(wire.get("content"), book)
        call.content = text
        call.content_parts = parts
        call.result_message_id = _id_field(book, "resultMessageId", wire_id)
        call.result_encrypted_value = _opt_str(wire.get("encryptedValue"))
        if BOOKKEEPING_KEY not in wire:
            call.has_result = True
            call.error = _opt_str(wire.get("error"))

    def finish(self) -> WireRecords:
        if self.pending_steps:  # reasoning with no message after it: keep it on an empty one
            message = Message(
                message_uuid=uuid.uuid5(_WIRE_UUID_NAMESPACE, f"{self.salt}\0trailing"),
                chat_uuid=self.chat_uuid,
                role=Role.ASSISTANT.value,
                in_progress=False,
                status=_COMPLETE,
                timestamp=_UNKNOWN_TIME,
                reasonings=self.pending_steps,
            )
            self.pending_steps = []
            self.add(message, {}, None)
        if not self.fingerprints:
            return self.result
        for message in self.result.messages:
            self.result.originals[message.message_uuid] = (
                record_fingerprint(message),
                self.sources[message.message_uuid],
            )
        return self.result


def wire_to_records(
    wire_messages: Sequence[Any],
    *,
    chat_uuid: uuid.UUID,
    participant: str | None = None,
    salt: str = "",
    start: int = 0,
    fingerprints: bool = True,
    namespace: uuid.UUID = _WIRE_UUID_NAMESPACE,
) -> WireRecords:
    """Read stored wire messages back into records of the chat ``chat_uuid``.

    Records get sequence ids 1, 2, ... in stored order. A message without bookkeeping gets a
    uuid derived from ``salt`` (use the thread id), its position and its id, so two readers of
    the same conversation agree. Entries that are not mappings are skipped.

    ``start`` is the position of the first message in the whole conversation when only its
    tail is read (positions, and the uuids derived from them, count from it).
    ``fingerprints=False`` leaves ``originals`` empty, for a caller that keeps the stored
    messages itself. ``namespace`` is the uuid5 namespace of the derived uuids (``derived``
    lists them).
    """
    reader = _Reader(chat_uuid, participant, salt, fingerprints, namespace)
    for index, wire in enumerate(wire_messages, start):
        if not isinstance(wire, Mapping):
            continue
        role = wire.get("role")
        if role == "reasoning":
            reader.step(index, wire)
        elif role == "tool":
            reader.result_of(index, wire)
        elif isinstance(role, str) and role:
            reader.anchor(index, wire)
    return reader.finish()
