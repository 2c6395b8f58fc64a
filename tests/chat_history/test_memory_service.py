"""The Memory Service repositories over real HTTP to the emulator (spec §5, S41, S42, §8.1)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from ag_ui.core import AssistantMessage, UserMessage

from bench.chat_history_requests import _Script, measure, plain_answer, tool_call_answer
from django_pydantic_agent.chat_history import (
    AGUIStorageAgent,
    Chat,
    ChatCreate,
    ChatRepositoryLike,
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
from django_pydantic_agent.chat_history.memory_service import (
    ChatRepository,
    ChatSessionRegistry,
    EntityLocator,
    MessageRepository,
    RetryPolicy,
)
from django_pydantic_agent.contrib.memory_service_emulator import (
    Fault,
    fault_injector,
    request_counter,
)
from django_pydantic_agent.memory_service import (
    DRMemoryServiceClient,
    DRMemorySpace,
    DRMemoryVersionConflictError,
)
from tests.chat_history.scripted import run_input
from tests.support.emulator import no_faults_armed

pytestmark = pytest.mark.django_db(transaction=True)

USER = UUID("12345678-1234-5678-1234-567812345678")
OTHER_USER = UUID("87654321-4321-8765-4321-876543218765")


@dataclass
class Service:
    """One emulator space, clients on it, and what went over the wire."""

    endpoint: str
    pool: httpx.AsyncClient
    space: DRMemorySpace
    response_bytes: list[int] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)

    def retry(self, **kwargs: Any) -> RetryPolicy:
        async def sleep(seconds: float) -> None:
            self.sleeps.append(seconds)

        return RetryPolicy(**{"sleep": sleep, **kwargs})

    def repositories(
        self, **retry: Any
    ) -> tuple[ChatRepository, MessageRepository, ChatSessionRegistry]:
        """A fresh replica: new registry and caches on the same space."""
        registry = ChatSessionRegistry(self.space, retry=self.retry(**retry))
        return (
            ChatRepository(self.space, registry),
            MessageRepository(self.space, registry),
            registry,
        )

    def reset(self) -> None:
        request_counter.reset()
        self.response_bytes.clear()

    @property
    def requests(self) -> int:
        return request_counter.count()


@pytest.fixture(autouse=True)
def _clean_faults() -> Iterator[None]:
    with no_faults_armed():
        yield


@pytest.fixture
async def service(live_server: Any) -> AsyncIterator[Service]:
    sizes: list[int] = []

    async def record(response: httpx.Response) -> None:
        await response.aread()
        sizes.append(len(response.content))

    pool = httpx.AsyncClient(timeout=10.0, event_hooks={"response": [record]})
    endpoint = f"{live_server.url}/api/v2"
    client = DRMemoryServiceClient(endpoint=endpoint, api_token="tok", http_client=pool)
    space = await DRMemorySpace.post(client, deduplication_key="chat-history")
    yield Service(endpoint=endpoint, pool=pool, space=space, response_bytes=sizes)
    await pool.aclose()


async def _chat(chats: ChatRepository, thread: str = "t1", user: UUID = USER) -> Chat:
    return await chats.create_chat(ChatCreate(name="Hello", thread_id=thread, user_uuid=user))


def _text(chat: Chat, text: str, role: str = "user", **fields: Any) -> MessageCreate:
    return MessageCreate(chat_uuid=chat.chat_uuid, role=role, content=text, **fields)


# Contract ---------------------------------------------------------------------------------------


async def test_repositories_satisfy_the_protocols(service: Service) -> None:
    chats, messages, registry = service.repositories()
    assert isinstance(chats, ChatRepositoryLike)
    assert isinstance(messages, MessageRepositoryLike)
    assert registry.locators is not None


async def test_chat_session_keeps_the_reference_shape(service: Service) -> None:
    chats, _, _ = service.repositories()
    chat = await _chat(chats)
    stored = await Chat.get(service.space, id=chat.id)  # read as the reference declares it
    assert stored.thread_id == "t1"
    assert stored.dedup_key == chat_deduplication_key(USER, "t1")
    assert stored.participants == [participant_id(USER)]
    assert (stored.name, stored.chat_uuid, stored.user_uuid) == ("Hello", chat.chat_uuid, USER)
    found = await Chat.list(service.space, thread_id="t1", participant=participant_id(USER))
    assert [c.chat_uuid for c in found] == [chat.chat_uuid]


async def test_message_event_body_has_the_reference_fields(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    created = await messages.create_message(_text(chat, "", agui_id="u1", status="complete"))
    [event] = await Message.list(chat, type="message")
    assert event.message_uuid == created.message_uuid
    assert (event.v, event.role, event.content, event.agui_id) == (1, "user", "", "u1")
    assert (event.emitter_type, event.emitter_id) == ("user", participant_id(USER))
    response = await service.pool.get(
        f"{service.endpoint}/memory/{service.space.id}/sessions/{chat.id}/events/",
        headers={"Authorization": "Bearer tok"},
    )
    body = response.json()["items"][0]["body"]
    assert body["content"] == "\u200b"  # the placeholder on the wire
    assert {"v", "message_uuid", "chat_uuid", "role", "status", "tool_calls"} <= set(body)


async def test_create_chat_is_idempotent_and_adopts(service: Service) -> None:
    chats, _, _ = service.repositories()
    first = await _chat(chats)
    other_replica, _, _ = service.repositories()
    again = await other_replica.create_chat(ChatCreate(name="X", thread_id="t1", user_uuid=USER))
    assert (again.chat_uuid, again.name) == (first.chat_uuid, "Hello")
    with pytest.raises(ValueError, match="user_uuid and thread_id"):
        await chats.create_chat(ChatCreate(thread_id="t1"))


async def test_s42_two_users_on_one_thread_are_separate(service: Service) -> None:
    chats, messages, _ = service.repositories()
    mine = await _chat(chats, user=USER)
    theirs = await _chat(chats, user=OTHER_USER)
    assert mine.chat_uuid != theirs.chat_uuid
    await messages.create_message(_text(mine, "mine"))
    assert await messages.get_chat_messages(theirs.chat_uuid) == []
    found = await chats.get_chat_by_thread_id(OTHER_USER, "t1")
    assert found is not None
    assert found.chat_uuid == theirs.chat_uuid
    assert [c.chat_uuid for c in await chats.get_all_chats(USER)] == [mine.chat_uuid]
    assert len(await chats.get_all_chats(None)) == 2


async def test_thread_lookup_is_exact_despite_a_case_blind_filter(service: Service) -> None:
    chats, _, _ = service.repositories()
    upper = await _chat(chats, thread="T1")
    assert await chats.get_chat_by_thread_id(USER, "t1") is None
    found = await chats.get_chat_by_thread_id(USER, "T1")
    assert found is not None
    assert found.chat_uuid == upper.chat_uuid


async def test_s41_not_found_and_value_errors(service: Service) -> None:
    chats, messages, _ = service.repositories()
    assert await messages.update_message(uuid4(), MessageUpdate(content="x")) is None
    assert await messages.get_message(uuid4()) is None
    assert await messages.get_chat_messages(uuid4()) == []
    with pytest.raises(ValueError, match="chat_uuid is None"):
        await messages.create_message(MessageCreate(content="x"))
    with pytest.raises(ValueError, match="no memory session"):
        await messages.create_message(MessageCreate(chat_uuid=uuid4(), content="x"))
    with pytest.raises(ValueError, match="does not exist"):
        await messages.create_message_tool_call(MessageToolCallCreate(message_uuid=uuid4()))
    chat = await _chat(chats)
    assert await messages.get_message_by_agui_id(chat.chat_uuid, "nope") is None
    assert await messages.update_message_tool_call(uuid4(), MessageToolCallUpdate()) is None
    assert await chats.update_chat_name(uuid4(), "x") is None
    assert await chats.delete_chat(uuid4()) is None


async def test_messages_tool_calls_and_reasoning_round_trip(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    user = await messages.create_message(_text(chat, "Hello", agui_id="u1"))
    answer = await messages.create_message(_text(chat, "", role="assistant", agui_id="m1"))
    call = await messages.create_message_tool_call(
        MessageToolCallCreate(message_uuid=answer.message_uuid, tool_call_id="c1", agui_id="c1")
    )
    step = await messages.create_message_reasoning(
        MessageReasoningCreate(message_uuid=answer.message_uuid, agui_id="r1")
    )
    await messages.update_message_tool_call(call.uuid, MessageToolCallUpdate(arguments='{"a":1}'))
    await messages.update_message_reasoning(step.uuid, MessageReasoningUpdate(content="think"))
    await messages.update_message(
        answer.message_uuid, MessageUpdate(content="Hi", status="complete", in_progress=False)
    )
    for repo in (messages, service.repositories()[1]):  # warm, then a cold replica
        stored = await repo.get_chat_messages(chat.chat_uuid)
        assert [m.agui_id for m in stored] == ["u1", "m1"]
        assert stored[0].message_uuid == user.message_uuid
        reply = stored[1]
        assert (reply.content, reply.status, reply.in_progress) == ("Hi", "complete", False)
        assert [(c.uuid, c.arguments) for c in reply.tool_calls] == [(call.uuid, '{"a":1}')]
        assert [(r.uuid, r.content) for r in reply.reasonings] == [(step.uuid, "think")]
        tool = await repo.get_tool_call_by_agui_id(answer.message_uuid, "c1")
        assert tool is not None
        assert tool.uuid == call.uuid


# Request budget ----------------------------------------------------------------------------------


async def _turn(
    chats: ChatRepository,
    messages: MessageRepository,
    *,
    thread: str = "t1",
    user_text: str = "Hello",
    deltas: int = 50,
    turn: int = 1,
) -> Chat:
    """A one-question, one-answer turn with the storage agent's call pattern."""
    chat = await chats.get_chat_by_thread_id(USER, thread)
    if chat is None:
        chat = await _chat(chats, thread)
    history = await messages.get_chat_messages(chat.chat_uuid)
    known = {m.agui_id for m in history}
    async with messages.transaction():
        if f"u{turn}" not in known:
            await messages.create_message(
                _text(chat, user_text, agui_id=f"u{turn}", status="complete", in_progress=False)
            )
    async with messages.transaction():  # TextMessageStart
        answer = await messages.create_message(
            _text(chat, "", role="assistant", agui_id=f"m{turn}")
        )
    text = "".join(f"word{i} " for i in range(deltas))
    async with messages.transaction():  # TextMessageEnd: the buffered deltas, then completion
        await messages.update_message(
            answer.message_uuid, MessageUpdate(content=text, status="complete", in_progress=False)
        )
    async with messages.transaction():  # RunFinished: completes what is still active
        await messages.update_message(
            answer.message_uuid, MessageUpdate(status="complete", in_progress=False)
        )
    return chat


