"""Export and import of a whole thread tree on ``DefaultConversationStore``: the rows' side.

The document format is ``persistence.transfer``'s, which reads and writes it for every store;
this module only reads and writes rows. ``export`` reads every row of the thread (every
branch) once, loads their parents and order into the one tree (``branches.tree``) and hands it
with the rows' records and wire messages, the thread's run records and its compaction
summaries to ``export_document``. ``import_document`` writes a checked document as a new
thread in one transaction: every record under a new uuid (``records_of``), the wire copies of
the file not trusted (every row is rendered from its record), the summaries kept against the
new records.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone

from django_pydantic_agent.contrib.store import branches, rows
from django_pydantic_agent.contrib.store.links import reconcile_conversation_attachments
from django_pydantic_agent.contrib.store.quotas import MAX_KEY, lock_owner, refuse_new_thread
from django_pydantic_agent.persistence import derive_preview
from django_pydantic_agent.persistence.transactions import write_transaction
from django_pydantic_agent.persistence.transfer import (
    entries_tree,
    export_document,
    records_of,
)

__all__ = ["export", "import_document", "records_of"]


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
    found = sorted(
        StoredMessage.objects.filter(conversation_id=thread.pk),
        key=lambda r: (r.branch, r.position, r.pk),
    )
    by_uuid = {row.message_uuid: row for row in found}
    tree = branches.tree(
        branches.Node(
            r.pk, r.message_uuid, r.message_id, r.position, r.branch, r.parent_uuid, r.active
        )
        for r in found
    )
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
    from django_pydantic_agent.contrib.store.models import (
        StoredConversation,
        StoredMessage,
        StoredSummary,
    )

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
        if max_threads is not None:
            lock_owner("threads", owner_id)
            refuse_new_thread(owner_id, max_threads)
        thread = StoredConversation.objects.create(
            owner_id=owner_id,
            thread_id=thread_id,
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
