"""Message rows: the one module that builds ``StoredMessage`` columns.

Every row holds one ``chat_history.Message`` record, whoever wrote it (``save()``, a run, the
upgrade migration); the sweeper and the strip command change rows they find:

- ``message_uuid``, ``message_id`` (the AG-UI id), ``role``, ``content``, ``status`` and
  ``run_id``: the record fields that queries filter on and the admin shows;
- ``record``: the record's other fields, ``tool_calls`` and ``reasonings``: its nested records
  (JSON, each as ``model_dump(mode="json")`` writes it);
- ``wire``: the AG-UI wire messages ``save()`` was given for this record, verbatim, so
  ``load()`` returns them as saved; ``NULL`` for a record a run wrote or has changed since,
  which ``load()`` renders with ``persistence.wire.records_to_wire``. A message saved as
  exactly ``{"id", "role", "content"}`` (most of a long thread) keeps ``PLAIN_WIRE`` there
  instead: its message is its record's id, role and text, which ``load()`` builds from those
  columns (``loaded``), so the text is written once and no JSON is parsed to read it.

A saved list is read into records by ``persistence.wire.wire_to_records`` (one record is a
message with the reasoning steps before it and the tool results that answer its calls). When
that reading does not cover the list exactly, in order (a value that is not an object, a tool
result far from its call), each message becomes a record of its own, so nothing saved is lost
or reordered. The uuids of saved records are derived from the thread's ``chat_uuid`` and the
message's position, so they are unique across threads and the same on every save.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from django.db import connections

from django_pydantic_agent.chat_history.records import (
    WIRE_CONTEXT,
    Message,
    MessageStatus,
    Reasoning,
    ToolCall,
    nested_record_class,
)
from django_pydantic_agent.contrib.store.quotas import MAX_KEY
from django_pydantic_agent.persistence.derive import message_text
from django_pydantic_agent.persistence.wire import (
    MANAGED_KEYS,
    WireRecords,
    records_to_wire,
    wire_to_records,
)

__all__ = [
    "PLAIN_WIRE",
    "READ_COLUMNS",
    "RECORD_COLUMNS",
    "SavedRecord",
    "copy_rows",
    "insert",
    "loaded",
    "new_row",
    "record_columns",
    "record_of",
    "render",
    "saved_records",
    "saved_wire",
    "stored_wire",
    "wire_of",
    "wire_text",
]

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
READ_COLUMNS: Final[tuple[str, ...]] = (
    "position",
    "message_uuid",
    "message_id",
    "content",
    "record",
    "tool_calls",
    "reasonings",
)
"""The columns ``record_of`` reads: a read of records fetches only these, as named tuples
(``values_list(*READ_COLUMNS, named=True)``), and builds no model instance (nor decodes the
``wire`` of a saved message) for a row it only turns into a record."""
_UNREADABLE = "unreadable"
"""The ``activity_type`` of the record kept for a saved value that is no message."""
PLAIN_WIRE: Final = 0
"""The ``wire`` of a row whose saved message was exactly ``{"id", "role", "content"}``, in
that order, with a string text: ``loaded`` and ``wire_of`` rebuild it from the row's
``message_id``, ``role`` and ``content``."""
_PLAIN_ORDER: Final = ("id", "role", "content")
_PLAIN_TEXT: Final = json.dumps(PLAIN_WIRE)


def wire_of(wire: Any, message_id: str, role: str, content: str) -> Any:
    """The wire messages a row's ``wire`` value stands for (``None``: a record ``load``
    renders), given its ``message_id``, ``role`` and ``content``."""
    if type(wire) is int:  # PLAIN_WIRE
        return [{"id": message_id, "role": role, "content": content}]
    return wire


def saved_wire(row: Any) -> Any:
    """``wire_of`` a ``StoredMessage`` row (or its historical model's)."""
    return wire_of(row.wire, row.message_id, row.role, row.content)


def loaded(texts: Iterable[tuple[str | None, str, str, str]]) -> list[Any] | None:
    """The wire messages of rows given as ``(wire as JSON text, message_id, role, content)``,
    in order; ``None`` if one of them is a record ``load`` renders.

    A ``PLAIN_WIRE`` row's message is built from its columns, the others' parsed: a
    1,000-message thread of plain messages loads without parsing any JSON.
    """
    messages: list[Any] = []
    for text, message_id, role, content in texts:
        if text == _PLAIN_TEXT:
            messages.append({"id": message_id, "role": role, "content": content})
        elif text is None:
            return None
        else:
            messages.extend(json.loads(text))
    return messages


def stored_wire(saved: SavedRecord) -> Any:
    """The value of the ``wire`` column that stands for ``saved``'s wire messages."""
    return PLAIN_WIRE if saved.plain else saved.wire


def record_columns(message: Message) -> dict[str, Any]:
    """The columns of ``message``'s row but its keys, its position and ``wire``."""
    return {
        "message_id": (message.agui_id or "")[:MAX_KEY],
        "role": message.role[:32],
        "content": message.content,
        "record": message.model_dump(mode="json", exclude=set(_NOT_IN_RECORD)),
        "tool_calls": [call.model_dump(mode="json") for call in message.tool_calls],
        "reasonings": [step.model_dump(mode="json") for step in message.reasonings],
        "status": message.status[:16],
        "run_id": (message.run_id or "")[:MAX_KEY],
    }


def new_row(
    model: Any,
    conversation_id: int,
    position: int,
    message: Message,
    wire: Any = None,
    **tree: Any,
) -> Any:
    """An unsaved row of ``model`` (``StoredMessage``, or its historical model) for ``message``.

    ``tree`` sets the row's place in the message tree (``branch``, ``parent_uuid``).
    """
    return model(
        conversation_id=conversation_id,
        position=position,
        message_uuid=message.message_uuid,
        wire=wire,
        **record_columns(message),
        **tree,
    )


_INSERTED: Final[tuple[str, ...]] = ("conversation_id", "position", "message_uuid", "wire")
_FIELD: Final[dict[str, str]] = {"conversation_id": "conversation"}


def insert(
    model: Any,
    rows: Sequence[tuple[int, int, SavedRecord]],
    *,
    using: str,
    branch: int = 0,
    parent: uuid.UUID | None = None,
) -> None:
    """Insert ``(conversation_id, position, saved)`` rows of ``model`` in one statement.

    One ``executemany`` of a plain ``INSERT``, values prepared by each field as the ORM
    prepares them: ``bulk_create`` spent most of a first save building the SQL of its
    batches (``python -m bench.save_cpu``). The rows join
    ``branch``; the first follows ``parent`` when given (``branches``), each next one the row
    before it.
    """
    if not rows:
        return
    connection = connections[using]
    tree: tuple[str, ...] = ("branch", "parent_uuid") if branch or parent else ()
    names = (*_INSERTED, *RECORD_COLUMNS, *tree)
    fields = [model._meta.get_field(_FIELD.get(name, name)) for name in names]
    # Columns this shape does not fill (a historical model's) take their defaults.
    others = [f for f in model._meta.concrete_fields if not f.primary_key and f not in fields]
    defaults = [f.get_db_prep_save(f.get_default(), connection) for f in others]
    fields += others
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    table = connection.ops.quote_name(model._meta.db_table)
    sql = f"INSERT INTO {table} ({columns}) VALUES ({marks})"
    # The values in the order of ``names``: each as its field prepares it (JSON through the
    # backend's adapter, as JSONField does), without the field's call chain per value.
    uuid_value = fields[2].get_db_prep_value
    wire_value = fields[3].get_db_prep_save
    record_value = fields[7].get_db_prep_save
    adapt = connection.ops.adapt_json_value
    empty = adapt([], None)
    plain = wire_value(PLAIN_WIRE, connection)
    parent_value = model._meta.get_field("parent_uuid").get_db_prep_value if tree else None
    params = []
    for number, (conversation_id, position, saved) in enumerate(rows):
        values = saved.columns
        calls, steps = values["tool_calls"], values["reasonings"]
        record = saved.record_text
        params.append(
            [
                conversation_id,
                position,
                uuid_value(saved.message_uuid, connection),
                plain if saved.plain else wire_value(saved.wire, connection),
                values["message_id"],
                values["role"],
                values["content"],
                record if record is not None else record_value(values["record"], connection),
                adapt(calls, None) if calls else empty,
                adapt(steps, None) if steps else empty,
                values["status"],
                values["run_id"],
                *(
                    (branch, parent_value(parent if number == 0 else None, connection))
                    if parent_value is not None
                    else ()
                ),
                *defaults,
            ]
        )
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


_COPIED: Final[tuple[str, ...]] = (
    "position",
    "message_uuid",
    "message_id",
    "role",
    "content",
    "record",
    "tool_calls",
    "reasonings",
    "status",
    "run_id",
    "wire",
)
_RUNNING: Final[str] = MessageStatus.ACTIVE.value
_STOPPED: Final[str] = MessageStatus.INTERRUPTED.value


def _text_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _rekeyed(text: str, chat_uuid: uuid.UUID) -> list[Any]:
    """Nested records (JSON text) under uuids of the new thread, running ones stopped."""
    copied = []
    for item in json.loads(text) or []:
        if isinstance(item, dict):
            item = dict(item)
            if isinstance(item.get("uuid"), str):
                item["uuid"] = str(uuid.uuid5(chat_uuid, item["uuid"]))
            if item.get("status") == _RUNNING:
                item["status"] = _STOPPED
        copied.append(item)
    return copied


def copy_rows(
    model: Any, source_id: int, target_id: int, chat_uuid: uuid.UUID, last: int, *, using: str
) -> list[tuple[str | None, str]]:
    """Copy the active rows of thread ``source_id`` up to position ``last`` into thread
    ``target_id`` (positions ``0..``, branch 0, active), each under a new uuid of
    ``chat_uuid`` (its tool calls' and reasoning steps' too); one ``SELECT`` and one
    ``executemany``.

    The JSON columns travel as the text the database holds; only the nested records and a
    still running row (copied as ``interrupted``, rendered from its record) are decoded.
    Returns each copied row's ``(wire, record)`` text, for the attachment links.
    """
    connection = connections[using]
    quote = connection.ops.quote_name
    meta = model._meta
    columns = [meta.get_field(name).column for name in _COPIED]
    selected = ", ".join(
        f"CAST({quote(c)} AS text)" if n in ("tool_calls", "reasonings") else quote(c)
        for n, c in zip(_COPIED, columns, strict=True)
    )
    table = quote(meta.db_table)
    where = (
        f"{quote(meta.get_field('conversation').column)} = %s AND "
        f"{quote(meta.get_field('active').column)} = %s AND {quote(columns[0])} <= %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {selected} FROM {table} WHERE {where} ORDER BY {quote(columns[0])}",
            [source_id, True, last],
        )
        found = cursor.fetchall()
    adapt = connection.ops.adapt_json_value
    empty = adapt([], None)
    uuid_field = meta.get_field("message_uuid")
    written = ("conversation_id", *_COPIED)
    fields = [meta.get_field("conversation" if n == "conversation_id" else n) for n in written]
    others = [f for f in meta.concrete_fields if not f.primary_key and f not in fields]
    defaults = [f.get_db_prep_save(f.get_default(), connection) for f in others]
    names = ", ".join(quote(f.column) for f in [*fields, *others])
    marks = ", ".join(["%s"] * (len(fields) + len(others)))
    params = []
    quoted: list[tuple[str | None, str]] = []
    for number, row in enumerate(found):
        _, old_uuid, message_id, role, content, record, calls, steps, status, run_id, wire = row
        if status == _RUNNING:
            own = json.loads(record or "{}")
            own.update(status=_STOPPED, in_progress=False)
            record, status, wire = json.dumps(own, separators=(",", ":")), _STOPPED, None
        new_uuid = uuid.uuid5(chat_uuid, str(_text_uuid(old_uuid)))
        params.append(
            [
                target_id,
                number,
                uuid_field.get_db_prep_value(new_uuid, connection),
                message_id,
                role,
                content,
                record,
                adapt(_rekeyed(calls, chat_uuid), None) if calls and calls != "[]" else empty,
                adapt(_rekeyed(steps, chat_uuid), None) if steps and steps != "[]" else empty,
                status,
                run_id,
                wire,
                *defaults,
            ]
        )
        quoted.append((wire, record or ""))
    if params:
        with connection.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", params)
    return quoted


def _nested(message_class: type[Message], field: str, raw: list[Any] | None) -> list[Any]:
    """The nested records of a row's ``field`` column (its class looked up only when there
    is one: most rows hold neither tool calls nor reasoning steps)."""
    if not raw:
        return []
    record_class = nested_record_class(message_class, field)
    return [record_class.model_validate(item, context=dict(WIRE_CONTEXT)) for item in raw]


def record_of(message_class: type[Message], row: Any, chat_uuid: uuid.UUID) -> Message:
    """The record ``row`` (a ``StoredMessage``, or a named tuple of its ``READ_COLUMNS``)
    holds, as ``message_class`` (the caller's)."""
    own = row.record or {}
    message = message_class.model_validate(
        {
            **own,
            "message_uuid": row.message_uuid,
            "chat_uuid": chat_uuid,
            "content": row.content,
            "tool_calls": _nested(message_class, "tool_calls", row.tool_calls),
            "reasonings": _nested(message_class, "reasonings", row.reasonings),
        }
    )
    message._sequence_id = row.position + 1
    message._created_at = str(own.get("timestamp") or "")
    return message


@dataclass(kw_only=True, slots=True)  # not frozen: a thousand are built per first save
class SavedRecord:
    """One record of a saved list (its uuid and row columns) and its wire messages, verbatim."""

    message_uuid: uuid.UUID
    columns: dict[str, Any]
    """The row's ``RECORD_COLUMNS``."""
    wire: list[Any]
    index: int
    """The position of the first of those messages in the whole list."""
    plain: bool = False
    """Whether ``wire`` is one message a ``PLAIN_WIRE`` row stands for."""
    record_text: str | None = None
    """The ``record`` column's JSON text, when it was written without dumping the record."""

    @classmethod
    def of(cls, message: Message, wire: list[Any], index: int) -> SavedRecord:
        return cls(
            message_uuid=message.message_uuid,
            columns=record_columns(message),
            wire=wire,
            index=index,
        )


# A plain message (a string ``id``, a user/assistant/system/developer ``role``, a string
# ``content`` and only keys the reader keeps as ``wire_extra``) is read into the same record
# every time but for its id, text, extra keys and uuid: its columns are a template's with those
# filled in, without building and dumping a ``Message`` (``python -m bench.save_cpu``).
# ``test_rows_property`` holds the template to what the reader gives.
_PLAIN_ROLES: Final[frozenset[str]] = frozenset({"user", "assistant", "system", "developer"})
_PLAIN_KEYS: Final[frozenset[str]] = frozenset({"id", "role", "content"})
_templates: dict[str, tuple[dict[str, Any], str, str]] = {}


def _plain(value: Any) -> bool:
    return (
        type(value) is dict
        and value.get("role") in _PLAIN_ROLES
        and type(value.get("id")) is str
        and type(value.get("content")) is str
        and (len(value) == 3 or not any(k in MANAGED_KEYS for k in value.keys() - _PLAIN_KEYS))
    )


def _template(role: str) -> tuple[dict[str, Any], str, str]:
    """The columns of a plain message of ``role`` and its ``record`` text around the id."""
    template = _templates.get(role)
    if template is None:
        sample = {"id": "", "role": role, "content": ""}
        [message] = wire_to_records([sample], chat_uuid=uuid.UUID(int=0)).messages
        columns = record_columns(message)
        marker = "\0agui_id\0"
        text = json.dumps({**columns["record"], "agui_id": marker}, separators=(",", ":"))
        before, after = text.split(json.dumps(marker))
        template = _templates[role] = (columns, before, after)
    return template


def _plain_record(value: dict[str, Any], chat_bytes: bytes, salt: str, index: int) -> SavedRecord:
    columns, before, after = _template(value["role"])
    wire_id = value["id"]
    extra = {k: v for k, v in value.items() if k not in _PLAIN_KEYS} if len(value) > 3 else None
    record = {
        **columns["record"],
        "agui_id": wire_id,
        # As model_dump(mode="json") writes them (tuples become lists).
        "wire_extra": json.loads(json.dumps(extra)) if extra else None,
    }
    # The uuid ``wire_to_records(..., namespace=chat_uuid)`` derives for this message.
    key = f"{salt}\0{index}\0{wire_id}\0{value['role']}"
    digest = hashlib.sha1(chat_bytes + key.encode()).digest()
    plain = not extra and len(wire_id) <= MAX_KEY and tuple(value) == _PLAIN_ORDER
    return SavedRecord(
        message_uuid=uuid.UUID(bytes=digest[:16], version=5),
        columns={
            **columns,
            "message_id": wire_id[:MAX_KEY],
            "content": value["content"],
            "record": record,
        },
        wire=[value],
        index=index,
        plain=plain,
        record_text=None if extra else f"{before}{json.dumps(wire_id)}{after}",
    )


def _derived(chat_uuid: uuid.UUID, value: uuid.UUID, index: int) -> uuid.UUID:
    return uuid.uuid5(chat_uuid, f"{value}\0{index}")


def _rekey(message: Message, chat_uuid: uuid.UUID, index: int, read: WireRecords) -> Message:
    """Give ``message`` and its nested records uuids of this thread and position: those the
    reader derived are (in the thread's namespace), those a client sent are made so."""

    def own(value: uuid.UUID) -> uuid.UUID:
        if value in read.derived and value not in read.sent:
            return value
        return _derived(chat_uuid, value, index)

    message.message_uuid = own(message.message_uuid)
    children: Iterable[ToolCall | Reasoning] = (*message.tool_calls, *message.reasonings)
    for child in children:
        child.uuid = own(child.uuid)
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
    if all(_plain(value) for value in messages):
        chat_bytes = chat_uuid.bytes
        return [
            _plain_record(value, chat_bytes, salt, start + offset)
            for offset, value in enumerate(messages)
        ]
    read = wire_to_records(
        messages,
        chat_uuid=chat_uuid,
        salt=salt,
        start=start,
        fingerprints=False,
        namespace=chat_uuid,
    )
    order = [i for m in read.messages for i in read.indices[m.message_uuid]]
    if order != list(range(start, start + len(messages))) or (exact and read.orphans):
        return None
    saved = []
    for m in read.messages:
        indices = read.indices[m.message_uuid]
        wire = [messages[i - start] for i in indices]
        saved.append(SavedRecord.of(_rekey(m, chat_uuid, indices[0], read), wire, indices[0]))
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
            saved.append(SavedRecord.of(_unreadable(value, chat_uuid, index), [value], index))
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
    return "[" + ",".join(filter(None, (text[1:-1] for text in texts))) + "]"
