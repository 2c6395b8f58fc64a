"""The in-memory repositories honour the repository contract (spec §5, S41, S42)."""

from __future__ import annotations

from uuid import uuid4

import pytest

from django_pydantic_agent.chat_history import (
    ChatCreate,
    ChatRepositoryLike,
    InMemoryChatRepository,
    InMemoryMessageRepository,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageRepositoryLike,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    ToolCall,
    chat_deduplication_key,
    participant_id,
)
from django_pydantic_agent.chat_history.records import Chat
from tests.chat_history.conftest import OTHER_USER, USER


async def _chat(chat_repo: InMemoryChatRepository, thread: str = "t1") -> Chat:
    return await chat_repo.create_chat(ChatCreate(name="Hello", thread_id=thread, user_uuid=USER))


def test_in_memory_repositories_satisfy_the_protocols(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    assert isinstance(chat_repo, ChatRepositoryLike)
    assert isinstance(message_repo, MessageRepositoryLike)


async def test_create_chat_is_idempotent_per_user_and_thread(
    chat_repo: InMemoryChatRepository,
) -> None:
    first = await _chat(chat_repo)
    again = await chat_repo.create_chat(ChatCreate(name="Other", thread_id="t1", user_uuid=USER))
    assert again.chat_uuid == first.chat_uuid
    assert again.name == "Hello"
    assert first.dedup_key == chat_deduplication_key(USER, "t1")
    assert first.participants == [participant_id(USER)]


async def test_create_chat_requires_thread_and_user(chat_repo: InMemoryChatRepository) -> None:
    with pytest.raises(ValueError, match="thread_id and user_uuid"):
        await chat_repo.create_chat(ChatCreate(thread_id="t1"))
    with pytest.raises(ValueError, match="thread_id and user_uuid"):
        await chat_repo.create_chat(ChatCreate(user_uuid=USER))


async def test_s42_two_users_on_the_same_thread_get_separate_chats(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    mine = await _chat(chat_repo)
    theirs = await chat_repo.create_chat(ChatCreate(thread_id="t1", user_uuid=OTHER_USER))
    assert mine.chat_uuid != theirs.chat_uuid
    assert mine.dedup_key != theirs.dedup_key
    await message_repo.create_message(
        MessageCreate(chat_uuid=mine.chat_uuid, agui_id="u1", content="secret")
    )
    assert await message_repo.get_chat_messages(theirs.chat_uuid) == []
    assert (await chat_repo.get_chat_by_thread_id(OTHER_USER, "t1")).chat_uuid == theirs.chat_uuid  # type: ignore[union-attr]
    assert [c.chat_uuid for c in await chat_repo.get_all_chats(USER)] == [mine.chat_uuid]
    assert len(await chat_repo.get_all_chats(None)) == 2


async def test_thread_lookup_is_exact(chat_repo: InMemoryChatRepository) -> None:
    await _chat(chat_repo)
    assert await chat_repo.get_chat_by_thread_id(USER, "T1") is None
    assert await chat_repo.get_chat_by_thread_id(OTHER_USER, "t1") is None


async def test_s41_unknown_and_deleted_records_read_as_none(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    chat = await _chat(chat_repo)
    message = await message_repo.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, agui_id="u1", content="x")
    )
    assert await message_repo.update_message(uuid4(), MessageUpdate(content="y")) is None
    assert await message_repo.update_message_tool_call(uuid4(), MessageToolCallUpdate()) is None
    assert await message_repo.update_message_reasoning(uuid4(), MessageReasoningUpdate()) is None
    assert await message_repo.get_message(uuid4()) is None
    assert await message_repo.get_tool_call_by_agui_id(uuid4(), "tc") is None
    with pytest.raises(ValueError, match="does not exist"):
        await message_repo.create_message_tool_call(MessageToolCallCreate(message_uuid=uuid4()))
    with pytest.raises(ValueError, match="does not exist"):
        await message_repo.create_message_reasoning(MessageReasoningCreate(message_uuid=uuid4()))
    with pytest.raises(ValueError, match="needs chat_uuid"):
        await message_repo.create_message(MessageCreate(content="x"))
    with pytest.raises(ValueError, match="does not exist"):
        await message_repo.create_message(MessageCreate(chat_uuid=uuid4(), content="x"))

    assert (await chat_repo.delete_chat(chat.chat_uuid)) is not None
    assert await message_repo.get_chat_messages(chat.chat_uuid) == []
    assert await message_repo.get_message(message.message_uuid) is None
    assert await chat_repo.update_chat_name(chat.chat_uuid, "n") is None
    assert await chat_repo.delete_chat(chat.chat_uuid) is None


async def test_messages_keep_sequence_order_and_last_message_per_chat(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    c1 = await _chat(chat_repo, "t1")
    c2 = await _chat(chat_repo, "t2")
    empty = await _chat(chat_repo, "t3")
    for i in range(3):
        await message_repo.create_message(
            MessageCreate(chat_uuid=c1.chat_uuid, agui_id=f"m{i}", role="assistant")
        )
    await message_repo.create_message(MessageCreate(chat_uuid=c2.chat_uuid, agui_id="x"))
    listed = await message_repo.get_chat_messages(c1.chat_uuid)
    assert [m.agui_id for m in listed] == ["m0", "m1", "m2"]
    assert [m.sequence_id for m in listed] == sorted(m.sequence_id for m in listed)
    last = await message_repo.get_last_messages([c1.chat_uuid, c2.chat_uuid, empty.chat_uuid])
    assert set(last) == {c1.chat_uuid, c2.chat_uuid}
    assert last[c1.chat_uuid].agui_id == "m2"


async def test_user_messages_are_emitted_by_the_user_participant(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    chat = await _chat(chat_repo)
    user = await message_repo.create_message(MessageCreate(chat_uuid=chat.chat_uuid, role="user"))
    agent = await message_repo.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role="assistant")
    )
    assert (user.emitter_type, user.emitter_id) == ("user", participant_id(USER))
    assert (agent.emitter_type, agent.emitter_id) == ("agent", None)


async def test_nested_tool_calls_and_reasonings_round_trip(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    chat = await _chat(chat_repo)
    message = await message_repo.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, agui_id="m1", role="assistant")
    )
    call = await message_repo.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=message.message_uuid, agui_id="tc1", tool_call_id="tc1", name="f"
        )
    )
    step = await message_repo.create_message_reasoning(
        MessageReasoningCreate(message_uuid=message.message_uuid, agui_id="r1")
    )
    updated = await message_repo.update_message_tool_call(
        call.uuid,
        MessageToolCallUpdate(arguments_delta='{"a":1}', arguments_offset=0, status="complete"),
    )
    assert updated is not None
    assert (updated.arguments, updated.status) == ('{"a":1}', "complete")
    await message_repo.update_message_reasoning(
        step.uuid, MessageReasoningUpdate(content="think", encrypted_value="opaque")
    )
    stored = await message_repo.get_message(message.message_uuid)
    assert stored is not None
    assert stored.tool_calls[0].arguments == '{"a":1}'
    assert (stored.reasonings[0].content, stored.reasonings[0].encrypted_value) == (
        "think",
        "opaque",
    )
    found = await message_repo.get_tool_call_by_agui_id(message.message_uuid, "tc1")
    assert found is not None
    assert found.uuid == call.uuid
    assert (await message_repo.get_message_by_agui_id(chat.chat_uuid, "m1")) is not None
    assert await message_repo.get_message_by_agui_id(chat.chat_uuid, "nope") is None


