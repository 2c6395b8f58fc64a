"""The generic adapter: the chat-history contract over stores that know only load/save."""

from __future__ import annotations

from typing import ClassVar

import pytest

from django_pydantic_agent.persistence import (
    ConversationStore,
    DjangoSessionConversationStore,
    ScopedConversationStore,
)
from django_pydantic_agent.persistence.repositories import bind_conversation_repositories
from django_pydantic_agent.testing import StoreActors
from django_pydantic_agent.testing.chat_history import (
    OTHER_USER,
    USER,
    ChatHistoryContract,
    OpenRepositories,
)
from tests.persistence.owners import routed_pairs
from tests.testapp.stores import ThreadStore


class _AdapterContract(ChatHistoryContract):
    """Alice acts as ``USER`` and Bob as ``OTHER_USER``, each through their own pair."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [
        pytest.mark.asyncio,
        pytest.mark.django_db(transaction=True),
    ]

    def make_store(self) -> ConversationStore:
        raise NotImplementedError

    @pytest.fixture
    def open_repositories(self, actors: StoreActors) -> OpenRepositories:
        store = self.make_store()

        def open_pair():  # type: ignore[no-untyped-def]
            return routed_pairs(
                {
                    USER: bind_conversation_repositories(
                        store, request=actors.request("alice"), user_uuid=USER
                    ),
                    OTHER_USER: bind_conversation_repositories(
                        store, request=actors.request("bob"), user_uuid=OTHER_USER
                    ),
                }
            )

        return open_pair


class TestAdapterOverTheSessionStore(_AdapterContract):
    def make_store(self) -> ConversationStore:
        return DjangoSessionConversationStore(max_bytes=8 * 1024 * 1024)


class TestAdapterOverAModelStore(_AdapterContract):
    def make_store(self) -> ConversationStore:
        return ThreadStore(allow_anonymous=True)


class TestAdapterOverScopedSessionStore(_AdapterContract):
    def make_store(self) -> ConversationStore:
        return ScopedConversationStore(
            DjangoSessionConversationStore(max_bytes=8 * 1024 * 1024), scope="admin"
        )


class TestAdapterOverScopedModelStore(_AdapterContract):
    def make_store(self) -> ConversationStore:
        return ScopedConversationStore(ThreadStore(allow_anonymous=True), scope="admin")
