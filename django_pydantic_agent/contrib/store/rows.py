"""Message rows: the one module that builds ``StoredMessage`` columns.

Every row holds one ``chat_history.Message`` record, whoever wrote it (``save()``, a run, the
upgrade migration, the strip command):

- ``message_uuid``, ``message_id`` (the AG-UI id), ``role``, ``content``, ``status`` and
  ``run_id``: the record fields that queries filter on and the admin shows;
- ``record``: the record's other fields, ``tool_calls`` and ``reasonings``: its nested records
  (JSON, each as ``model_dump(mode="json")`` writes it);
- ``wire``: the AG-UI wire messages ``save()`` was given for this record, verbatim, so
  ``load()`` returns them as saved; ``NULL`` for a record a run wrote or has changed since,
  which ``load()`` renders with ``persistence.wire.records_to_wire``.

A saved list is read into records by ``persistence.wire.wire_to_records`` (one record is a
message with the reasoning steps before it and the tool results that answer its calls). When
that reading does not cover the list exactly, in order (a value that is not an object, a tool
result far from its call), each message becomes a record of its own, so nothing saved is lost
or reordered. The uuids of saved records are derived from the thread's ``chat_uuid`` and the
message's position, so they are unique across threads and the same on every save.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from django_pydantic_agent.chat_history.records import (
    WIRE_CONTEXT,
    Message,
    MessageStatus,
    Reasoning,
    ToolCall,
    nested_record_class,
)
from django_pydantic_agent.persistence.derive import message_text
from django_pydantic_agent.persistence.wire import records_to_wire, wire_to_records

__all__ = [
    "RECORD_COLUMNS",
    "SavedRecord",
    "new_row",
    "record_columns",
    "record_of",
    "render",
    "saved_records",
    "wire_json",
    "wire_text",
]

_MAX_KEY = 255
_NOT_IN_RECORD: Final[frozenset[str]] = frozenset(
    {"content", "tool_calls", "reasonings", "message_uuid", "chat_uuid"}
)
RECORD_COLUMNS: Final[tuple[str, ...]] = (
    "message_id",
    "role",
    "content",
    "record",
    "tool_calls",
    "reasonings",
    "status",
    "run_id",
)
"""The columns ``record_columns`` fills (with ``message_uuid``, ``position`` and ``wire``,
every column of a row but its thread)."""
_UNREADABLE = "unreadable"
"""The ``activity_type`` of the record kept for a saved value that is no message."""


def record_columns(message: Message) -> dict[str, Any]:
    """The columns of ``message``'s row but its keys, its position and ``wire``."""
    return {
        "message_id": (message.agui_id or "")[:_MAX_KEY],
        "role": message.role[:32],
        "content": message.content,
        "record": message.model_dump(mode="json", exclude=set(_NOT_IN_RECORD)),
        "tool_calls": [call.model_dump(mode="json") for call in message.tool_calls],
        "reasonings": [step.model_dump(mode="json") for step in message.reasonings],
        "status": message.status[:16],
        "run_id": (message.run_id or "")[:_MAX_KEY],
    }


def new_row(
    model: Any, conversation_id: int, position: int, message: Message, wire: Any = None
) -> Any:
    """An unsaved row of ``model`` (``StoredMessage``, or its historical model) for ``message``."""
    return model(
        conversation_id=conversation_id,
        position=position,
        message_uuid=message.message_uuid,
        wire=wire,
        **record_columns(message),
    )


def record_of(message_class: type[Message], row: Any, chat_uuid: uuid.UUID) -> Message:
    """The record ``row`` (a ``StoredMessage``) holds, as ``message_class`` (the caller's)."""
    calls = nested_record_class(message_class, "tool_calls")
    steps = nested_record_class(message_class, "reasonings")
    own = row.record or {}
    message = message_class.model_validate(
        {
            **own,
            "message_uuid": row.message_uuid,
            "chat_uuid": chat_uuid,
            "content": row.content,
            "tool_calls": [
                calls.model_validate(c, context=dict(WIRE_CONTEXT)) for c in row.tool_calls or []
            ],
            "reasonings": [
                steps.model_validate(r, context=dict(WIRE_CONTEXT)) for r in row.reasonings or []
            ],
        }
    )
    message._sequence_id = row.position + 1
    message._created_at = str(own.get("timestamp") or "")
    return message


@dataclass(frozen=True, kw_only=True, slots=True)
class SavedRecord:
    """One record of a saved list and the wire messages it was read from, verbatim."""

    message: Message
    wire: list[Any]
    index: int
    """The position of the first of those messages in the whole list."""


def _derived(chat_uuid: uuid.UUID, value: uuid.UUID, index: int) -> uuid.UUID:
    return uuid.uuid5(chat_uuid, f"{value}\0{index}")