async def test_returned_records_are_copies(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    chat = await _chat(chat_repo)
    message = await message_repo.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, content="kept")
    )
    message.content = "changed locally"
    stored = await message_repo.get_message(message.message_uuid)
    assert stored is not None
    assert stored.content == "kept"


async def test_an_empty_update_writes_nothing(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    chat = await _chat(chat_repo)
    message = await message_repo.create_message(MessageCreate(chat_uuid=chat.chat_uuid))
    before = len(message_repo.writes)
    assert await message_repo.update_message(message.message_uuid, MessageUpdate()) is not None
    assert len(message_repo.writes) == before


async def test_delta_update_is_idempotent_and_refuses_a_gap(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    chat = await _chat(chat_repo)
    message = await message_repo.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, content="Hello")
    )
    delta = MessageUpdate(content_delta=" world", content_offset=5)
    await message_repo.update_message(message.message_uuid, delta)
    again = await message_repo.update_message(message.message_uuid, delta)
    assert again is not None
    assert again.content == "Hello world"
    with pytest.raises(ValueError, match="offset 50"):
        await message_repo.update_message(
            message.message_uuid, MessageUpdate(content_delta="!", content_offset=50)
        )


async def test_transaction_applies_all_or_nothing(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    chat = await _chat(chat_repo)
    message = await message_repo.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, content="a")
    )

    async def failing_batch() -> None:
        async with message_repo.transaction():
            await message_repo.update_message(message.message_uuid, MessageUpdate(content="b"))
            async with message_repo.transaction():  # nested blocks join the outer one
                await message_repo.create_message(MessageCreate(chat_uuid=chat.chat_uuid))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await failing_batch()
    listed = await message_repo.get_chat_messages(chat.chat_uuid)
    assert [m.content for m in listed] == ["a"]
    async with message_repo.transaction():
        await message_repo.update_message(message.message_uuid, MessageUpdate(content="c"))
    stored = await message_repo.get_message(message.message_uuid)
    assert stored is not None
    assert stored.content == "c"


