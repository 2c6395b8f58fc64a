"""The ORM chat-history repositories: the public contract, owner scoping, deletes, query counts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any, ClassVar

import pytest
from ag_ui.core import BaseEvent, RunAgentInput, UserMessage
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import connection
from django.http import HttpRequest
from django.test.utils import CaptureQueriesContext

from django_pydantic_agent.chat_history import (
    AGUIAgent,
    AGUIStorageAgent,
    Chat,
    ChatCreate,
    ChatRepositoryLike,
    Message,
    MessageCreate,
    MessageRepositoryLike,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    Reasoning,
    StreamPersistenceManager,
    ToolCall,
)
from django_pydantic_agent.chat_history.records import detached
from django_pydantic_agent.contrib.store.models import StoredMessage
from django_pydantic_agent.contrib.store.repositories import (
    OrmChatRepository,
    OrmMessageRepository,
)
from django_pydantic_agent.contrib.store.rows import saved_wire
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import (
    AnonymousOperationError,
    Conversation,
    StoreLimitError,
    store_repositories,
)
from django_pydantic_agent.testing.agui_script import (
    RE,
    RF,
    RS,
    TMC,
    TME,
    TMS,
    ScriptedAgent,
    run_input,
)
from django_pydantic_agent.testing.chat_history import ChatHistoryContract, OpenRepositories


class TestOrmRepositories(ChatHistoryContract):
    """Every fresh pair starts with cold caches, as on another worker."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [
        pytest.mark.asyncio,
        pytest.mark.django_db(transaction=True),
    ]

    @pytest.fixture
    def open_repositories(self) -> OpenRepositories:
        def open_pair() -> tuple[OrmChatRepository, OrmMessageRepository]:
            chats = OrmChatRepository()
            return chats, OrmMessageRepository(chats)

        return open_pair


# -- through DefaultConversationStore.repositories(request=...) -------------------------------


class _Gated(AGUIAgent):
    """Streams an answer in two halves and waits on ``gate`` in between."""

    def __init__(self, run_id: str, message_id: str, *, thread_id: str = "t1") -> None:
        self.name = "gated"
        self.run_id, self.message_id, self.thread_id = run_id, message_id, thread_id
        self.halfway = asyncio.Event()
        self.gate = asyncio.Event()

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        yield RS(self.run_id, self.thread_id)
        yield TMS(self.message_id)
        yield TMC(self.message_id, "first half, ")
        self.halfway.set()
        await self.gate.wait()
        yield TMC(self.message_id, "second half")
        yield TME(self.message_id)
        yield RF(self.run_id, self.thread_id)


async def _pair(store: DefaultConversationStore, request: HttpRequest) -> Any:
    return await store.repositories(request=request)


async def _play(
    store: DefaultConversationStore, request: HttpRequest, inner: AGUIAgent, input: RunAgentInput
) -> list[BaseEvent]:
    chats, messages = await store.repositories(request=request)
    assert chats.user_uuid is not None
    user = chats.user_uuid
    async with StreamPersistenceManager(
        lambda: AGUIStorageAgent("assistant", user, chats, messages, inner, flush_interval=0.01)
    ) as manager:
        handle = await manager.run(input)
        events = [event async for event in handle.events()]
        await handle.wait()
    return events


def _answer(run_id: str, message_id: str, *parts: str) -> ScriptedAgent:
    return ScriptedAgent(
        RS(run_id),
        TMS(message_id),
        *(TMC(message_id, p) for p in parts),
        TME(message_id),
        RF(run_id),
    )


pytestmark = [pytest.mark.django_db(transaction=True)]


async def test_a_run_lands_in_the_thread_load_and_list_show_with_statuses(
    alice: User, request_as: Callable[[Any], HttpRequest]
) -> None:
    store = DefaultConversationStore()
    request = request_as(alice)
    await _play(store, request, _answer("r1", "m1", "Hi ", "there"), run_input())
    failing = ScriptedAgent(RS("r2"), TMS("m2"), TMC("m2", "half"), RE("boom", code="X"))
    await _play(
        store, request, failing, run_input(UserMessage(id="u2", content="again"), run_id="r2")
    )

    conversation = await store.load("t1", request=request)
    assert conversation is not None
    shown = [(m["role"], m["id"], m.get("content"), m["status"]) for m in conversation.messages]
    assert shown == [
        ("user", "u1", "Hello", "complete"),
        ("assistant", "m1", "Hi there", "complete"),
        ("user", "u2", "again", "complete"),
        ("assistant", "m2", "half", "errored"),
    ]
    (meta,) = await store.list(request=request)
    assert (meta.thread_id, meta.title, meta.preview) == ("t1", "Hello", "half")