def _rekey(message: Message, chat_uuid: uuid.UUID, index: int) -> Message:
    """Give ``message`` and its nested records uuids of this thread and position."""
    message.message_uuid = _derived(chat_uuid, message.message_uuid, index)
    children: Iterable[ToolCall | Reasoning] = (*message.tool_calls, *message.reasonings)
    for child in children:
        child.uuid = _derived(chat_uuid, child.uuid, index)
    return message


def _unreadable(value: Any, chat_uuid: uuid.UUID, index: int) -> Message:
    """The record kept for a saved value no record can hold (it is only ever replayed as is)."""
    wire_id = value.get("id") if isinstance(value, Mapping) else None
    role = value.get("role") if isinstance(value, Mapping) else None
    return Message(
        message_uuid=uuid.uuid5(chat_uuid, f"unreadable\0{index}"),
        chat_uuid=chat_uuid,
        agui_id=wire_id if isinstance(wire_id, str) else None,
        role=role if isinstance(role, str) and role else "activity",
        content=message_text(value) if isinstance(value, Mapping) else "",
        in_progress=False,
        status=MessageStatus.COMPLETE.value,
        activity_type=_UNREADABLE,
        activity_content={},
    )


def _readable(value: Any) -> bool:
    if not isinstance(value, Mapping):
        return False
    role = value.get("role")
    return isinstance(role, str) and bool(role)


def _read(
    messages: Sequence[Any], chat_uuid: uuid.UUID, salt: str, start: int, exact: bool
) -> list[SavedRecord] | None:
    """The records of ``messages`` as one reading, or ``None`` if it is not exact."""
    read = wire_to_records(
        messages, chat_uuid=chat_uuid, salt=salt, start=start, fingerprints=False
    )
    order = [i for m in read.messages for i in read.indices[m.message_uuid]]
    if order != list(range(start, start + len(messages))) or (exact and read.orphans):
        return None
    saved = []
    for m in read.messages:
        indices = read.indices[m.message_uuid]
        wire = [messages[i - start] for i in indices]
        saved.append(
            SavedRecord(message=_rekey(m, chat_uuid, indices[0]), wire=wire, index=indices[0])
        )
    return saved


def _one_by_one(
    messages: Sequence[Any], chat_uuid: uuid.UUID, salt: str, start: int
) -> list[SavedRecord]:
    saved: list[SavedRecord] = []
    for offset, value in enumerate(messages):
        index = start + offset
        one = _read([value], chat_uuid, salt, index, True) if _readable(value) else None
        if one is not None and len(one) == 1:
            saved.extend(one)
        else:
            saved.append(
                SavedRecord(message=_unreadable(value, chat_uuid, index), wire=[value], index=index)
            )
    return saved


def saved_records(
    messages: Sequence[Any],
    *,
    chat_uuid: uuid.UUID,
    salt: str,
    start: int = 0,
    exact: bool = False,
) -> list[SavedRecord] | None:
    """The records of ``messages`` (``Conversation.messages``, or its tail from ``start``).

    ``salt`` is the thread id (as every reader of a saved list uses). The wire lists of the
    result, concatenated, are ``messages`` exactly. With ``exact=True`` the answer is ``None``
    when the records cannot be read as the whole list would read them (a tool result answers
    a call before ``start``, or the reading is not in order). Otherwise the list is read in
    stretches between values that are no message, and a stretch that does not read in order
    becomes one record per message.
    """
    whole = _read(messages, chat_uuid, salt, start, exact)
    if whole is not None or exact:
        return whole
    saved: list[SavedRecord] = []
    stretch: list[Any] = []
    for offset, value in enumerate([*messages, None]):
        if offset < len(messages) and _readable(value):
            stretch.append(value)
            continue
        first = start + offset - len(stretch)
        if stretch:
            read = _read(stretch, chat_uuid, salt, first, True)
            saved.extend(read if read is not None else _one_by_one(stretch, chat_uuid, salt, first))
            stretch = []
        if offset < len(messages):
            saved.extend(_one_by_one([value], chat_uuid, salt, start + offset))
    return saved


def render(message: Message) -> list[dict[str, Any]]:
    """The wire messages of a record no saved list stands for (written by or changed by a run)."""
    return records_to_wire([message])


def wire_text(texts: Iterable[str]) -> str:
    """One JSON array of the wire messages of rows whose ``wire`` is given as JSON text."""
    return "[" + ",".join(t.strip()[1:-1] for t in texts if t.strip() != "[]") + "]"


def wire_json(wire: list[Any]) -> str:
    """``wire`` as the JSON text ``save()`` compares with a row's stored ``wire``."""
    return json.dumps(wire, ensure_ascii=False, separators=(",", ":"))
