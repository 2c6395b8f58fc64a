"""Serve a Pydantic-AI agent over AG-UI from Django, with durable chat history.

The store contracts and shipped stores are re-exported here from
``django_pydantic_agent.persistence``; importing the package needs no ``django.setup()``.

The re-exports are lazy (PEP 562): ``persistence`` imports Django, and the Django-free layers
(``django_pydantic_agent.memory_service``, ``django_pydantic_agent.chat_history``) must import
through this package without loading Django or asgiref. A name is resolved on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_pydantic_agent.persistence import (
        AnonymousOperationError,
        AttachmentRef,
        AttachmentStore,
        Conversation,
        ConversationChatRepository,
        ConversationMessageRepository,
        ConversationMeta,
        ConversationMetaList,
        ConversationStore,
        DeclaresAnonymousPolicy,
        DjangoSessionConversationStore,
        MemoryServiceAttachmentStore,
        MemoryServiceConversationStore,
        ModelAttachmentStore,
        ModelConversationStore,
        NullAttachmentStore,
        NullConversationStore,
        OpenedAttachment,
        PersistenceDisabledError,
        ProvidesRepositories,
        ReportsPersistence,
        ResolvesAttachmentRefs,
        ScopedConversationStore,
        StoreDataError,
        StoreError,
        StoreLimitError,
        UnstorableMessageError,
        WrapsStore,
        aensure_session_key,
        aresolve_owner_uuid,
        attachment_refs,
        conversation_repositories,
        derive_preview,
        derive_title,
        ensure_session_key,
        is_persistent,
        memory_namespace,
        memory_namespace_for_user,
        message_text,
        owner_user_uuid,
        repositories_for,
        resolve_owner_id,
        serves_anonymous,
        store_repositories,
        wrapped_stores,
    )

__version__ = "1.0.0.dev0"

__all__ = [
    "AnonymousOperationError",
    "AttachmentRef",
    "AttachmentStore",
    "Conversation",
    "ConversationChatRepository",
    "ConversationMessageRepository",
    "ConversationMeta",
    "ConversationMetaList",
    "ConversationStore",
    "DeclaresAnonymousPolicy",
    "DjangoSessionConversationStore",
    "MemoryServiceAttachmentStore",
    "MemoryServiceConversationStore",
    "ModelAttachmentStore",
    "ModelConversationStore",
    "NullAttachmentStore",
    "NullConversationStore",
    "OpenedAttachment",
    "PersistenceDisabledError",
    "ProvidesRepositories",
    "ReportsPersistence",
    "ResolvesAttachmentRefs",
    "ScopedConversationStore",
    "StoreDataError",
    "StoreError",
    "StoreLimitError",
    "UnstorableMessageError",
    "WrapsStore",
    "__version__",
    "aensure_session_key",
    "aresolve_owner_uuid",
    "attachment_refs",
    "conversation_repositories",
    "derive_preview",
    "derive_title",
    "ensure_session_key",
    "is_persistent",
    "memory_namespace",
    "memory_namespace_for_user",
    "message_text",
    "owner_user_uuid",
    "repositories_for",
    "resolve_owner_id",
    "serves_anonymous",
    "store_repositories",
    "wrapped_stores",
]

_LAZY = frozenset(__all__) - {"__version__"}


def __getattr__(name: str) -> Any:
    """Resolve a re-exported name from ``persistence`` on first access, then cache it."""
    if name in _LAZY:
        value = getattr(importlib.import_module("django_pydantic_agent.persistence"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