async def test_a_strangers_thread_is_invisible_through_the_repositories(
    alice: User, bob: User, request_as: Callable[[Any], HttpRequest]
) -> None:
    store = DefaultConversationStore()
    await _play(store, request_as(alice), _answer("r1", "m1", "secret"), run_input())
    alice_chats, alice_messages = await _pair(store, request_as(alice))
    chat = await alice_chats.get_chat_by_thread_id(alice_chats.user_uuid, "t1")
    assert chat is not None
    stored = await alice_messages.get_chat_messages(chat.chat_uuid)
    (answer,) = [m for m in stored if m.role == "assistant"]

    bob_chats, bob_messages = await _pair(store, request_as(bob))
    assert await bob_chats.get_chat_by_thread_id(bob_chats.user_uuid, "t1") is None
    assert await bob_chats.get_chat_by_thread_id(alice_chats.user_uuid, "t1") is None
    assert await bob_chats.get_all_chats(None) == []
    assert await bob_chats.get_all_chats(alice_chats.user_uuid) == []
    assert await bob_messages.get_chat_messages(chat.chat_uuid) == []
    assert await bob_messages.get_message(answer.message_uuid) is None
    assert await bob_messages.update_message(answer.message_uuid, MessageUpdate(status="x")) is None
    assert await bob_chats.update_chat_name(chat.chat_uuid, "mine") is None
    assert await bob_chats.delete_chat(chat.chat_uuid) is None
    with pytest.raises(ValueError, match="serves the user"):
        await bob_chats.create_chat(ChatCreate(thread_id="t1", user_uuid=alice_chats.user_uuid))
    # Bob's own thread of the same id is a different thread.
    await _play(store, request_as(bob), _answer("r1", "m1", "his"), run_input())
    alice_view = await store.load("t1", request=request_as(alice))
    assert alice_view is not None
    assert [m.get("content") for m in alice_view.messages] == ["Hello", "secret"]


async def test_a_new_thread_over_the_owners_quota_is_refused(
    alice: User, request_as: Callable[[Any], HttpRequest]
) -> None:
    store = DefaultConversationStore(max_threads_per_owner=1)
    request = request_as(alice)
    await store.save(
        Conversation(thread_id="kept", messages=[{"id": "u", "role": "user", "content": "x"}]),
        request=request,
    )
    chats, _ = await _pair(store, request)
    with pytest.raises(StoreLimitError, match="max_threads_per_owner=1"):
        await chats.create_chat(ChatCreate(thread_id="t-new", user_uuid=chats.user_uuid))
    assert await store.exists("t-new", request=request) is False
    again = await chats.create_chat(ChatCreate(thread_id="kept", user_uuid=chats.user_uuid))
    assert again.thread_id == "kept"


