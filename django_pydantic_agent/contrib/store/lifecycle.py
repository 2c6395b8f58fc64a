"""Attachment lifecycle: linking attachments to conversations, deleting them, stripping bytes.

An attachment lives as long as a conversation quotes it. Saving a conversation reconciles its
links (``reconcile_conversation_attachments``); deleting a conversation, or the
``agent_store_prune_*`` commands, delete attachments through ``delete_attachments``, which
removes a blob only when no remaining row names it (rows of one owner share blobs after
deduplication). ``strip_inline_binary_parts`` removes base64 file bytes from stored messages.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

if TYPE_CHECKING:
    from django.core.files.storage import Storage
    from django.db.models import QuerySet

    from django_pydantic_agent.contrib.store.models import StoredAttachment, StoredConversation

__all__ = [
    "INLINE_BINARY_PART_TYPES",
    "AttachmentDeletion",
    "ConversationDeletion",
    "attachment_ids_in",
    "delete_attachments",
    "delete_conversations",
    "preview_attachment_deletion",
    "reconcile_conversation_attachments",
    "strip_inline_binary_parts",
]

logger = logging.getLogger("django_pydantic_agent.contrib.store")

#: AG-UI input-content part types whose ``source`` may carry inline (``"data"``) bytes.
INLINE_BINARY_PART_TYPES = frozenset({"audio", "document", "image", "video"})

_BATCH = 500


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


def _ref_id(entry: Any) -> uuid.UUID | None:
    """Return the attachment UUID an ``attachments`` entry names, or ``None``."""
    value = entry.get("id") if isinstance(entry, Mapping) else entry
    if not isinstance(value, str):
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _ref_lists(message: Mapping[str, Any]) -> tuple[Any, ...]:
    metadata = message.get("metadata")
    if isinstance(metadata, Mapping):
        return (message.get("attachments"), metadata.get("attachments"))
    return (message.get("attachments"),)


def attachment_ids_in(messages: Any) -> set[uuid.UUID]:
    """Return the attachment ids quoted by ``messages``; total, never raises.

    Reads each message's top-level ``attachments`` list and its ``metadata.attachments`` list
    (newer AG-UI clients put refs there); an entry is a ref mapping with a string ``id`` or a
    bare id string. Anything else (a non-list, a non-mapping message, an id that is not a UUID)
    contributes nothing.
    """
    found: set[uuid.UUID] = set()
    if not isinstance(messages, Iterable) or isinstance(messages, str | bytes | Mapping):
        return found
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        for refs in _ref_lists(message):
            if isinstance(refs, list):
                for entry in refs:
                    ref = _ref_id(entry)
                    if ref is not None:
                        found.add(ref)
    return found


def _chunks(values: list[Any], size: int = _BATCH) -> Iterator[list[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def reconcile_conversation_attachments(
    conversation: StoredConversation, messages: Iterable[Any]
) -> None:
    """Point ``conversation`` at exactly the attachments its ``messages`` quote.

    Ids resolve only against attachments of the conversation's own owner, so a guessed or
    copied id of another owner links nothing. Links for refs no longer present are removed;
    the attachments themselves are left for ``agent_store_prune_attachments``. Never raises on
    malformed input: an unusable entry, or an id naming a deleted attachment, is no reference.
    """
    from django_pydantic_agent.contrib.store.models import (
        StoredAttachment,
        StoredConversationAttachment,
    )

    wanted: set[int] = set()
    for ids in _chunks(sorted(attachment_ids_in(messages))):
        wanted.update(
            StoredAttachment.objects.filter(
                owner_id=conversation.owner_id, attachment_id__in=ids
            ).values_list("pk", flat=True)
        )
    links = StoredConversationAttachment.objects.filter(conversation=conversation)
    current = set(links.values_list("attachment_id", flat=True))
    stale = sorted(current - wanted)
    for pks in _chunks(stale):
        links.filter(attachment_id__in=pks).delete()
    missing = sorted(wanted - current)
    StoredConversationAttachment.objects.bulk_create(
        [
            StoredConversationAttachment(conversation=conversation, attachment_id=pk)
            for pk in missing
        ],
        ignore_conflicts=True,
        batch_size=_BATCH,
    )


def _strip_message(message: Any) -> tuple[Any, bool]:
    if not isinstance(message, dict):
        return message, False
    content = message.get("content")
    if not isinstance(content, list):
        return message, False
    kept = [part for part in content if not _is_inline_binary(part)]
    if len(kept) == len(content):
        return message, False
    return {**message, "content": kept}, True


def _is_inline_binary(part: Any) -> bool:
    if not isinstance(part, dict):
        return False
    kind = part.get("type")
    if kind == "binary":
        return part.get("data") is not None
    if kind in INLINE_BINARY_PART_TYPES:
        source = part.get("source")
        return isinstance(source, dict) and source.get("type") == "data"
    return False


def strip_inline_binary_parts(messages: Any) -> tuple[Any, bool]:
    """Return ``messages`` without inline file bytes, and whether anything was removed.

    Walks plain JSON: from each message whose ``content`` is a list it drops parts of type
    ``audio``/``document``/``image``/``video`` whose ``source.type`` is ``"data"`` and
    ``binary`` parts carrying ``data``. Everything else (ids, ``attachments`` refs, URL
    sources) is kept; a message left with no parts keeps its place with an empty list, so its
    id survives. A non-list ``messages`` is handed back unchanged with ``False``. The input is
    not mutated.
    """
    if not isinstance(messages, list):
        return messages, False
    changed = False
    result: list[Any] = []
    for message in messages:
        stripped, was_changed = _strip_message(message)
        result.append(stripped)
        changed = changed or was_changed
    return (result, True) if changed else (messages, False)


def _name_batches(rows: QuerySet[StoredAttachment]) -> Iterator[list[str]]:
    """Yield the distinct non-empty blob names of ``rows`` in sorted batches (keyset paging)."""
    last = ""
    while True:
        names = list(
            rows.filter(file__gt=last)
            .order_by("file")
            .values_list("file", flat=True)
            .distinct()[:_BATCH]
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
            with transaction.atomic():
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
    with transaction.atomic():
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
        pks = list(rows.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:_BATCH])
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
