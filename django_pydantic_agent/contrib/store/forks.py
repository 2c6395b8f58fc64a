"""Forking a thread: its active branch, up to a message, copied into a new thread.

``fork`` copies the message rows (one ``SELECT``, one multi-row ``INSERT`` through
``rows.insert``), each under a new uuid of the new thread (its tool calls' and reasoning
steps' too), so the two threads share no record. A message still streaming when the fork
is taken is copied as ``interrupted``: the fork is a snapshot, the run goes on in the source.
The attachments the copied messages quote are linked to the new thread, so they stay
readable (and kept) from both.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import router, transaction
from django.utils import timezone

from django_pydantic_agent.chat_history.records import MessageStatus
from django_pydantic_agent.contrib.store import rows
from django_pydantic_agent.contrib.store.links import reconcile_conversation_attachments
from django_pydantic_agent.contrib.store.quotas import MAX_KEY, lock_owner, refuse_new_thread
from django_pydantic_agent.persistence import derive_preview

__all__ = ["fork"]

_COLUMNS = (
    "position",
    "message_uuid",
    "wire",
    *rows.RECORD_COLUMNS,
)
_RUNNING = MessageStatus.ACTIVE.value
_STOPPED = MessageStatus.INTERRUPTED.value


def _rekeyed(items: list[Any], chat_uuid: uuid.UUID) -> list[Any]:
    """Nested records (dicts with a ``uuid``) under uuids of the new thread, in-progress ones
    stopped."""
    copied = []
    for item in items or []:
        if isinstance(item, dict):
            item = dict(item)
            if isinstance(item.get("uuid"), str):
                item["uuid"] = str(uuid.uuid5(chat_uuid, item["uuid"]))
            if item.get("status") == _RUNNING:
                item["status"] = _STOPPED
        copied.append(item)
    return copied


def _copied(values: dict[str, Any], chat_uuid: uuid.UUID, index: int) -> rows.SavedRecord:
    record = dict(values["record"] or {})
    columns = {name: values[name] for name in rows.RECORD_COLUMNS}
    wire = values["wire"]
    columns["tool_calls"] = _rekeyed(values["tool_calls"], chat_uuid)
    columns["reasonings"] = _rekeyed(values["reasonings"], chat_uuid)
    if values["status"] == _RUNNING or record.get("in_progress"):
        record.update(status=_STOPPED, in_progress=False)
        columns["status"] = _STOPPED
        wire = None  # rendered from the stopped record
    columns["record"] = record
    return rows.SavedRecord(
        message_uuid=uuid.uuid5(chat_uuid, str(values["message_uuid"])),
        columns=columns,
        wire=wire,
        index=index,
    )


def _wire_ids(values: dict[str, Any], chat_uuid: uuid.UUID) -> set[str]:
    """The AG-UI ids of the wire messages one row renders as."""
    from django_pydantic_agent.chat_history import Message
    from django_pydantic_agent.contrib.store.models import StoredMessage

    wire = values["wire"]
    if wire is None:
        row = StoredMessage(**{k: v for k, v in values.items() if k != "wire"})
        wire = rows.render(rows.record_of(Message, row, chat_uuid))
    return {str(m["id"]) for m in wire if isinstance(m, dict) and isinstance(m.get("id"), str)}


def fork(
    owner_id: str,
    thread_id: str,
    message_id: str,
    new_thread_id: str,
    max_threads: int | None,
) -> bool:
    """Copy the owner's thread's active branch up to the row holding ``message_id`` into a new
    thread ``new_thread_id`` of the same owner; ``False`` (nothing written) when the owner has
    no such thread or its active branch no such message. Raises ``StoreLimitError`` over
    ``max_threads``.
    """
    from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage

    if len(thread_id) > MAX_KEY or len(new_thread_id) > MAX_KEY:
        return False
    with transaction.atomic():
        source = (
            StoredConversation.objects.select_for_update()
            .filter(owner_id=owner_id, thread_id=thread_id)
            .first()
        )
        if source is None:
            return False
        found = list(
            StoredMessage.objects.filter(conversation_id=source.pk, active=True)
            .order_by("position")
            .values(*_COLUMNS)
        )
        end = next((i for i, v in enumerate(found) if v["message_id"] == message_id), None)
        if end is None:  # an id inside a row (a tool result, a reasoning step)
            end = next(
                (i for i, v in enumerate(found) if message_id in _wire_ids(v, source.chat_uuid)),
                None,
            )
        if end is None:
            return False
        if max_threads is not None:
            lock_owner("threads", owner_id)
            refuse_new_thread(owner_id, max_threads)
        chat_uuid = uuid.uuid4()
        copies = [_copied(v, chat_uuid, i) for i, v in enumerate(found[: end + 1])]
        last = copies[-1].columns["content"]
        now = timezone.now()
        target = StoredConversation.objects.create(
            owner_id=owner_id,
            thread_id=new_thread_id,
            chat_uuid=chat_uuid,
            title=source.title,
            preview=derive_preview([{"content": last}]) or source.preview,
            created_at=now,
            updated_at=now,
        )
        rows.insert(
            StoredMessage,
            [(target.pk, i, saved) for i, saved in enumerate(copies)],
            using=router.db_for_write(StoredMessage),
        )
        quoted: list[Any] = []
        for saved in copies:
            quoted.append(saved.columns["record"].get("wire_extra") or {})
            quoted.extend(saved.wire or [])
        if "attachments" in json.dumps(quoted):
            reconcile_conversation_attachments(target, quoted)
    return True
