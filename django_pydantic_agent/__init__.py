"""Serve a Pydantic-AI agent over AG-UI from Django, with durable chat history.

The store contracts and shipped stores are re-exported here from
``django_pydantic_agent.persistence``; importing the package needs no ``django.setup()``.
"""

from __future__ import annotations

from django_pydantic_agent.persistence import (
    AnonymousOperationError,
    AttachmentRef,
    AttachmentStore,
    Conversation,
    ConversationMeta,
    ConversationMetaList,
    ConversationStore,
    DjangoSessionConversationStore,
    ModelAttachmentStore,
    ModelConversationStore,
    NullAttachmentStore,
    NullConversationStore,
    OpenedAttachment,
    PersistenceDisabledError,
    ScopedConversationStore,
    StoreDataError,
    StoreError,
    StoreLimitError,
    aensure_session_key,
    derive_preview,
    derive_title,
    ensure_session_key,
    is_persistent,
    memory_namespace,
    memory_namespace_for_user,
    message_text,
    resolve_owner_id,
)

__version__ = "1.0.0.dev0"

__all__ = [
    "AnonymousOperationError",
    "AttachmentRef",
    "AttachmentStore",
    "Conversation",
    "ConversationMeta",
    "ConversationMetaList",
    "ConversationStore",
    "DjangoSessionConversationStore",
    "ModelAttachmentStore",
    "ModelConversationStore",
    "NullAttachmentStore",
    "NullConversationStore",
    "OpenedAttachment",
    "PersistenceDisabledError",
    "ScopedConversationStore",
    "StoreDataError",
    "StoreError",
    "StoreLimitError",
    "__version__",
    "aensure_session_key",
    "derive_preview",
    "derive_title",
    "ensure_session_key",
    "is_persistent",
    "memory_namespace",
    "memory_namespace_for_user",
    "message_text",
    "resolve_owner_id",
]
