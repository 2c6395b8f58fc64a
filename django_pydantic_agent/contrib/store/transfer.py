"""A thread's rows copied on ``DefaultConversationStore``: forked, exported and imported.

``fork`` copies the active rows up to a message into a new thread (``rows.copy_rows``: one
``SELECT``, one ``executemany``), each under a new uuid, a message still streaming as
``interrupted`` (a fork is a snapshot), with the attachments it quotes linked and the newest
summary that stands for copied messages only. ``export`` loads every row into the one tree
(``branches.tree``) for ``persistence.transfer.export_document``, which writes the format for
every store; ``import_document`` writes a checked document as a new thread in one
transaction, every row rendered from its record (the file's wire copies are not trusted).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from django.db import router
from django.utils import timezone

from django_pydantic_agent.contrib.store import branches, rows
from django_pydantic_agent.contrib.store.links import reconcile_conversation_attachments
from django_pydantic_agent.contrib.store.quotas import MAX_KEY, lock_owner, refuse_new_thread
from django_pydantic_agent.persistence import derive_preview
from django_pydantic_agent.persistence.derive import fork_title
from django_pydantic_agent.persistence.transactions import write_transaction
from django_pydantic_agent.persistence.transfer import (
    entries_tree,
    export_document,
    records_of,
)

__all__ = ["export", "fork", "import_document"]


def _new_thread(owner_id: str, thread_id: str, max_threads: int | None, **fields: Any) -> Any:
    """Create the owner's ``StoredConversation`` ``thread_id`` (``StoreLimitError`` over
    ``max_threads``), inside the caller's transaction."""
    from django_pydantic_agent.contrib.store.models import StoredConversation

    if max_threads is not None:
        lock_owner("threads", owner_id)
        refuse_new_thread(owner_id, max_threads)
    return StoredConversation.objects.create(owner_id=owner_id, thread_id=thread_id, **fields)


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
        now = timezone.now()
        target = _new_thread(
            owner_id,
            new_thread_id,
            max_threads,
            title=fork_title(source.title),
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


def export(owner_id: str, thread_id: str) -> dict[str, Any] | None:
    """The owner's thread as a version-1 document, or ``None``."""
    from django_pydantic_agent.chat_history import Message
    from django_pydantic_agent.contrib.store.models import (
        StoredAgentRun,
        StoredConversation,
        StoredMessage,
        StoredSummary,
    )

    if len(thread_id) > MAX_KEY:
        return None
    thread = StoredConversation.objects.filter(owner_id=owner_id, thread_id=thread_id).first()
    if thread is None:
        return None
    found = list(
        StoredMessage.objects.filter(conversation_id=thread.pk).order_by("branch", "position", "pk")
    )
    by_uuid = {row.message_uuid: row for row in found}
    tree = branches.tree(found)
    records = {r.message_uuid: rows.record_of(Message, r, thread.chat_uuid) for r in found}
    runs = StoredAgentRun.objects.filter(owner_id=owner_id, thread_id=thread_id).order_by(
        "started_at", "pk"
    )
    summaries = StoredSummary.objects.filter(conversation_id=thread.pk).order_by("id")
    return export_document(
        tree,
        title=thread.title,
        order=tree.depth_first(),
        record=records.__getitem__,
        wire=lambda key: (
            rows.saved_wire(by_uuid[key])
            if by_uuid[key].wire is not None
            else rows.render(records[key])
        ),
        times={
            "createdAt": thread.created_at.isoformat(),
            "updatedAt": thread.updated_at.isoformat(),
        },
        runs=[
            {
                "runId": run.run_id,
                "status": run.status,
                "usage": run.usage,
                "startedAt": run.started_at.isoformat(),
                "finishedAt": run.finished_at.isoformat() if run.finished_at else None,
                "error": run.error,
            }
            for run in runs
        ],
        summaries=[
            (
                summary.through_id,
                {
                    "text": summary.text,
                    "createdAt": summary.created_at.isoformat(),
                    "runId": summary.run_id,
                },
            )
            for summary in summaries
        ],
    )


def _when(value: str | None) -> datetime:
    """An exported ``createdAt``, or now when it is missing or not a date."""
    try:
        when = datetime.fromisoformat(value) if value else None
    except ValueError:
        when = None
    if when is None:
        return timezone.now()
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def import_document(
    owner_id: str,
    thread_id: str,
    document: dict[str, Any],
    max_threads: int | None,
) -> None:
    """Create the owner's thread ``thread_id`` from a checked document, in one transaction.

    Raises ``ImportProblem`` for a record that is not a message (nothing written) and
    ``StoreLimitError`` over ``max_threads``.
    """
    from django_pydantic_agent.contrib.store.models import StoredMessage, StoredSummary

    chat_uuid = uuid.uuid4()
    records = records_of(document, chat_uuid)
    tree = entries_tree(document)
    depth: list[int] = []
    branch_of: list[int] = []
    follows: list[uuid.UUID | None] = []
    highest = 0
    for index in range(len(records)):
        parent = tree.parent[index]
        depth.append(0 if parent is None else depth[parent] + 1)
        follows.append(None if parent is None else records[parent].message_uuid)
        if tree.siblings(index)[0] != index:  # a later sibling starts a branch of its own
            highest += 1
            branch_of.append(highest)
        else:
            branch_of.append(0 if parent is None else branch_of[parent])
    active, on = tree.active, set(tree.active)
    with write_transaction():
        thread = _new_thread(
            owner_id,
            thread_id,
            max_threads,
            chat_uuid=chat_uuid,
            title=document.get("title") or "",
            preview=derive_preview({"content": records[i].content} for i in active),
            branches=highest,
            active_branch=branch_of[active[-1]],
        )
        StoredMessage.objects.bulk_create(
            [
                rows.new_row(
                    StoredMessage,
                    thread.pk,
                    depth[i],
                    record,
                    active=i in on,
                    branch=branch_of[i],
                    parent_uuid=follows[i],
                )
                for i, record in enumerate(records)
            ],
            batch_size=500,
        )
        StoredSummary.objects.bulk_create(
            StoredSummary(
                conversation_id=thread.pk,
                through_id=records[summary["through"]].message_uuid,
                text=summary["text"],
                run_id=summary.get("runId", "")[:255],
                created_at=_when(summary.get("createdAt")),
            )
            for summary in document.get("summaries") or ()
        )
        quoted = [record.wire_extra or {} for record in records]
        reconcile_conversation_attachments(thread, quoted)
