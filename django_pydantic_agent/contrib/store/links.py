"""Attachment links: which attachments a conversation's messages quote, and stripping bytes.

An attachment lives as long as a conversation quotes it. Saving a conversation (or a run
writing to it) reconciles its links (``reconcile_conversation_attachments``);
``strip_inline_binary_parts`` removes base64 file bytes from stored messages.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_pydantic_agent.contrib.store.models import StoredConversation

__all__ = [
    "BATCH",
    "INLINE_BINARY_PART_TYPES",
    "attachment_ids_in",
    "chunks",
    "reconcile_conversation_attachments",
    "strip_inline_binary_parts",
]

#: AG-UI input-content part types whose ``source`` may carry inline (``"data"``) bytes.
INLINE_BINARY_PART_TYPES = frozenset({"audio", "document", "image", "video"})

BATCH = 500
"""Ids per ``IN (...)`` query and rows per statement of the lifecycle passes."""


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


def chunks(values: list[Any], size: int = BATCH) -> Iterator[list[Any]]:
    """``values`` in lists of at most ``size``."""
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
    for ids in chunks(sorted(attachment_ids_in(messages))):
        wanted.update(
            StoredAttachment.objects.filter(
                owner_id=conversation.owner_id, attachment_id__in=ids
            ).values_list("pk", flat=True)
        )
    links = StoredConversationAttachment.objects.filter(conversation=conversation)
    current = set(links.values_list("attachment_id", flat=True))
    stale = sorted(current - wanted)
    for pks in chunks(stale):
        links.filter(attachment_id__in=pks).delete()
    missing = sorted(wanted - current)
    StoredConversationAttachment.objects.bulk_create(
        [
            StoredConversationAttachment(conversation=conversation, attachment_id=pk)
            for pk in missing
        ],
        ignore_conflicts=True,
        batch_size=BATCH,
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
