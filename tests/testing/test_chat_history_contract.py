"""The public chat-history contract, run against the in-memory and Memory Service repositories.

The Memory Service leg talks real HTTP to the emulator served by ``live_server``, on whatever
database the suite runs on (SQLite, or PostgreSQL through ``DATABASE_URL``). Every fresh pair
gets its own ``ChatSessionRegistry``, so reads go through cold caches, as on another worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar
from uuid import UUID, uuid4

import pytest

from django_pydantic_agent.chat_history import (
    Chat,
    ChatRepository,
    ChatSessionRegistry,
    InMemoryChatRepository,
    InMemoryMessageRepository,
    Message,
    MessageRepository,
)
from django_pydantic_agent.memory_service import DRMemoryServiceClient, DRMemorySpace
from django_pydantic_agent.testing.chat_history import ChatHistoryContract, OpenRepositories
from tests.support.emulator import no_faults_armed


class TestInMemoryRepositories(ChatHistoryContract):
    """The in-memory pair is its own storage: a "fresh" pair is the same two objects."""

    @pytest.fixture
    def open_repositories(self) -> OpenRepositories:
        chats = InMemoryChatRepository()
        messages = InMemoryMessageRepository(chats)
        return lambda: (chats, messages)


@pytest.fixture
async def memory_space(live_server: Any) -> AsyncIterator[DRMemorySpace]:
    """A fresh memory space on the emulator, over real HTTP."""
    with no_faults_armed():
        async with DRMemoryServiceClient(
            endpoint=f"{live_server.url}/api/v2", api_token="token-contract", timeout=30.0
        ) as client:
            yield await DRMemorySpace.post(client, deduplication_key=f"contract-{uuid4().hex}")


class TestMemoryServiceRepositories(ChatHistoryContract):
    """The Memory Service pair, each fresh pair with cold caches (a new registry)."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [
        pytest.mark.asyncio,
        pytest.mark.django_db(transaction=True),
    ]
    max_content_chars = 100_000

    @pytest.fixture
    def open_repositories(self, memory_space: DRMemorySpace) -> OpenRepositories:
        def open_pair() -> tuple[ChatRepository, MessageRepository]:
            registry = ChatSessionRegistry(memory_space)
            return ChatRepository(memory_space, registry), MessageRepository(memory_space, registry)

        return open_pair


# -- the suite catches broken backends --------------------------------------------------------


class _ShuffledMessages(InMemoryMessageRepository):
    """Returns a chat's messages newest first: the order bug the contract must catch."""

    async def get_chat_messages(self, chat_uuid: UUID) -> Sequence[Message]:
        return list(reversed(await super().get_chat_messages(chat_uuid)))


class _ForgetfulChats(InMemoryChatRepository):
    """Loses renames: the write is acknowledged, never kept."""

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Chat | None:
        for chat in await self.get_all_chats(None):
            if chat.chat_uuid == chat_uuid:
                return chat.model_copy(update={"name": name})
        return None


async def test_the_contract_fails_a_backend_that_loses_sequence_order() -> None:
    chats = InMemoryChatRepository()
    messages = _ShuffledMessages(chats)
    contract = ChatHistoryContract()
    with pytest.raises(AssertionError, match="m6"):
        await contract.test_s41_messages_read_back_in_sequence_order(lambda: (chats, messages))


async def test_the_contract_fails_a_backend_that_does_not_keep_renames() -> None:
    chats = _ForgetfulChats()
    messages = InMemoryMessageRepository(chats)
    contract = ChatHistoryContract()
    with pytest.raises(AssertionError, match="Renamed"):
        await contract.test_s41_chats_are_idempotent_per_user_and_thread_and_renamable(
            lambda: (chats, messages)
        )


async def test_the_contract_refuses_objects_that_are_not_repositories() -> None:
    contract = ChatHistoryContract()
    with pytest.raises(AssertionError, match="is no ChatRepositoryLike"):
        await contract.test_s41_unknown_ids_give_none_and_missing_parents_raise(
            lambda: (object(), object())  # type: ignore[arg-type, return-value]
        )


async def test_the_contract_fails_a_backend_that_remembers_only_in_one_instance() -> None:
    def forgetful() -> tuple[InMemoryChatRepository, InMemoryMessageRepository]:
        chats = InMemoryChatRepository()  # a new, empty storage per "fresh" pair
        return chats, InMemoryMessageRepository(chats)

    contract = ChatHistoryContract()
    with pytest.raises(AssertionError, match=r"no chat was stored|assert None is not None"):
        await contract.test_s01_plain_text_on_a_new_thread(forgetful)
    with pytest.raises(AssertionError, match="no chat was stored"):
        await contract.test_s06_several_messages_in_one_run_keep_their_order(forgetful)
