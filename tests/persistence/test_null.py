"""The Null stores: "persistence off", held to the stateless side of the contract suites."""

from __future__ import annotations

from django.test import RequestFactory

from django_pydantic_agent.persistence import (
    AttachmentStore,
    ConversationStore,
    NullAttachmentStore,
    NullConversationStore,
    PersistenceDisabledError,
    ScopedConversationStore,
    StoreError,
    is_persistent,
)
from django_pydantic_agent.testing import (
    AttachmentStoreContract,
    ConversationStoreContract,
    ScopedConversationStoreContract,
)


class TestNullConversationStoreContract(ConversationStoreContract):
    def make_store(self) -> ConversationStore:
        return NullConversationStore()


class TestScopedNullConversationStoreContract(ScopedConversationStoreContract):
    def make_inner_store(self) -> ConversationStore:
        return NullConversationStore()


class TestNullAttachmentStoreContract(AttachmentStoreContract):
    def make_store(self) -> AttachmentStore:
        return NullAttachmentStore()


def test_null_stores_report_persistence_off() -> None:
    assert is_persistent(NullConversationStore()) is False
    assert is_persistent(NullAttachmentStore()) is False
    assert is_persistent(ScopedConversationStore(NullConversationStore(), scope="x")) is False
    assert repr(NullConversationStore()) == "NullConversationStore()"
    assert repr(NullAttachmentStore()) == "NullAttachmentStore()"


def test_disabled_uploads_error_is_a_store_error_and_not_implemented() -> None:
    # Code written against the predecessor caught NotImplementedError; it still works.
    assert issubclass(PersistenceDisabledError, StoreError)
    assert issubclass(PersistenceDisabledError, NotImplementedError)


async def test_null_stores_need_no_database() -> None:
    request = RequestFactory().get("/")
    store = NullConversationStore()
    assert await store.list(request=request, limit=5) == []
    assert await NullAttachmentStore().open("x", request=request) is None
