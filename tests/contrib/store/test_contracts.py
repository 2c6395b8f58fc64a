"""The shared persistence contract suites, run against the Default stores."""

from __future__ import annotations

from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from django_pydantic_agent.persistence import AttachmentStore, ConversationStore
from django_pydantic_agent.testing import (
    AttachmentStoreContract,
    ConversationStoreContract,
    ScopedConversationStoreContract,
)


class TestDefaultConversationStore(ConversationStoreContract):
    supports_full_text = True

    def make_store(self) -> ConversationStore:
        return DefaultConversationStore(allow_anonymous=True)


class TestDefaultConversationStoreClosed(ConversationStoreContract):
    supports_full_text = True
    serves_anonymous = False

    def make_store(self) -> ConversationStore:
        return DefaultConversationStore()


class TestScopedDefaultConversationStore(ScopedConversationStoreContract):
    supports_full_text = True

    def make_inner_store(self) -> ConversationStore:
        return DefaultConversationStore(allow_anonymous=True)


class TestDefaultAttachmentStore(AttachmentStoreContract):
    def make_store(self) -> AttachmentStore:
        return DefaultAttachmentStore(allow_anonymous=True)


class TestDefaultAttachmentStoreClosed(AttachmentStoreContract):
    serves_anonymous = False

    def make_store(self) -> AttachmentStore:
        return DefaultAttachmentStore()