class TaggedToolCall(ToolCall):
    team: str = ""


class TaggedMessage(Message):
    finished_at: str | None = None
    tool_calls: list[TaggedToolCall] = []  # type: ignore[assignment]


async def test_subclass_fields_reach_storage_through_dto_extras(
    chat_repo: InMemoryChatRepository,
) -> None:
    repo = InMemoryMessageRepository(chat_repo, message_class=TaggedMessage)
    chat = await _chat(chat_repo)
    message = await repo.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, finished_at="early")  # type: ignore[call-arg]
    )
    assert isinstance(message, TaggedMessage)
    assert message.finished_at == "early"
    await repo.update_message(
        message.message_uuid,
        MessageUpdate(finished_at="2026-12-01", undeclared="dropped"),  # type: ignore[call-arg]
    )
    stored = await repo.get_message(message.message_uuid)
    assert isinstance(stored, TaggedMessage)
    assert stored.finished_at == "2026-12-01"
    assert not hasattr(stored, "undeclared")
    call = await repo.create_message_tool_call(
        MessageToolCallCreate(message_uuid=message.message_uuid, team="research")  # type: ignore[call-arg]
    )
    assert isinstance(call, TaggedToolCall)
    assert call.team == "research"


async def test_update_chat_name_renames(chat_repo: InMemoryChatRepository) -> None:
    chat = await _chat(chat_repo)
    renamed = await chat_repo.update_chat_name(chat.chat_uuid, "Renamed")
    assert renamed is not None
    assert renamed.name == "Renamed"
    again = await chat_repo.get_chat_by_thread_id(USER, "t1")
    assert again is not None
    assert again.name == "Renamed"


async def test_children_of_deleted_chats_are_not_found(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    gone = await _chat(chat_repo, "gone")
    kept = await _chat(chat_repo, "kept")
    old = await message_repo.create_message(MessageCreate(chat_uuid=gone.chat_uuid))
    await message_repo.create_message(MessageCreate(chat_uuid=kept.chat_uuid))
    call = await message_repo.create_message_tool_call(
        MessageToolCallCreate(message_uuid=old.message_uuid, tool_call_id="a", agui_id="a")
    )
    await chat_repo.delete_chat(gone.chat_uuid)
    assert await message_repo.update_message_tool_call(call.uuid, MessageToolCallUpdate()) is None
    assert await message_repo.get_tool_call_by_agui_id(old.message_uuid, "a") is None


async def test_tool_call_updates_keep_extra_keys_and_miss_unknown_ids(
    chat_repo: InMemoryChatRepository, message_repo: InMemoryMessageRepository
) -> None:
    chat = await _chat(chat_repo)
    message = await message_repo.create_message(MessageCreate(chat_uuid=chat.chat_uuid))
    call = await message_repo.create_message_tool_call(
        MessageToolCallCreate(message_uuid=message.message_uuid, agui_id="a")
    )
    updated = await message_repo.update_message_tool_call(
        call.uuid,
        MessageToolCallUpdate(status="complete", approved_by="ops"),  # type: ignore[call-arg]
    )
    assert updated is not None
    assert updated.model_extra == {"approved_by": "ops"}
    assert await message_repo.get_tool_call_by_agui_id(message.message_uuid, "b") is None
