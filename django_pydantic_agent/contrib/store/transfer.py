"""Export and import of a whole thread tree on ``DefaultConversationStore``.

The document format is ``persistence.transfer``'s.

``export`` reads every row of the thread (every branch) once and the thread's run records:
each message's record, its ``wire`` (the saved messages, or the record rendered), its parent's
index and whether it is active, and the thread's compaction summaries (each naming the index
of the last message it stands for). ``import_document`` writes a checked document as a new thread
in one transaction: every record under a new uuid, the wire copies of the file not trusted
(every row is rendered from its record), a running message stopped as ``interrupted``, the
summaries kept against the new records.
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
    FORMAT,
    IDENTITY_KEYS,
    VERSION,
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
    found = list(StoredMessage.objects.filter(conversation_id=thread.pk))
    by_uuid = {row.message_uuid: row for row in found}
    tree = branches.Tree(
        branches.Node(
            r.pk, r.message_uuid, r.message_id, r.position, r.branch, r.parent_uuid, r.active
        )
        for r in sorted(found, key=lambda r: (r.branch, r.position, r.pk))
    )
    order: list[uuid.UUID] = []
    stack = [n.message_uuid for n in reversed(tree.children.get(None, []))]
    while stack:  # depth first, parents before children, siblings oldest branch first
        current = stack.pop()
        order.append(current)
        stack.extend(n.message_uuid for n in reversed(tree.children.get(current, [])))
    index = {message_uuid: i for i, message_uuid in enumerate(order)}
    messages = []
    for message_uuid in order:
        row = by_uuid[message_uuid]
        record = rows.record_of(Message, row, thread.chat_uuid)
        parent = tree.parent[message_uuid]
        messages.append(
            {
                "parent": None if parent is None else index[parent],
                "active": row.active,
                "record": record.model_dump(mode="json", exclude=set(IDENTITY_KEYS)),
                "wire": rows.saved_wire(row) if row.wire is not None else rows.render(record),
            }
        )
    runs = StoredAgentRun.objects.filter(owner_id=owner_id, thread_id=thread_id).order_by(
        "started_at", "pk"
    )
    summaries = StoredSummary.objects.filter(conversation_id=thread.pk).order_by("id")
    return {
        "format": FORMAT,
        "version": VERSION,
        "title": thread.title,
        "createdAt": thread.created_at.isoformat(),
        "updatedAt": thread.updated_at.isoformat(),
        "messages": messages,
        "runs": [
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
        "summaries": [
            {
                "through": index[summary.through_id],
                "text": summary.text,
                "createdAt": summary.created_at.isoformat(),
                "runId": summary.run_id,
            }
            for summary in summaries
            if summary.through_id in index
        ],
    }


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
    entries = document["messages"]
    depth: list[int] = []
    branch_of: list[int] = []
    first_child: set[int | None] = set()
    highest = 0
    for entry in entries:
        parent = entry["parent"]
        depth.append(0 if parent is None else depth[parent] + 1)
        if parent is not None and parent not in first_child:
            first_child.add(parent)
            branch_of.append(branch_of[parent])
        elif parent is None and None not in first_child:
            first_child.add(None)
            branch_of.append(0)
        else:
            highest += 1
            branch_of.append(highest)
    active = [i for i, entry in enumerate(entries) if entry["active"]]
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
                    active=entries[i]["active"],
                    branch=branch_of[i],
                    parent_uuid=(
                        None
                        if entries[i]["parent"] is None
                        else records[entries[i]["parent"]].message_uuid
                    ),
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
