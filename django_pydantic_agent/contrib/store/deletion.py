"""Deleting attachments and conversations, blobs included, in batches.

``delete_attachments`` removes a blob only when no remaining row names it (rows of one owner
share blobs after deduplication); ``delete_conversations`` takes along the attachments only
the deleted conversations quoted, and their harness rows. Used by the stores, the
``agent_store_prune_*`` commands and the admin.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

if TYPE_CHECKING:
    from django.core.files.storage import Storage
    from django.db.models import QuerySet

    from django_pydantic_agent.contrib.store.models import StoredAttachment, StoredConversation

from django_pydantic_agent.contrib.store.links import BATCH
from django_pydantic_agent.persistence.transactions import write_transaction

__all__ = [
    "AttachmentDeletion",
    "ConversationDeletion",
    "delete_attachments",
    "delete_conversations",
    "preview_attachment_deletion",
]

logger = logging.getLogger("django_pydantic_agent.contrib.store")


@dataclass(frozen=True, kw_only=True)
class AttachmentDeletion:
    """What one attachment deletion pass removed (or, for a preview, would remove).

    ``rows`` counts attachment rows, ``blobs`` the stored files, ``bytes_freed`` the declared
    size of each removed blob, counted once per blob. The counts differ because of
    deduplication: deleting one of two rows sharing a file removes a row and no blob. Sizes come
    from the rows, not from the storage backend, so ``bytes_freed`` estimates what a remote store
    gives back.
    """

    rows: int = 0
    blobs: int = 0
    bytes_freed: int = 0

    def __add__(self, other: AttachmentDeletion) -> AttachmentDeletion:
        return AttachmentDeletion(
            rows=self.rows + other.rows,
            blobs=self.blobs + other.blobs,
            bytes_freed=self.bytes_freed + other.bytes_freed,
        )


def _name_batches(rows: QuerySet[StoredAttachment]) -> Iterator[list[str]]:
    """Yield the distinct non-empty blob names of ``rows`` in sorted batches (keyset paging)."""
    last = ""
    while True:
        names = list(
            rows.filter(file__gt=last)
            .order_by("file")
            .values_list("file", flat=True)
            .distinct()[:BATCH]
        )
        if not names:
            return
        yield names
        last = names[-1]


def _surviving_names(
    names: list[str], excluded_pks: list[int], also_gone: QuerySet[StoredAttachment] | None = None
) -> set[str]:
    from django_pydantic_agent.contrib.store.models import StoredAttachment

    survivors = StoredAttachment.objects.filter(file__in=names).exclude(pk__in=excluded_pks)
    if also_gone is not None:
        survivors = survivors.exclude(pk__in=also_gone.values("pk"))
    return set(survivors.values_list("file", flat=True).distinct())


def _delete_unreferenced_blobs(storage: Storage, names: list[str]) -> None:
    """Delete the blobs of ``names`` that no row names any more, after the commit.

    Checked again here, in one query, because an upload may have adopted a blob (dedup)
    since the deleting transaction looked. A blob that fails to delete is logged and the
    others still go.
    """
    from django_pydantic_agent.contrib.store.models import StoredAttachment

    adopted = set(
        StoredAttachment.objects.filter(file__in=names).values_list("file", flat=True).distinct()
    )
    for name in names:
        if name in adopted:
            continue
        try:
            storage.delete(name)
        except Exception:
            logger.exception("Could not delete blob %r; it is no longer referenced.", name)


def _pass(
    rows: QuerySet[StoredAttachment],
    *,
    apply: bool,
    on_batch: Callable[[int], None] | None,
    also_gone: QuerySet[StoredAttachment] | None = None,
) -> AttachmentDeletion:
    from django_pydantic_agent.contrib.store.models import resolve_attachment_storage

    total = AttachmentDeletion()
    # Rows with no blob at all are counted (and deleted) on their own.
    blobless = rows.filter(file="")
    total += AttachmentDeletion(rows=blobless.delete()[0] if apply else blobless.count())
    for names in _name_batches(rows):
        selected = list(rows.filter(file__in=names).values_list("pk", "file", "size"))
        pks = [pk for pk, _, _ in selected]
        sizes: dict[str, int] = {}
        for _, name, size in selected:
            sizes.setdefault(name, size)
        if apply:
            with write_transaction():
                deleted = rows.filter(pk__in=pks).delete()[0]
                gone = sorted(set(sizes) - _surviving_names(names, []))
                if gone:
                    transaction.on_commit(
                        partial(_delete_unreferenced_blobs, resolve_attachment_storage(), gone),
                        robust=True,
                    )
        else:
            deleted = len(pks)
            gone = sorted(set(sizes) - _surviving_names(names, pks, also_gone))
        total += AttachmentDeletion(
            rows=deleted, blobs=len(gone), bytes_freed=sum(sizes[name] for name in gone)
        )
        if on_batch is not None:
            on_batch(len(pks))
    return total


def delete_attachments(
    rows: QuerySet[StoredAttachment], *, on_batch: Callable[[int], None] | None = None
) -> AttachmentDeletion:
    """Delete the attachment rows of ``rows`` and every blob no remaining row names.

    Works in batches of blob names, so memory stays constant however many rows match; the
    queryset's filter is re-applied at delete time, so a row that stopped matching meanwhile
    (say, an orphan that got linked) survives. Blobs are deleted after the batch's transaction
    commits. Blob identity is the stored file name, never the hash. ``on_batch`` is called
    with the number of rows each batch handled (for progress reporting).
    """
    return _pass(rows, apply=True, on_batch=on_batch)


def preview_attachment_deletion(
    rows: QuerySet[StoredAttachment],
    *,
    on_batch: Callable[[int], None] | None = None,
    also_gone: QuerySet[StoredAttachment] | None = None,
) -> AttachmentDeletion:
    """Return what ``delete_attachments(rows)`` would remove, deleting nothing.

    A blob counts as freed only if every row naming it is in ``rows`` or in ``also_gone``
    (rows an earlier batch of the same dry run would already have deleted).
    """
    return _pass(rows, apply=False, on_batch=on_batch, also_gone=also_gone)


@dataclass(frozen=True, kw_only=True)
class ConversationDeletion:
    """What one conversation deletion pass removed (or would remove).

    ``conversations`` and ``messages`` count rows; ``attachments`` is the deletion of the
    attachments that no remaining conversation quotes any more. ``runs``, ``step_events``,
    ``snapshots`` and ``tool_effects`` count the harness ``StepStore`` rows of the same owner
    and conversation id (snapshots hold a copy of the whole conversation).
    """

    conversations: int = 0
    messages: int = 0
    attachments: AttachmentDeletion = AttachmentDeletion()
    runs: int = 0
    step_events: int = 0
    snapshots: int = 0
    tool_effects: int = 0

    def __add__(self, other: ConversationDeletion) -> ConversationDeletion:
        return ConversationDeletion(
            conversations=self.conversations + other.conversations,
            messages=self.messages + other.messages,
            attachments=self.attachments + other.attachments,
            runs=self.runs + other.runs,
            step_events=self.step_events + other.step_events,
            snapshots=self.snapshots + other.snapshots,
            tool_effects=self.tool_effects + other.tool_effects,
        )


def _harness_rows(pks: list[int]) -> dict[str, QuerySet[Any]]:
    """The harness rows of the conversations ``pks``: same owner, ``conversation_id`` = thread.

    Tool effects and snapshot idempotency keys carry no conversation id; they go with the
    runs they belong to. Evaluate (count or delete) them before the runs.
    """
    from django_pydantic_agent.contrib.store.models import (
        StoredConversation,
        StoredRun,
        StoredSnapshot,
        StoredSnapshotKey,
        StoredStepEvent,
        StoredToolEffect,
    )

    owners = sorted(
        set(StoredConversation.objects.filter(pk__in=pks).values_list("owner_id", flat=True))
    )
    threads = StoredConversation.objects.filter(
        pk__in=pks, owner_id=OuterRef("owner_id"), thread_id=OuterRef("conversation_id")
    )
    thread = Q(owner_id__in=owners) & Q(Exists(threads))
    runs = StoredRun.objects.filter(thread)
    of_runs = Exists(runs.filter(owner_id=OuterRef("owner_id"), run_id=OuterRef("run_id")))
    return {
        "tool_effects": StoredToolEffect.objects.filter(owner_id__in=owners).filter(of_runs),
        "snapshot_keys": StoredSnapshotKey.objects.filter(owner_id__in=owners).filter(of_runs),
        "step_events": StoredStepEvent.objects.filter(thread),
        "snapshots": StoredSnapshot.objects.filter(thread),
        "runs": runs,
    }


def _conversation_batch(
    rows: QuerySet[StoredConversation], pks: list[int], *, apply: bool
) -> ConversationDeletion:
    from django_pydantic_agent.contrib.store.models import (
        StoredAttachment,
        StoredConversation,
        StoredConversationAttachment,
        StoredMessage,
    )

    messages = StoredMessage.objects.filter(conversation_id__in=pks).count()
    linked = list(
        StoredConversationAttachment.objects.filter(conversation_id__in=pks)
        .values_list("attachment_id", flat=True)
        .distinct()
    )
    if not apply:
        # A real run deletes an attachment in the batch that removes its last quoting
        # conversation: count it there, i.e. when nothing outside the conversations deleted
        # so far (this batch and earlier ones, in pk order) quotes it. Its blob counts as
        # freed when every row naming it is deleted by then (``also_gone``), even if those
        # rows went in earlier batches.
        deleted_so_far = rows.filter(pk__lte=pks[-1]).values("pk")
        kept_elsewhere = StoredConversationAttachment.objects.filter(
            attachment_id__in=linked
        ).exclude(conversation_id__in=deleted_so_far)
        orphaned = StoredAttachment.objects.filter(pk__in=linked).exclude(
            pk__in=kept_elsewhere.values("attachment_id")
        )
        linked_so_far = StoredConversationAttachment.objects.filter(
            conversation_id__in=deleted_so_far
        ).values("attachment_id")
        orphaned_so_far = StoredAttachment.objects.filter(pk__in=linked_so_far).exclude(
            pk__in=StoredConversationAttachment.objects.filter(attachment_id__in=linked_so_far)
            .exclude(conversation_id__in=deleted_so_far)
            .values("attachment_id")
        )
        harness = {name: qs.count() for name, qs in _harness_rows(pks).items()}
        return ConversationDeletion(
            conversations=len(pks),
            messages=messages,
            attachments=preview_attachment_deletion(orphaned, also_gone=orphaned_so_far),
            runs=harness.get("runs", 0),
            step_events=harness.get("step_events", 0),
            snapshots=harness.get("snapshots", 0),
            tool_effects=harness.get("tool_effects", 0),
        )
    with write_transaction():
        harness = {name: qs.delete()[0] for name, qs in _harness_rows(pks).items()}
        deleted = StoredConversation.objects.filter(pk__in=pks).delete()[1]
        attachments = delete_attachments(
            StoredAttachment.objects.filter(pk__in=linked, conversation_links__isnull=True)
        )
    return ConversationDeletion(
        conversations=deleted.get(StoredConversation._meta.label, 0),
        messages=deleted.get(StoredMessage._meta.label, 0),
        attachments=attachments,
        runs=harness.get("runs", 0),
        step_events=harness.get("step_events", 0),
        snapshots=harness.get("snapshots", 0),
        tool_effects=harness.get("tool_effects", 0),
    )


def _conversations(
    rows: QuerySet[StoredConversation], *, apply: bool, on_batch: Callable[[int], None] | None
) -> ConversationDeletion:
    total = ConversationDeletion()
    last = 0
    while True:
        pks = list(rows.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:BATCH])
        if not pks:
            return total
        total += _conversation_batch(rows, pks, apply=apply)
        if on_batch is not None:
            on_batch(len(pks))
        last = pks[-1]


def delete_conversations(
    rows: QuerySet[StoredConversation],
    *,
    dry_run: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> ConversationDeletion:
    """Delete the conversations of ``rows``, their messages, the attachments they orphan and
    the harness step rows (runs, events, snapshots, tool effects) of the same threads.

    Batches by primary key (constant memory); each batch is one transaction. An attachment is
    deleted only if no conversation outside the deleted ones quotes it; attachments that were
    already orphans are left to ``agent_store_prune_attachments``. With ``dry_run`` nothing is
    deleted and the counts say what would be. ``on_batch`` is called with each batch's size.
    """
    return _conversations(rows, apply=not dry_run, on_batch=on_batch)
