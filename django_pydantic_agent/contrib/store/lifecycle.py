"""Attachment lifecycle, in one place to import: links (``links``) and deletion (``deletion``)."""

from __future__ import annotations

from django_pydantic_agent.contrib.store.deletion import (
    AttachmentDeletion,
    ConversationDeletion,
    delete_attachments,
    delete_conversations,
    preview_attachment_deletion,
)
from django_pydantic_agent.contrib.store.links import (
    INLINE_BINARY_PART_TYPES,
    attachment_ids_in,
    reconcile_conversation_attachments,
    strip_inline_binary_parts,
)

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
