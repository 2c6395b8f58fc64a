"""The generic adapter: the chat-history contract over stores that know only load/save."""

from __future__ import annotations

from typing import Any, ClassVar
from uuid import uuid4

import pytest
from django.http import HttpRequest

from django_pydantic_agent.chat_history import ChatCreate, MessageCreate, MessageUpdate
from django_pydantic_agent.persistence import (
    AnonymousOperationError,
    Conversation,
    ConversationChatRepository,
    ConversationStore,
    DjangoSessionConversationStore,
    ScopedConversationStore,
    conversation_repositories,
    owner_user_uuid,
    repositories_for,
)
from django_pydantic_agent.persistence.repositories import bind_conversation_repositories
from django_pydantic_agent.testing import StoreActors, sample_messages
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


# -- what the adapter does beyond the contract ------------------------------------------------


class _CountingStore(ThreadStore):
    """Records every whole-conversation save it is asked for."""

    def __init__(self) -> None:
        super().__init__(allow_anonymous=True)
        self.saves: list[list[object]] = []

    async def save(self, conversation: Conversation, *, request: HttpRequest) -> None:
        self.saves.append(list(conversation.messages))
        await super().save(conversation, request=request)


pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_transaction_is_one_save_and_a_raise_saves_nothing(actors: StoreActors) -> None:
    store = _CountingStore()
    request = actors.request("alice")
    chats, messages = await conversation_repositories(store, request=request)
    owner = owner_user_uuid(str(actors.user("alice").pk))
    assert chats.user_uuid == owner
    chat = await chats.create_chat(ChatCreate(name="Trip", thread_id="t1", user_uuid=owner))
    assert len(store.saves) == 1
    async with messages.transaction():
        first = await messages.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, role="user", agui_id="u1", content="Hi")
        )
        await messages.update_message(first.message_uuid, MessageUpdate(status="complete"))
        async with messages.transaction():  # nested: joins the outer block
            await messages.create_message(
                MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", agui_id="m1")
            )
        assert len(store.saves) == 1
    assert len(store.saves) == 2
    assert [m["id"] for m in store.saves[-1]] == ["u1", "m1"]  # type: ignore[index]

    async def failing_flush() -> None:
        async with messages.transaction():
            await messages.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="x"))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await failing_flush()
    assert len(store.saves) == 2
    assert [m.agui_id for m in await messages.get_chat_messages(chat.chat_uuid)] == ["u1", "m1"]

    # Outside a transaction every write is its own flush point.
    await messages.update_message(first.message_uuid, MessageUpdate(content="Hi!"))
    assert len(store.saves) == 3
    loaded = await store.load("t1", request=actors.request("alice"))
    assert loaded is not None
    assert loaded.messages[0]["content"] == "Hi!"
    assert loaded.messages[0]["status"] == "complete"
    [row] = await store.list(request=actors.request("alice"))
    assert row.title == "Trip"


async def test_the_pair_acts_for_its_owner_only(actors: StoreActors) -> None:
    store = ThreadStore(allow_anonymous=True)
    chats, _ = await conversation_repositories(store, request=actors.request("alice"))
    bob = owner_user_uuid(str(actors.user("bob").pk))
    with pytest.raises(ValueError, match="request's owner"):
        await chats.create_chat(ChatCreate(thread_id="t1", user_uuid=bob))
    assert await chats.get_chat_by_thread_id(bob, "t1") is None
    assert await chats.get_all_chats(bob) == []
    closed = ThreadStore()
    with pytest.raises(AnonymousOperationError):
        await conversation_repositories(closed, request=actors.request("anon1"))


async def test_a_cold_pair_finds_records_by_uuid_and_keeps_client_fields(
    actors: StoreActors,
) -> None:
    store = ThreadStore(allow_anonymous=True)
    posted = sample_messages()
    await store.save(Conversation(thread_id="t1", messages=posted), request=actors.request("alice"))
    chats, messages = await conversation_repositories(store, request=actors.request("alice"))
    owner = chats.user_uuid
    chat = await chats.get_chat_by_thread_id(owner, "t1")
    assert chat is not None
    assert chat.name == "Plan a trip to Lisbon please"
    stored = await messages.get_chat_messages(chat.chat_uuid)
    _, cold = await conversation_repositories(store, request=actors.request("alice"))
    found = await cold.get_message(stored[1].message_uuid)
    assert found is not None
    assert found.tool_calls[0].tool_call_id == "call-1"
    call = await cold.get_tool_call_by_agui_id(stored[1].message_uuid, "call-1")
    assert call is not None
    assert await cold.get_message(uuid4()) is None
    await cold.update_message(stored[0].message_uuid, MessageUpdate(status="interrupted"))
    loaded = await store.load("t1", request=actors.request("alice"))
    assert loaded is not None
    assert loaded.messages[0]["status"] == "interrupted"
    assert loaded.messages[0]["attachments"] == posted[0]["attachments"]
    assert loaded.messages[1:] == posted[1:]  # untouched messages stay verbatim


async def test_repositories_for_prefers_the_stores_own(actors: StoreActors) -> None:
    class OwnStore(ThreadStore):
        async def repositories(self, *, request: HttpRequest) -> tuple[Any, Any]:
            return ("own-chats", "own-messages")

    request = actors.request("alice")
    assert await repositories_for(OwnStore(), request=request) == ("own-chats", "own-messages")
    chats, _ = await repositories_for(ThreadStore(), request=request)
    assert isinstance(chats, ConversationChatRepository)
    scoped = ScopedConversationStore(DjangoSessionConversationStore(), scope="admin")
    chats, _ = await repositories_for(scoped, request=request)
    owner = owner_user_uuid(str(actors.user("alice").pk))
    chat = await chats.create_chat(ChatCreate(thread_id="t1", user_uuid=owner))
    assert chat.thread_id == "t1"
    rows = await DjangoSessionConversationStore().list(request=actors.request("alice"))
    assert [row.thread_id for row in rows] == ["admin:t1"]