async def test_without_a_quota_the_early_check_costs_no_trip_to_a_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every run asks before its first event; with nothing to check, asking is free.
    from django_pydantic_agent.contrib.store import repositories

    def no_trip(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("refuse_over_quota took a trip to a worker thread")

    monkeypatch.setattr(repositories, "unit_of_work", no_trip)
    await OrmChatRepository(owner_id="owner-free").refuse_over_quota("t-any")
    await OrmChatRepository().refuse_over_quota("t-any")
    capped = OrmChatRepository(owner_id="owner-capped", max_threads_per_owner=1)
    with pytest.raises(AssertionError, match="took a trip"):
        await capped.refuse_over_quota("t-any")  # a quota is checked in the database


async def test_a_thread_deleted_during_a_run_stays_deleted(
    alice: User, request_as: Callable[[Any], HttpRequest]
) -> None:
    store = DefaultConversationStore()
    request = request_as(alice)
    inner = _Gated("r1", "m1")
    run = asyncio.create_task(_play(store, request, inner, run_input()))
    await inner.halfway.wait()
    await asyncio.sleep(0.05)  # a flush of the first half lands
    assert await store.exists("t1", request=request)
    await store.delete("t1", request=request)
    inner.gate.set()
    events = await run
    assert events[-1].type == "RUN_FINISHED"
    assert await store.exists("t1", request=request) is False
    assert await store.load("t1", request=request) is None
    assert await sync_to_async(StoredMessage.objects.count)() == 0


async def test_two_tabs_running_on_one_thread_both_land_in_order(
    alice: User, request_as: Callable[[Any], HttpRequest]
) -> None:
    store = DefaultConversationStore()
    request = request_as(alice)
    await _play(store, request, _answer("r0", "m0", "first"), run_input())
    left, right = _Gated("r1", "a1"), _Gated("r2", "a2")
    tabs = [
        asyncio.create_task(
            _play(
                store, request, left, run_input(UserMessage(id="u1b", content="left"), run_id="r1")
            )
        ),
        asyncio.create_task(
            _play(
                store,
                request,
                right,
                run_input(UserMessage(id="u2b", content="right"), run_id="r2"),
            )
        ),
    ]
    await left.halfway.wait()
    await right.halfway.wait()
    right.gate.set()
    left.gate.set()
    await asyncio.gather(*tabs)

    conversation = await store.load("t1", request=request)
    assert conversation is not None
    shown = {(m["id"], m.get("content")) for m in conversation.messages}
    assert shown == {
        ("u1", "Hello"),
        ("m0", "first"),
        ("u1b", "left"),
        ("u2b", "right"),
        ("a1", "first half, second half"),
        ("a2", "first half, second half"),
    }
    assert len(conversation.messages) == 6
    statuses = {m["status"] for m in conversation.messages}
    assert statuses == {"complete"}


# -- query counts ---------------------------------------------------------------------------


class _Queries:
    """``CaptureQueriesContext`` on the connection of the ORM's worker thread."""

    def __init__(self) -> None:
        self.context = CaptureQueriesContext(connection)
        self.sql: list[str] = []

    async def __aenter__(self) -> _Queries:
        await sync_to_async(self._enter)()
        return self

    def _enter(self) -> None:
        self.context = CaptureQueriesContext(connection)
        self.context.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        await sync_to_async(self._exit)()

    def _exit(self) -> None:
        self.context.__exit__(None, None, None)
        self.sql = [q["sql"] for q in self.context.captured_queries]


async def _turn(messages: OrmMessageRepository, chat: Any, n: int) -> Message:
    """One flush: a new answer created with its first text, then a delta and completion."""
    async with messages.transaction():
        created = await messages.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", content=f"answer {n}")
        )
    return created


async def _long_thread(owner: str, contents: list[str]) -> tuple[OrmMessageRepository, Chat]:
    """The owner's thread ``long`` holding one message per content, written in one transaction."""
    chats = OrmChatRepository(owner_id=owner)
    messages = OrmMessageRepository(chats)
    chat = await chats.create_chat(ChatCreate(thread_id="long", user_uuid=chats.user_uuid))
    async with messages.transaction():
        for content in contents:
            await messages.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content=content))
    return messages, chat


async def test_an_append_costs_the_same_queries_at_message_1000_as_at_10() -> None:
    messages, chat = await _long_thread("owner-q", [f"{n}" for n in range(9)])

    async def costs() -> tuple[list[str], list[str]]:
        async with _Queries() as create:
            made = await _turn(messages, chat, 0)
        async with _Queries() as grow:
            await messages.update_message(
                made.message_uuid,
                MessageUpdate(
                    content_delta=" more", content_offset=len(made.content), status="complete"
                ),
            )
        return create.sql, grow.sql

    create_10, grow_10 = await costs()
    async with messages.transaction():
        for n in range(990):
            await messages.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content=f"{n}"))
    create_1000, grow_1000 = await costs()

    assert len(create_10) == len(create_1000)
    assert len(grow_10) == len(grow_1000)
    # One transaction each: lock the thread row, write, touch the thread row.
    inserts = [q for q in create_1000 if q.startswith("INSERT")]
    updates = [q for q in grow_1000 if 'UPDATE "django_pydantic_agent_store_storedmessage"' in q]
    assert len(inserts) == 1
    assert len(updates) == 1
    assert "answer 0" not in updates[0]  # O(delta): the stored prefix is not resent
    assert " more" in updates[0]
    assert len(create_1000) <= 6
    assert len(grow_1000) <= 6
    stored = await OrmMessageRepository(OrmChatRepository(owner_id="owner-q")).get_chat_messages(
        chat.chat_uuid
    )
    assert len(stored) == 1001
    assert (stored[-1].content, stored[-1].status) == ("answer 0 more", "complete")
    assert [m.sequence_id for m in stored] == list(range(1, 1002))