async def test_budget_new_thread_plain_answer(service: Service) -> None:
    chats, messages, _ = service.repositories()
    service.reset()
    chat = await _turn(chats, messages)
    assert request_counter.snapshot() == {
        ("GET", "session-list"): 1,  # the thread lookup, nothing else is read
        ("POST", "session-list"): 1,  # the chat
        ("POST", "event-list"): 2,  # the user message, the answer
        ("PATCH", "event-detail"): 1,  # the answer's text and status, once
    }
    stored = await service.repositories()[1].get_chat_messages(chat.chat_uuid)
    assert [(m.agui_id, m.status) for m in stored] == [("u1", "complete"), ("m1", "complete")]
    assert stored[1].content.startswith("word0 word1")


async def test_budget_turn_50_on_a_warm_worker(service: Service) -> None:
    chats, messages, _ = service.repositories()
    for turn in range(1, 50):
        await _turn(chats, messages, deltas=5, turn=turn)
    service.reset()
    chat = await _turn(chats, messages, deltas=50, turn=50)
    assert service.requests <= 6
    assert request_counter.count(method="GET", route="event-list") == 1  # lastN=1, no listing
    assert sum(service.response_bytes) <= 32 * 1024
    assert len(await messages.get_chat_messages(chat.chat_uuid)) == 100


