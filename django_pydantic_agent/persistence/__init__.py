"""Store contracts, their value types and the shipped implementations.

Importing this package needs no ``django.setup()``: it defines no models.
"""

from __future__ import annotations

from django_pydantic_agent.persistence.base import (
    AttachmentRef,
    AttachmentStore,
    ChecksItself,
    Conversation,
    ConversationMeta,
    ConversationMetaList,
    ConversationStore,
    DeclaresAnonymousPolicy,
    NamesItsUser,
    OpenedAttachment,
    ProvidesRepositories,
    ProvidesRunStore,
    RefusesOverQuota,
    ReportsPersistence,
    ResolvesAttachmentRefs,
    WrapsStore,
    attachment_refs,
    is_persistent,
    own_run_store,
    refuse_over_quota,
    repository_user_uuid,
    serves_anonymous,
    store_checks,
    store_repositories,
    wrapped_stores,
)
from django_pydantic_agent.persistence.derive import derive_preview, derive_title, message_text
from django_pydantic_agent.persistence.errors import (
    AnonymousOperationError,
    PersistenceDisabledError,
    StoreDataError,
    StoreError,
    StoreLimitError,
    UnstorableMessageError,
)
from django_pydantic_agent.persistence.features import (
    DeclaresFeatures,
    RetentionPolicy,
    StoreFeatures,
    store_features,
)
from django_pydantic_agent.persistence.listing import (
    ArchivesThreads,
    SearchesThreads,
    ThreadHit,
    ThreadPage,
    ThreadQuery,
    archive_thread,
    find_threads,
)
from django_pydantic_agent.persistence.memory_service import (
    MemoryServiceAttachmentStore,
    MemoryServiceConversationStore,
)
from django_pydantic_agent.persistence.model import ModelAttachmentStore, ModelConversationStore
from django_pydantic_agent.persistence.null import NullAttachmentStore, NullConversationStore
from django_pydantic_agent.persistence.owner import (
    aensure_session_key,
    aresolve_owner_uuid,
    ensure_session_key,
    memory_namespace,
    memory_namespace_for_user,
    owner_user_uuid,
    resolve_owner_id,
)
from django_pydantic_agent.persistence.repositories import (
    ConversationChatRepository,
    ConversationMessageRepository,
    conversation_repositories,
    repositories_for,
)
from django_pydantic_agent.persistence.scoped import ScopedConversationStore
from django_pydantic_agent.persistence.session import DjangoSessionConversationStore

__all__ = [
    "AnonymousOperationError",
    "ArchivesThreads",
    "AttachmentRef",
    "AttachmentStore",
    "ChecksItself",
    "Conversation",
    "ConversationChatRepository",
    "ConversationMessageRepository",
    "ConversationMeta",
    "ConversationMetaList",
    "ConversationStore",
    "DeclaresAnonymousPolicy",
    "DeclaresFeatures",
    "DjangoSessionConversationStore",
    "MemoryServiceAttachmentStore",
    "MemoryServiceConversationStore",
    "ModelAttachmentStore",
    "ModelConversationStore",
    "NamesItsUser",
    "NullAttachmentStore",
    "NullConversationStore",
    "OpenedAttachment",
    "PersistenceDisabledError",
    "ProvidesRepositories",
    "ProvidesRunStore",
    "RefusesOverQuota",
    "ReportsPersistence",
    "ResolvesAttachmentRefs",
    "RetentionPolicy",
    "ScopedConversationStore",
    "SearchesThreads",
    "StoreDataError",
    "StoreError",
    "StoreFeatures",
    "StoreLimitError",
    "ThreadHit",
    "ThreadPage",
    "ThreadQuery",
    "UnstorableMessageError",
    "WrapsStore",
    "aensure_session_key",
    "archive_thread",
    "aresolve_owner_uuid",
    "attachment_refs",
    "conversation_repositories",
    "derive_preview",
    "derive_title",
    "ensure_session_key",
    "find_threads",
    "is_persistent",
    "memory_namespace",
    "memory_namespace_for_user",
    "message_text",
    "own_run_store",
    "owner_user_uuid",
    "refuse_over_quota",
    "repositories_for",
    "repository_user_uuid",
    "resolve_owner_id",
    "serves_anonymous",
    "store_checks",
    "store_features",
    "store_repositories",
    "wrapped_stores",
]
