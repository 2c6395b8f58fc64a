"""Forking a thread: its active branch, up to a message, copied into a new thread.

``fork`` copies the message rows (``rows.copy_rows``: one ``SELECT``, one ``executemany``,
the JSON as the text the database holds), each under a new uuid of the new thread (its tool
calls' and reasoning steps' too), so the two threads share no record. A message still
streaming when the fork is taken is copied as ``interrupted``: the fork is a snapshot, the
run goes on in the source.
The attachments the copied messages quote are linked to the new thread, so they stay
readable (and kept) from both. The newest compaction summary that stands for copied messages
only is copied too (through the copy of its last message), so the fork's next run starts from
it as the source's would.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import router
from django.utils import timezone

from django_pydantic_agent.contrib.store import rows
from django_pydantic_agent.contrib.store.links import reconcile_conversation_attachments
from django_pydantic_agent.contrib.store.quotas import MAX_KEY, lock_owner, refuse_new_thread
from django_pydantic_agent.persistence import derive_preview
from django_pydantic_agent.persistence.transactions import write_transaction

__all__ = ["fork"]


def _end(source: Any, message_id: str) -> int | None:
    """The position of the active row holding ``message_id`` (as its record's id, else as one
    of the wire messages it renders as: a tool result, a reasoning step), or ``None``."""
    from django_pydantic_agent.chat_history import Message
    from django_pydantic_agent.contrib.store.models import StoredMessage

    active = StoredMessage.objects.filter(conversation_id=source.pk, active=True)
    found = active.filter(message_id=message_id).values_list("position", flat=True).first()
    if found is not None:
        return found
    for row in active.order_by("position"):
        wire = (
            rows.saved_wire(row)
            if row.wire is not None
            else rows.render(rows.record_of(Message, row, source.chat_uuid))
        )
        if any(isinstance(m, dict) and m.get("id") == message_id for m in wire):
            return row.position
    return None


def _copy_summary(source: Any, target: Any, last: int) -> None:
    """Copy the source's newest summary standing for active rows up to position ``last``
    (``copy_rows`` names each copy ``uuid5(target chat, source uuid)``)."""
    from django_pydantic_agent.contrib.store.models import StoredSummary

    summary = (
        StoredSummary.objects.filter(
            conversation_id=source.pk, through__active=True, through__position__lte=last
        )
        .order_by("-id")
        .first()
    )
    if summary is not None:
        StoredSummary.objects.create(
            conversation_id=target.pk,
            through_id=uuid.uuid5(target.chat_uuid, str(summary.through_id)),
            text=summary.text,
            run_id=summary.run_id,
            created_at=summary.created_at,
        )


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
    with write_transaction():
        source = (
            StoredConversation.objects.select_for_update()
            .filter(owner_id=owner_id, thread_id=thread_id)
            .first()
        )
        if source is None:
            return False
        last = _end(source, message_id)
        if last is None:
            return False
        if max_threads is not None:
            lock_owner("threads", owner_id)
            refuse_new_thread(owner_id, max_threads)
        now = timezone.now()
        target = StoredConversation.objects.create(
            owner_id=owner_id,
            thread_id=new_thread_id,
            title=source.title,
            created_at=now,
            updated_at=now,
        )
        copied = rows.copy_rows(
            StoredMessage,
            source.pk,
            target.pk,
            target.chat_uuid,
            last,
            using=router.db_for_write(StoredMessage),
        )
        preview = (
            StoredMessage.objects.filter(conversation_id=target.pk)
            .exclude(content="")
            .order_by("-position")
            .values_list("content", flat=True)
            .first()
        )
        StoredConversation.objects.filter(pk=target.pk).update(
            preview=derive_preview([{"content": preview or ""}]) or source.preview
        )
        _copy_summary(source, target, last)
        if any("attachments" in f"{wire}{record}" for wire, record in copied):
            quoted: list[Any] = []
            for wire, record in copied:
                quoted.append(json.loads(record or "{}").get("wire_extra") or {})
                saved = json.loads(wire) if wire else []
                quoted.extend(saved if isinstance(saved, list) else [])  # PLAIN_WIRE quotes none
            reconcile_conversation_attachments(target, quoted)
    return True