async def test_a_flush_of_many_changes_is_one_transaction_in_one_thread_hop() -> None:
    chats = OrmChatRepository(owner_id="owner-f")
    messages = OrmMessageRepository(chats)
    chat = await chats.create_chat(ChatCreate(thread_id="f", user_uuid=chats.user_uuid))
    async with _Queries() as flush, messages.transaction():
        answer = await messages.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", content="a")
        )
        await messages.create_message_tool_call(
            MessageToolCallCreate(message_uuid=answer.message_uuid, tool_call_id="c1")
        )
        await messages.update_message(
            answer.message_uuid, MessageUpdate(content_delta="b", content_offset=1)
        )
        await messages.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="u"))
    writes = [q for q in flush.sql if q.split()[0] in {"INSERT", "UPDATE", "SELECT"}]
    assert len([q for q in writes if q.startswith("INSERT")]) == 1  # one bulk INSERT
    assert len(flush.sql) <= 6
    (stored, user) = await OrmMessageRepository(OrmChatRepository()).get_chat_messages(
        chat.chat_uuid
    )
    assert (stored.content, [c.tool_call_id for c in stored.tool_calls]) == ("ab", ["c1"])
    assert user.content == "u"


async def test_a_failed_flush_writes_nothing_and_keeps_the_cache_as_before() -> None:
    chats = OrmChatRepository(owner_id="owner-r")
    messages = OrmMessageRepository(chats)
    chat = await chats.create_chat(ChatCreate(thread_id="r", user_uuid=chats.user_uuid))
    kept = await messages.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="kept"))

    async def failing_flush() -> None:
        async with messages.transaction():
            await messages.update_message(kept.message_uuid, MessageUpdate(content="changed"))
            await messages.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="new"))
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        await failing_flush()
    assert [m.content for m in await messages.get_chat_messages(chat.chat_uuid)] == ["kept"]
    fresh = await messages.get_message(kept.message_uuid)
    assert fresh is not None
    assert fresh.content == "kept"


def _count_copies(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The records ``OrmMessageRepository`` copies from now on (to hand out or to snapshot)."""
    copies: list[object] = []
    real_copy = OrmMessageRepository._copy

    def counting(message: Any) -> Any:
        copies.append(message)
        return real_copy(message)

    monkeypatch.setattr(OrmMessageRepository, "_copy", staticmethod(counting))
    return copies


async def test_a_flush_copies_only_what_it_writes_however_long_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: every transaction deep-copied each cached record of the thread as its
    rollback snapshot, so a turn at message 1,000 cost about 13 times one at message 10 on the
    run path (bench/runpath.py). A flush now copies the records it writes, not the thread."""
    messages, chat = await _long_thread("owner-long", [f"m{i}" for i in range(200)])
    last = (await messages.get_chat_messages(chat.chat_uuid))[-1]
    copies = _count_copies(monkeypatch)
    async with messages.transaction():
        await messages.update_message(last.message_uuid, MessageUpdate(content="grown"))
        await messages.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="next"))
    assert len(copies) <= 4
    monkeypatch.undo()
    stored = await messages.get_chat_messages(chat.chat_uuid)
    assert [m.content for m in stored[-2:]] == ["grown", "next"]
    assert len(stored) == 201


def test_a_detached_record_is_a_deep_copy_sharing_nothing_that_can_change() -> None:
    """``detached`` stands for ``model_copy(deep=True)`` on every record the repository hands
    out: equal, and no list or dict (nested ones included) shared with the cached record."""
    parts = [{"type": "text", "text": "q", "meta": {"k": [1]}}]
    record = Message(
        role="assistant",
        content="a",
        content_parts=parts,
        wire_extra={"metadata": {"attachments": [{"id": "x"}]}},
        run_outcome={"type": "interrupt", "interrupts": [{"toolCallId": "c1"}]},
        tool_calls=[
            # an unknown key, kept as an extra (nested records keep them)
            ToolCall(tool_call_id="c1", name="n", content_parts=[{"type": "t"}], custom=["x"])
        ],
        reasonings=[Reasoning(content="t")],
    )
    record._sequence_id = 7
    assert record.wire_extra is not None
    assert record.content_parts is not None
    record.wire_extra["again"] = record.content_parts
    copy = detached(record)
    assert copy == record.model_copy(deep=True)
    assert copy.model_dump() == record.model_dump()
    assert copy._sequence_id == 7
    assert copy.content_parts is not None
    assert copy.wire_extra is not None
    assert copy.content_parts[0]["meta"]["k"] is not record.content_parts[0]["meta"]["k"]
    assert copy.wire_extra["again"] is copy.content_parts  # shared inside, as deep copies keep
    assert copy.tool_calls[0] is not record.tool_calls[0]
    assert copy.tool_calls[0].content_parts is not record.tool_calls[0].content_parts
    assert copy.reasonings is not record.reasonings
    call, original = copy.tool_calls[0], record.tool_calls[0]
    assert call.model_extra == {"custom": ["x"]}
    assert original.model_extra is not None
    assert call.model_extra["custom"] is not original.model_extra["custom"]