async def test_cold_worker_lists_a_chat_once(service: Service) -> None:
    chats, messages, _ = service.repositories()
    for turn in range(1, 4):
        await _turn(chats, messages, deltas=3, turn=turn)
    cold_chats, cold_messages, _ = service.repositories()
    service.reset()
    await _turn(cold_chats, cold_messages, deltas=3, turn=4)
    assert request_counter.count(method="GET", route="event-list") == 1  # the listing
    assert service.requests == 5


async def test_transaction_sends_one_batch_post_and_one_batch_patch(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    first = await messages.create_message(_text(chat, "a"))
    second = await messages.create_message(_text(chat, "b"))
    service.reset()
    async with messages.transaction():
        new = await messages.create_message(_text(chat, "", role="assistant", agui_id="m1"))
        await messages.update_message(new.message_uuid, MessageUpdate(content="merged"))
        await messages.create_message(_text(chat, "c"))
        await messages.update_message(first.message_uuid, MessageUpdate(status="complete"))
        await messages.update_message(second.message_uuid, MessageUpdate(status="errored"))
        inside = await messages.get_chat_messages(chat.chat_uuid)
        assert [m.content for m in inside] == ["a", "b", "merged", "c"]  # pending writes seen
        assert request_counter.count(method="POST") + request_counter.count(method="PATCH") == 0
    assert request_counter.count(method="POST", route="event-batch") == 1
    assert request_counter.count(method="PATCH", route="event-batch") == 1
    stored = await service.repositories()[1].get_chat_messages(chat.chat_uuid)
    assert [(m.content, m.status) for m in stored] == [
        ("a", "complete"),
        ("b", "errored"),
        ("merged", "active"),
        ("c", "active"),
    ]


async def test_a_failed_transaction_block_sends_nothing(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    kept = await messages.create_message(_text(chat, "kept"))
    service.reset()

    async def failing_block() -> None:
        async with messages.transaction():
            await messages.create_message(_text(chat, "dropped"))
            await messages.update_message(kept.message_uuid, MessageUpdate(content="changed"))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await failing_block()
    assert service.requests == 0
    assert [m.content for m in await messages.get_chat_messages(chat.chat_uuid)] == ["kept"]


async def test_an_update_that_changes_nothing_costs_nothing(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    message = await messages.create_message(_text(chat, "x", status="complete"))
    service.reset()
    again = await messages.update_message(message.message_uuid, MessageUpdate(status="complete"))
    assert again is not None
    assert again.status == "complete"
    assert await messages.update_message(message.message_uuid, MessageUpdate()) is not None
    assert service.requests == 0


# Cold replicas and the reference's data ---------------------------------------------------------


async def test_a_cold_replica_resolves_uuids_with_one_lookup(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    answer = await messages.create_message(_text(chat, "", role="assistant"))
    call = await messages.create_message_tool_call(
        MessageToolCallCreate(message_uuid=answer.message_uuid, tool_call_id="c1")
    )
    _, _, registry = service.repositories()
    service.reset()
    assert await registry.resolve(chat.chat_uuid) == chat.id
    assert request_counter.snapshot() == {("GET", "session-list"): 1}
    for lookup in ("message", "tool call"):
        _, cold, _ = service.repositories()
        service.reset()
        if lookup == "message":
            found = await cold.get_message(answer.message_uuid)
            assert found is not None
            assert found.message_uuid == answer.message_uuid
        else:
            updated = await cold.update_message_tool_call(
                call.uuid, MessageToolCallUpdate(status="complete")
            )
            assert updated is not None
            assert updated.status == "complete"
        # the chat's description lookup, then the chat's one listing page (then the PATCH)
        assert request_counter.count(method="GET", route="session-list") == 1
        assert request_counter.count(method="GET", route="event-list") == 1
    # no locator sessions were written for chats created here
    assert await EntityLocator.list(service.space) == []


async def _reference_chat(space: DRMemorySpace) -> tuple[Chat, Message]:
    """Write a chat, a message and their locators exactly as the reference does."""
    chat_uuid, message_uuid = uuid4(), uuid4()
    chat = await Chat.post(
        space,
        participants=[participant_id(USER)],
        thread_id="ref-thread",
        dedup_key=chat_deduplication_key(USER, "ref-thread"),
        name="Reference",
        chat_uuid=chat_uuid,
        user_uuid=USER,
    )
    for kind, uuid in (("chat", chat_uuid), ("message", message_uuid)):
        await EntityLocator.post(
            space,
            locator_key=f"{kind}:{uuid}",
            kind=kind,
            session_id=chat.id,
            chat_uuid=chat_uuid,
            message_uuid=None,
        )
    message = await Message.post(
        chat,
        content="from the reference",
        emitter_type="user",
        emitter_id=participant_id(USER),
        v=1,
        message_uuid=message_uuid,
        chat_uuid=chat_uuid,
        agui_id="ref-u1",
        role="user",
        status="complete",
        in_progress=False,
    )
    return chat, message


async def test_reference_written_data_is_read_and_extended(service: Service) -> None:
    ref_chat, ref_message = await _reference_chat(service.space)
    chats, messages, registry = service.repositories()
    assert await registry.resolve(ref_chat.chat_uuid) == ref_chat.id
    found = await messages.get_message(ref_message.message_uuid)
    assert found is not None
    assert found.content == "from the reference"
    by_thread = await chats.get_chat_by_thread_id(USER, "ref-thread")
    assert by_thread is not None
    assert by_thread.chat_uuid == ref_chat.chat_uuid
    # a message appended to a reference chat gets a reference-style locator
    added = await messages.create_message(_text(by_thread, "ours", role="assistant"))
    locator = await EntityLocator.get(service.space, locator_key=f"message:{added.message_uuid}")
    assert (locator.session_id, locator.chat_uuid) == (ref_chat.id, ref_chat.chat_uuid)
    _, cold, _ = service.repositories()
    located = await cold.get_message(added.message_uuid)
    assert located is not None
    assert located.content == "ours"


async def test_the_reference_can_read_what_we_write(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats, thread="shared")
    await messages.create_message(_text(chat, "hi", agui_id="u1"))
    # the reference's lookup: participant + //thread/<id>/ filter, then its event listing
    [listed] = await Chat.list(service.space, thread_id="shared", participant=participant_id(USER))
    assert (listed.thread_id, listed.chat_uuid, listed.name) == ("shared", chat.chat_uuid, "Hello")
    [event] = await Message.list(listed, type="message", offset=0, limit=100)
    assert (event.v, event.content, event.agui_id, event.chat_uuid) == (
        1,
        "hi",
        "u1",
        chat.chat_uuid,
    )


# Failures: retries, conflicts, lost responses ---------------------------------------------------


async def _stored(service: Service, chat: Chat) -> list[tuple[str | None, str]]:
    return [(m.agui_id, m.content) for m in await Message.list(chat, type="message")]


@pytest.mark.parametrize(
    ("fault", "sleeps"),
    [
        (Fault.rate_limited(retry_after=7, times=2, routes=["event-list"]), [7.0, 7.0]),
        (Fault.rate_limited(times=1, routes=["event-list"]), None),
        (Fault.unavailable(times=2, routes=["event-list"]), None),
        (Fault.dropped_connection(times=1, routes=["event-list"]), None),
        (
            Fault.dropped_connection(after_processing=True, times=1, routes=["event-list"]),
            None,
        ),
    ],
    ids=["429-retry-after", "429-no-header", "503", "dropped", "dropped-after-processing"],
)
async def test_a_create_survives_transient_failures_exactly_once(
    service: Service, fault: Fault, sleeps: list[float] | None
) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    await messages.create_message(_text(chat, "before", agui_id="u0"))
    with fault_injector.inject(fault):
        created = await messages.create_message(_text(chat, "Hello", agui_id="u1"))
    assert fault_injector.fired() >= 1
    if sleeps is not None:
        assert service.sleeps == sleeps  # Retry-After is honoured
    else:
        assert len(service.sleeps) == fault_injector.fired()
    assert await _stored(service, chat) == [("u0", "before"), ("u1", "Hello")]
    assert created.sequence_id == 2


async def test_a_batch_create_whose_answer_is_lost_is_not_repeated(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    fault = Fault.dropped_connection(after_processing=True, times=1, routes=["event-batch"])
    with fault_injector.inject(fault):
        async with messages.transaction():
            for i in range(3):
                await messages.create_message(_text(chat, f"m{i}", agui_id=f"m{i}"))
    assert fault_injector.fired() == 1
    assert await _stored(service, chat) == [("m0", "m0"), ("m1", "m1"), ("m2", "m2")]
    assert [m.sequence_id for m in await messages.get_chat_messages(chat.chat_uuid)] == [1, 2, 3]


async def test_a_patch_whose_answer_is_lost_is_not_applied_twice(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    message = await messages.create_message(_text(chat, "Hel", role="assistant"))
    fault = Fault.dropped_connection(after_processing=True, times=1, routes=["event-detail"])
    with fault_injector.inject(fault):
        updated = await messages.update_message(
            message.message_uuid, MessageUpdate(content_delta="lo", content_offset=3)
        )
    assert fault_injector.fired() == 1
    assert updated is not None
    assert updated.content == "Hello"
    assert await _stored(service, chat) == [(None, "Hello")]


async def test_retries_are_bounded(service: Service) -> None:
    chats, messages, _ = service.repositories(attempts=3)
    chat = await _chat(chats)
    with (
        fault_injector.inject(Fault.unavailable(routes=["event-list"])),
        pytest.raises(Exception, match="503"),
    ):
        await messages.create_message(_text(chat, "x"))
    assert len(service.sleeps) == 2
    _, messages_long, _ = service.repositories(total_seconds=5.0)
    with (
        fault_injector.inject(Fault.rate_limited(retry_after=60, routes=["event-list"])),
        pytest.raises(Exception, match="429"),
    ):
        await messages_long.create_message(_text(chat, "x"))
    assert service.sleeps == [service.sleeps[0], service.sleeps[1]]  # no 60 s wait was started
    assert await _stored(service, chat) == []


async def test_a_stale_token_rereads_that_event_and_reapplies(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    first = await messages.create_message(_text(chat, "q"))
    answer = await messages.create_message(_text(chat, "", role="assistant"))
    _, other, _ = service.repositories()
    await other.update_message(answer.message_uuid, MessageUpdate(error="noted elsewhere"))
    service.reset()
    updated = await messages.update_message(
        answer.message_uuid, MessageUpdate(content="Hi", status="complete")
    )
    assert updated is not None
    assert (updated.content, updated.status, updated.error) == ("Hi", "complete", "noted elsewhere")
    assert request_counter.count(method="PATCH") == 2  # the stale one, then the re-applied one
    assert request_counter.count(method="GET") == 1  # one page from the event's offset
    seen = await other.get_chat_messages(chat.chat_uuid)
    assert first.message_uuid in {m.message_uuid for m in seen}


async def test_a_warm_cache_sees_messages_written_by_another_replica(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    await messages.create_message(_text(chat, "one", agui_id="u1"))
    _, other, _ = service.repositories()
    await other.create_message(_text(chat, "two", agui_id="u2"))
    service.reset()
    seen = await messages.get_chat_messages(chat.chat_uuid)
    assert [m.agui_id for m in seen] == ["u1", "u2"]
    assert request_counter.count(method="GET", route="event-list") == 2  # lastN=1, then the tail
    service.reset()
    assert len(await messages.get_chat_messages(chat.chat_uuid)) == 2
    assert service.requests == 1  # nothing new: the freshness check only


async def test_rename_retries_a_version_conflict(service: Service) -> None:
    chats, _, _ = service.repositories()
    chat = await _chat(chats)
    other, _, _ = service.repositories()
    assert await other.update_chat_name(chat.chat_uuid, "Theirs") is not None
    renamed = await chats.update_chat_name(chat.chat_uuid, "Mine")
    assert renamed is not None
    assert renamed.name == "Mine"
    assert (await Chat.get(service.space, id=chat.id)).name == "Mine"


async def test_rename_gives_up_after_three_conflicts(service: Service) -> None:
    chats, _, _ = service.repositories()
    chat = await _chat(chats)
    rival = ChatRepository(service.space, ChatSessionRegistry(service.space))

    async def bump(request: httpx.Request) -> None:
        if request.method == "PATCH" and request.url.path.endswith(f"/sessions/{chat.id}/"):
            await rival.update_chat_name(chat.chat_uuid, "rival")

    async with httpx.AsyncClient(timeout=10.0, event_hooks={"request": [bump]}) as pool:
        client = DRMemoryServiceClient(endpoint=service.endpoint, api_token="tok", http_client=pool)
        space = await DRMemorySpace.get(client, service.space.id)
        contested = ChatRepository(space, ChatSessionRegistry(space))
        with pytest.raises(DRMemoryVersionConflictError):
            await contested.update_chat_name(chat.chat_uuid, "mine")
    assert (await Chat.get(service.space, id=chat.id)).name == "rival"


async def test_s41_delete_chat(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    await messages.create_message(_text(chat, "x"))
    _, elsewhere, _ = service.repositories()
    assert len(await elsewhere.get_chat_messages(chat.chat_uuid)) == 1  # a warm replica
    deleted = await chats.delete_chat(chat.chat_uuid)
    assert deleted is not None
    assert deleted.chat_uuid == chat.chat_uuid
    assert await messages.get_chat_messages(chat.chat_uuid) == []
    assert await elsewhere.get_chat_messages(chat.chat_uuid) == []  # its check saw the 404
    assert await chats.update_chat_name(chat.chat_uuid, "x") is None
    assert await chats.delete_chat(chat.chat_uuid) is None
    assert await chats.get_chat_by_thread_id(USER, "t1") is None


async def test_s41_get_last_messages(service: Service) -> None:
    chats, messages, _ = service.repositories()
    one, two, empty = [await _chat(chats, thread=t) for t in ("a", "b", "c")]
    await messages.create_message(_text(one, "1a"))
    await messages.create_message(_text(one, "1b"))
    await messages.create_message(_text(two, "2a"))
    service.reset()
    last = await messages.get_last_messages([one.chat_uuid, two.chat_uuid, empty.chat_uuid])
    assert {k: m.content for k, m in last.items()} == {one.chat_uuid: "1b", two.chat_uuid: "2a"}
    assert service.requests == 3  # one lastN=1 per chat


async def test_content_over_the_service_limit_is_capped_and_errored(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    message = await messages.create_message(_text(chat, "", role="assistant"))
    long = "x" * 99_990
    await messages.update_message(message.message_uuid, MessageUpdate(content=long))
    await messages.update_message(
        message.message_uuid, MessageUpdate(content_delta="y" * 50, content_offset=len(long))
    )
    await messages.update_message(
        message.message_uuid,
        MessageUpdate(content_delta="z" * 50, content_offset=len(long) + 50, status="complete"),
    )
    [stored] = await service.repositories()[1].get_chat_messages(chat.chat_uuid)
    assert stored.content == long + "y" * 10  # the first 100 000 characters, no repeat
    assert (stored.status, stored.in_progress) == ("errored", False)
    assert "100,000-character limit" in (stored.error or "")


async def test_returned_records_are_detached_from_the_cache(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    message = await messages.create_message(_text(chat, "kept"))
    message.content = "changed by the caller"
    [listed] = await messages.get_chat_messages(chat.chat_uuid)
    listed.tool_calls.append(listed.tool_calls[0] if listed.tool_calls else ToolCall())
    copied = listed.model_copy(deep=True)  # never copies the HTTP client behind the session
    assert copied.content == "kept"
    service.reset()
    [again] = await messages.get_chat_messages(chat.chat_uuid)
    assert (again.content, again.tool_calls) == ("kept", [])


# Through the real storage agent -----------------------------------------------------------------


async def test_request_budget_through_the_storage_agent(live_server: Any) -> None:
    rows = await measure(f"{live_server.url}/api/v2", turns=50)
    by_name = {row.scenario.split(" (")[0]: row for row in rows}
    for row in rows:
        assert row.within_budget, row.row()
    new_thread = by_name["new thread, one user message, a 50-delta answer"]
    assert new_thread.requests <= 5
    assert ("GET", "event-list") not in new_thread.by_route  # a new chat is never listed
    assert by_name["one tool call and a 20-delta answer"].requests <= 7
    assert by_name["a reasoning block and a 20-delta answer"].requests <= 5
    turn_50 = by_name["turn 50 of a thread"]
    assert turn_50.requests <= 6
    assert turn_50.response_kb <= 32
    assert turn_50.by_route[("GET", "event-list")] == 1  # the lastN=1 check, no listing
    cold = by_name["turn 51 on a cold worker"]
    # The window's lastN=100 tail, then (the client posts all 51 user messages, most older
    # than the tail) the 101 messages listed once: two pages.
    assert cold.by_route[("GET", "event-list")] == 3


async def test_storage_agent_runs_are_stored_intact(service: Service) -> None:
    chats, messages, _ = service.repositories()
    agent = AGUIStorageAgent(
        "assistant",
        USER,
        chats,
        messages,
        _Script(tool_call_answer("t1", "r1")),
    )
    inbound = run_input(UserMessage(id="u1", content="Weather?"))
    async for _ in agent.run(inbound):
        pass
    chat = await chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    _, cold, _ = service.repositories()
    stored = await cold.get_chat_messages(chat.chat_uuid)
    assert [(m.role, m.agui_id, m.status) for m in stored] == [
        ("user", "u1", "complete"),
        ("assistant", "m1", "complete"),
        ("assistant", "m2", "complete"),
    ]
    [call] = stored[1].tool_calls
    assert (call.tool_call_id, call.arguments, call.content) == ("c1", '{"city": "Paris"}', "sunny")
    assert stored[2].content == "".join(f"word{i} " for i in range(20))


# Edges ------------------------------------------------------------------------------------------


async def test_events_of_another_body_version_are_hidden(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    await messages.create_message(_text(chat, "visible", agui_id="u1"))
    await Message.post(chat, content="future schema", emitter_type="agent", v=2)
    _, cold, _ = service.repositories()
    assert [m.content for m in await cold.get_chat_messages(chat.chat_uuid)] == ["visible"]
    last = await cold.get_last_messages([chat.chat_uuid])
    assert last[chat.chat_uuid].content == "visible"


async def test_the_freshness_check_follows_patches_and_deletions_elsewhere(
    service: Service,
) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    first = await messages.create_message(_text(chat, "one"))
    second = await messages.create_message(_text(chat, "two"))
    _, other, _ = service.repositories()
    await other.update_message(second.message_uuid, MessageUpdate(content="two, edited"))
    seen = await messages.get_chat_messages(chat.chat_uuid)
    assert [m.content for m in seen] == ["one", "two, edited"]  # the newest event re-read
    [event, _] = await Message.list(chat, type="message")
    await Message.list(chat, type="message")
    stored = await Message.last(chat, 1, type="message")
    await stored[0].delete()  # another writer removes the newest event
    assert [m.message_uuid for m in await messages.get_chat_messages(chat.chat_uuid)] == [
        first.message_uuid
    ]
    await event.delete()
    await other.create_message(_text(chat, "three"))  # offsets moved under our cache
    assert [m.content for m in await messages.get_chat_messages(chat.chat_uuid)] == ["three"]


async def test_a_miss_refreshes_once_before_saying_not_found(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    await messages.get_chat_messages(chat.chat_uuid)
    _, other, _ = service.repositories()
    added = await other.create_message(_text(chat, "from elsewhere", agui_id="x1"))
    found = await messages.get_message(added.message_uuid)
    assert found is not None
    assert found.content == "from elsewhere"
    assert await messages.get_message_by_agui_id(uuid4(), "x1") is None
    assert await messages.get_tool_call_by_agui_id(uuid4(), "c1") is None


async def test_a_lost_create_behind_a_long_foreign_tail_is_posted_once(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    await messages.get_chat_messages(chat.chat_uuid)
    _, other, _ = service.repositories()
    async with other.transaction():
        for i in range(120):
            await other.create_message(_text(chat, f"other {i}"))
    with fault_injector.inject(Fault.dropped_connection(times=1, routes=["event-list"])):
        await messages.create_message(_text(chat, "mine", agui_id="mine"))
    stored = await Message.list(chat, type="message", offset=100, limit=100)
    assert [m.agui_id for m in stored][-1] == "mine"
    assert len(await messages.get_chat_messages(chat.chat_uuid)) == 121


async def test_patch_conflicts_are_bounded(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    message = await messages.create_message(_text(chat, "x", role="assistant"))
    rival = MessageRepository(service.space, ChatSessionRegistry(service.space))

    async def bump(request: httpx.Request) -> None:
        if request.method == "PATCH":
            await rival.update_message(
                message.message_uuid, MessageUpdate(error=f"rival {uuid4()}")
            )

    async with httpx.AsyncClient(timeout=10.0, event_hooks={"request": [bump]}) as pool:
        client = DRMemoryServiceClient(endpoint=service.endpoint, api_token="tok", http_client=pool)
        space = await DRMemorySpace.get(client, service.space.id)
        contested = MessageRepository(space, ChatSessionRegistry(space))
        with pytest.raises(DRMemoryVersionConflictError):
            await contested.update_message(message.message_uuid, MessageUpdate(status="complete"))
    [stored] = await Message.list(chat, type="message")
    assert stored.status == "active"


async def test_reference_children_are_located_and_get_locators(service: Service) -> None:
    ref_chat, ref_message = await _reference_chat(service.space)
    _, messages, _ = service.repositories()
    call = await messages.create_message_tool_call(
        MessageToolCallCreate(message_uuid=ref_message.message_uuid, tool_call_id="c1")
    )
    async with messages.transaction():  # locators of a batch are written after it
        step = await messages.create_message_reasoning(
            MessageReasoningCreate(message_uuid=ref_message.message_uuid)
        )
    for kind, uuid in (("tool_call", call.uuid), ("reasoning", step.uuid)):
        locator = await EntityLocator.get(service.space, locator_key=f"{kind}:{uuid}")
        assert (locator.chat_uuid, locator.message_uuid) == (
            ref_chat.chat_uuid,
            ref_message.message_uuid,
        )
    _, cold, _ = service.repositories()
    updated = await cold.update_message_reasoning(step.uuid, MessageReasoningUpdate(content="r"))
    assert updated is not None
    assert updated.content == "r"
    unchanged = await cold.update_message_tool_call(call.uuid, MessageToolCallUpdate())
    assert unchanged is not None
    assert unchanged.tool_call_id == "c1"
    assert await cold.update_message_reasoning(uuid4(), MessageReasoningUpdate(content="r")) is None


async def test_a_failed_locator_write_does_not_fail_the_create(service: Service) -> None:
    ref_chat, _ = await _reference_chat(service.space)
    chats, messages, _ = service.repositories()
    chat = await chats.get_chat_by_thread_id(USER, "ref-thread")
    assert chat is not None
    with fault_injector.inject(Fault.unavailable(methods=["POST"], routes=["session-list"])):
        created = await messages.create_message(_text(chat, "stored anyway"))
    assert created.content == "stored anyway"
    assert [m.content for m in await Message.list(ref_chat, type="message")][-1] == (
        "stored anyway"
    )


async def test_a_chat_deleted_elsewhere_reads_as_gone(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    await messages.get_chat_messages(chat.chat_uuid)
    other_chats, _, _ = service.repositories()
    assert await other_chats.delete_chat(chat.chat_uuid) is not None
    with pytest.raises(ValueError, match="was deleted"):
        await messages.create_message(_text(chat, "late"))
    assert await chats.update_chat_name(chat.chat_uuid, "late") is None
    again, _, _ = service.repositories()
    stale = again  # a replica that resolved the chat before the delete
    assert await stale.get_chat_by_thread_id(USER, "t1") is None
    assert await messages.get_last_messages([chat.chat_uuid]) == {}


async def test_deleting_a_chat_deleted_meanwhile_gives_none(service: Service) -> None:
    chats, _, registry = service.repositories()
    chat = await _chat(chats)
    await Chat.get(service.space, id=chat.id)
    await (await Chat.get(service.space, id=chat.id)).delete()
    assert registry.get_session_id(chat.chat_uuid) == chat.id  # still cached here
    assert await chats.delete_chat(chat.chat_uuid) is None
    assert registry.get_session_id(chat.chat_uuid) is None


async def test_nested_transactions_join_and_last_messages_see_pending(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    await messages.create_message(_text(chat, "stored"))
    service.reset()
    async with messages.transaction():
        async with messages.transaction():
            await messages.create_message(_text(chat, "pending"))
        assert request_counter.count(method="POST") == 0
        last = await messages.get_last_messages([chat.chat_uuid])
        assert last[chat.chat_uuid].content == "pending"
    assert request_counter.count(method="POST") == 1


async def test_a_bad_delta_is_refused_before_anything_is_sent(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    message = await messages.create_message(_text(chat, "abc"))
    service.reset()
    with pytest.raises(ValueError, match="offset 9"):
        await messages.update_message(
            message.message_uuid, MessageUpdate(content_delta="x", content_offset=9)
        )
    assert service.requests == 0


async def test_construction_refuses_mismatched_parts(service: Service) -> None:
    other_space = await DRMemorySpace.post(service.space.client, deduplication_key="other")
    registry = ChatSessionRegistry(other_space)
    with pytest.raises(ValueError, match="another memory space"):
        ChatRepository(service.space, registry)
    with pytest.raises(ValueError, match="another memory space"):
        MessageRepository(service.space, registry)
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match=">= 0"):
        RetryPolicy(base_delay=-1)
    with pytest.raises(ValueError, match="capacity"):
        ChatSessionRegistry(service.space, max_entries=0)


async def test_the_registry_is_bounded(service: Service) -> None:
    chats, _, _ = service.repositories()
    one, two = await _chat(chats, thread="a"), await _chat(chats, thread="b")
    registry = ChatSessionRegistry(service.space, max_entries=1)
    registry.register(one.chat_uuid, one.id)
    registry.register(two.chat_uuid, two.id)
    assert registry.get_session_id(one.chat_uuid) is None  # evicted
    service.reset()
    assert await registry.resolve(one.chat_uuid) == one.id  # one lookup brings it back
    assert service.requests == 1
    registry.unregister(one.chat_uuid)
    assert registry.get_session_id(one.chat_uuid) is None
    assert await registry.resolve(uuid4()) is None  # a uuid4: its chat: locator is missing


async def test_a_write_after_someone_elses_is_not_mistaken_for_a_fresh_cache(
    service: Service,
) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    await messages.create_message(_text(chat, "one"))
    _, other, _ = service.repositories()
    await other.create_message(_text(chat, "two"))
    await messages.create_message(_text(chat, "three"))  # its sequence id skips "two"
    seen = await messages.get_chat_messages(chat.chat_uuid)
    assert [m.content for m in seen] == ["one", "two", "three"]


async def test_a_transaction_over_200_messages_sends_batches_of_200(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    service.reset()
    async with messages.transaction():
        for i in range(250):
            await messages.create_message(_text(chat, f"m{i}"))
    assert request_counter.snapshot() == {("POST", "event-batch"): 2}
    stored = await service.repositories()[1].get_chat_messages(chat.chat_uuid)
    assert [m.content for m in stored] == [f"m{i}" for i in range(250)]
    assert [m.sequence_id for m in stored] == list(range(1, 251))


async def test_turns_under_random_faults_lose_and_duplicate_nothing(service: Service) -> None:
    chats, messages, _ = service.repositories(attempts=8, base_delay=0.0)
    fault_injector.seed(9)
    faults = (
        Fault.rate_limited(retry_after=0, rate=0.15),
        Fault.rate_limited(rate=0.1),
        Fault.unavailable(rate=0.1),
        Fault.dropped_connection(rate=0.05),
        Fault.dropped_connection(after_processing=True, rate=0.1),
    )
    echo: list[Any] = []
    with fault_injector.inject(*faults):
        for n in range(1, 6):
            echo.append(UserMessage(id=f"u{n}", content=f"Question {n}"))
            agent = AGUIStorageAgent(
                "assistant", USER, chats, messages, _Script(plain_answer("t1", f"r{n}", f"m{n}", 8))
            )
            inbound = run_input(*echo, run=f"r{n}")
            async for _ in agent.run(inbound):
                pass
            echo.append(AssistantMessage(id=f"m{n}", content="answer"))
    assert fault_injector.fired() > 5
    chat = await chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    stored = await Message.list(chat, type="message")  # what the service really holds
    expected_text = "".join(f"word{i} " for i in range(8))
    assert [(m.agui_id, m.status) for m in stored] == [
        (f"{kind}{n}", "complete") for n in range(1, 6) for kind in ("u", "m")
    ]
    assert {m.content for m in stored if m.role == "assistant"} == {expected_text}


async def test_concurrent_tasks_on_one_repository_keep_every_write(service: Service) -> None:
    chats, messages, _ = service.repositories()
    chat = await _chat(chats)
    target = await messages.create_message(_text(chat, "", role="assistant"))

    async def writer(n: int) -> None:
        async with messages.transaction():
            await messages.create_message(_text(chat, f"task {n}", agui_id=f"t{n}"))
            await messages.create_message_tool_call(
                MessageToolCallCreate(message_uuid=target.message_uuid, tool_call_id=f"c{n}")
            )

    await asyncio.gather(*(writer(n) for n in range(4)))
    _, cold, _ = service.repositories()
    stored = await cold.get_chat_messages(chat.chat_uuid)
    assert sorted(m.agui_id for m in stored[1:] if m.agui_id) == [f"t{n}" for n in range(4)]
    assert sorted(c.tool_call_id for c in stored[0].tool_calls) == [f"c{n}" for n in range(4)]
