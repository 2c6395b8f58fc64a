"""AG-UI wire messages a ``ConversationStore`` keeps → chat-history records.

``wire_to_records`` reads what ``records_to_wire`` (``chat_history.agui_messages``, the one
conversion of records to AG-UI messages, re-exported here) wrote, bookkeeping included: the
pair round-trips every field of the records. A message without ``chatHistory`` (a client's
save, another transport, an older version) becomes a complete record with a deterministic
uuid, a tool message the result of the call with its ``toolCallId``. Per record it returns
the stored messages it was read from and a fingerprint of the record as read, so
``records_to_wire`` writes them back verbatim until a run changes the record.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from django_pydantic_agent.chat_history.agui_messages import (
    BOOKKEEPING_KEY,
    BRANCHES_KEY,
    MANAGED_KEYS,
    ROOT_BRANCHES_KEY,
    record_fingerprint,
    records_to_wire,
    tool_call_id,
)
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
_WIRE_UUID_NAMESPACE: Final[uuid.UUID] = uuid.uuid5(
    uuid.NAMESPACE_URL, "django-pydantic-agent:wire-message"
)


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
                self.calls[tool_call_id(call)] = call
                self.call_owner[tool_call_id(call)] = message_uuid
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