async def test_a_record_read_and_changed_by_a_caller_leaves_the_cache_as_stored() -> None:
    chats = OrmChatRepository(owner_id="owner-detached")
    messages = OrmMessageRepository(chats)
    chat = await chats.create_chat(ChatCreate(thread_id="d", user_uuid=chats.user_uuid))
    await messages.create_message(
        MessageCreate(
            chat_uuid=chat.chat_uuid,
            content="q",
            content_parts=[{"type": "text", "text": "q"}],
            wire_extra={"metadata": {"attachments": [{"id": "x"}]}},
        )
    )
    (read,) = await messages.get_recent_messages(chat.chat_uuid, 10)
    assert read.content_parts is not None
    assert read.wire_extra is not None
    read.content_parts[0]["text"] = "changed"
    read.wire_extra["metadata"]["attachments"].append({"id": "y"})
    read.tool_calls.append(ToolCall(name="invented"))
    (again,) = await messages.get_recent_messages(chat.chat_uuid, 10)
    assert again.content_parts == [{"type": "text", "text": "q"}]
    assert again.wire_extra == {"metadata": {"attachments": [{"id": "x"}]}}
    assert again.tool_calls == []


async def test_a_cold_read_hands_out_records_it_does_not_share_and_writes_them_unqueried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's repository reads the window on a cold cache and hands its records out without
    copying them: a caller's change to one stays out of what is written and read next, a
    write to a window record reads no row again, and a failed write leaves it as stored."""
    chats = OrmChatRepository(owner_id="owner-cold")
    writer = OrmMessageRepository(chats)
    chat = await chats.create_chat(ChatCreate(thread_id="cold", user_uuid=chats.user_uuid))
    question = await writer.create_message(MessageCreate(chat_uuid=chat.chat_uuid, content="q"))
    answer = await writer.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", content="a")
    )
    call = await writer.create_message_tool_call(
        MessageToolCallCreate(message_uuid=answer.message_uuid, name="lookup", arguments="{}")
    )
    copies = _count_copies(monkeypatch)
    run = OrmMessageRepository(OrmChatRepository(owner_id="owner-cold"))
    first, second = await run.get_recent_messages(chat.chat_uuid, 10)
    assert copies == []
    first.content = "changed by the caller"
    second.tool_calls[0].content = "invented"
    async with _Queries() as queries:
        updated = await run.update_message_tool_call(
            call.uuid, MessageToolCallUpdate(content="found")
        )
    assert updated is not None
    assert updated.content == "found"
    assert not [sql for sql in queries.sql if sql.lstrip().upper().startswith("SELECT")]

    async def failing() -> None:
        async with run.transaction():
            await run.update_message(question.message_uuid, MessageUpdate(content="lost"))
            raise RuntimeError("inside")

    with pytest.raises(RuntimeError, match="inside"):
        await failing()
    await run.update_message(question.message_uuid, MessageUpdate(status="complete"))
    stored = await OrmMessageRepository(chats).get_chat_messages(chat.chat_uuid)
    assert [m.content for m in stored] == ["q", "a"]
    assert [c.content for c in stored[1].tool_calls] == ["found"]
    assert stored[0].status == "complete"


async def test_a_read_of_records_fetches_only_the_columns_a_record_is_made_of(
    alice: User, request_as: Callable[[Any], HttpRequest]
) -> None:
    """The run path reads a window of rows per run: it builds no model instance and decodes no
    ``wire`` (a saved thread's messages, verbatim) for a row it only turns into a record."""
    store = DefaultConversationStore()
    request = request_as(alice)
    wire = [
        {"id": "u1", "role": "user", "content": "weather?", "attachments": [{"id": "x"}]},
        {"id": "a1", "role": "assistant", "content": "It is sunny"},
    ]
    await store.save(Conversation(thread_id="cols", messages=wire), request=request)
    chats, messages = await _pair(store, request)
    chat = await chats.get_chat_by_thread_id(chats.user_uuid, "cols")
    assert chat is not None
    async with _Queries() as reads:
        recent = await messages.get_recent_messages(chat.chat_uuid, 10)
        whole = await messages.get_chat_messages(chat.chat_uuid)
        echo = await messages.get_message_by_agui_id(chat.chat_uuid, "a1")
    for read in (recent, whole):
        assert [(m.agui_id, m.content, m.sequence_id) for m in read] == [
            ("u1", "weather?", 1),
            ("a1", "It is sunny", 2),
        ]
    assert recent[0].wire_extra == {"attachments": [{"id": "x"}]}
    assert echo is not None
    assert echo.content == "It is sunny"
    selects = [q for q in reads.sql if 'FROM "django_pydantic_agent_store_storedmessage"' in q]
    assert len(selects) >= 3
    assert all('"wire"' not in q and '"parent_uuid"' not in q for q in selects)


async def test_threads_saved_whole_are_records_and_render_once_a_run_changes_them(
    alice: User, request_as: Callable[[Any], HttpRequest]
) -> None:
    store = DefaultConversationStore()
    request = request_as(alice)
    wire = [
        {"id": "u1", "role": "user", "content": "weather?", "attachments": [{"id": "x"}]},
        {"id": "r1", "role": "reasoning", "content": "think"},
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"id": "t1r", "role": "tool", "toolCallId": "c1", "content": "sunny"},
        {"id": "a2", "role": "assistant", "content": "It is sunny"},
    ]
    await store.save(Conversation(thread_id="old", messages=wire), request=request)
    chats, messages = await _pair(store, request)
    chat = await chats.get_chat_by_thread_id(chats.user_uuid, "old")
    assert chat is not None
    records = await messages.get_chat_messages(chat.chat_uuid)
    assert [(m.role, m.agui_id, m.content, m.status) for m in records] == [
        ("user", "u1", "weather?", "complete"),
        ("assistant", "a1", "", "complete"),
        ("assistant", "a2", "It is sunny", "complete"),
    ]
    (call,) = records[1].tool_calls
    assert (call.tool_call_id, call.content, call.result_message_id) == ("c1", "sunny", "t1r")
    assert [s.content for s in records[1].reasonings] == ["think"]
    # Unchanged, the thread loads exactly as saved.
    loaded = await store.load("old", request=request)
    assert loaded is not None
    assert loaded.messages == wire

    # Another reader agrees on the ids; a write to a saved record clears its saved wire only.
    fresh = OrmMessageRepository(OrmChatRepository(owner_id=chats.owner_id))
    again = await fresh.get_chat_messages(chat.chat_uuid)
    assert [m.message_uuid for m in again] == [m.message_uuid for m in records]
    await fresh.update_message(again[2].message_uuid, MessageUpdate(status="interrupted"))
    rows = await sync_to_async(list)(StoredMessage.objects.order_by("position"))
    assert [row.message_uuid for row in rows] == [m.message_uuid for m in records]
    assert [saved_wire(row) for row in rows] == [wire[:1], wire[1:4], None]
    after = await OrmMessageRepository(OrmChatRepository()).get_chat_messages(chat.chat_uuid)
    assert [(m.message_uuid, m.status) for m in after] == [
        (records[0].message_uuid, "complete"),
        (records[1].message_uuid, "complete"),
        (records[2].message_uuid, "interrupted"),
    ]
    assert after[1].tool_calls[0].content == "sunny"

    shown = await store.load("old", request=request)
    assert shown is not None
    assert shown.messages[0]["attachments"] == [{"id": "x"}]  # unmodelled keys survive
    # What the run did not change loads as saved; the changed record is rendered.
    assert shown.messages[:4] == wire[:4]
    assert [(m["role"], m["id"], m["status"]) for m in shown.messages[4:]] == [
        ("assistant", "a2", "interrupted")
    ]
    # Saving the loaded list back keeps it, verbatim.
    await store.save(shown, request=request)
    reloaded = await store.load("old", request=request)
    assert reloaded is not None
    assert reloaded.messages == shown.messages


async def test_the_store_offers_the_pair_and_refuses_anonymous_requests(
    alice: User, request_as: Callable[[Any], HttpRequest]
) -> None:
    store = DefaultConversationStore()
    pair = await store_repositories(store, request=request_as(alice))
    assert pair is not None
    chats, messages = pair
    assert isinstance(chats, ChatRepositoryLike)
    assert isinstance(messages, MessageRepositoryLike)
    with pytest.raises(AnonymousOperationError):
        await store.repositories(request=request_as(None))
