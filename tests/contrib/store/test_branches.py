"""The message tree of ``DefaultConversationStore``: branches, switching, save and fork."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest
from django.test.utils import CaptureQueriesContext

from django_pydantic_agent.chat_history import ChatCreate, MessageCreate
from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import Conversation

pytestmark = pytest.mark.django_db(transaction=True)

SAVED = [
    {"id": "u1", "role": "user", "content": "first"},
    {"id": "a1", "role": "assistant", "content": "answer one"},
    {"id": "u2", "role": "user", "content": "second"},
    {"id": "a2", "role": "assistant", "content": "answer two"},
]


async def branched(store: DefaultConversationStore, request: HttpRequest) -> None:
    """Thread ``t``: the saved list, then ``a2`` regenerated as ``a2b`` by a run."""
    await store.save(Conversation(thread_id="t", messages=SAVED), request=request)
    chats, messages = await store.repositories(request=request)
    chat = await chats.get_chat_by_thread_id(chats.user_uuid, "t")
    assert chat is not None
    history = await messages.get_chat_messages(chat.chat_uuid)
    async with messages.transaction():
        await messages.start_branch(chat.chat_uuid, history[3].message_uuid)
        await messages.create_message(
            MessageCreate(
                chat_uuid=chat.chat_uuid,
                role="assistant",
                content="answer two, again",
                agui_id="a2b",
            )
        )


def ids(conversation: Conversation | None) -> list[str]:
    assert conversation is not None
    return [m["id"] for m in conversation.messages]


async def test_a_new_branch_keeps_the_old_one_and_load_returns_the_active_one(
    alice: Any, request_as: Callable[[Any], HttpRequest]
) -> None:
    store, request = DefaultConversationStore(), request_as(alice)
    await branched(store, request)
    assert ids(await store.load("t", request=request)) == ["u1", "a1", "u2", "a2b"]
    points = await store.branch_points("t", request=request)
    assert points is not None
    assert {key: (p.siblings, p.index) for key, p in points.items()} == {"a2b": (("a2", "a2b"), 1)}
    assert await StoredMessage.objects.filter(active=False).acount() == 1
    # Switch back: the old answer, exactly as saved.
    assert await store.activate("t", "a2", request=request)
    loaded = await store.load("t", request=request)
    assert loaded is not None
    assert loaded.messages == SAVED
    assert not await store.activate("t", "nope", request=request)


async def test_load_of_a_branched_thread_is_one_query_and_branch_points_two(
    alice: Any, request_as: Callable[[Any], HttpRequest]
) -> None:
    store, request = DefaultConversationStore(), request_as(alice)
    await branched(store, request)
    assert await store.activate("t", "a2", request=request)  # every active row as saved

    def counted() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as load:
            store._fetch("t", store._owner(request))
        with CaptureQueriesContext(connection) as points:
            store._branch_points_sync("t", request)
        return len(load.captured_queries), len(points.captured_queries)

    loads, points = await sync_to_async(counted)()
    assert loads == 1
    assert points <= 3  # the owner's session lookup aside: the thread row, then its nodes


async def test_a_switch_flips_only_the_rows_that_change(
    alice: Any, request_as: Callable[[Any], HttpRequest]
) -> None:
    store, request = DefaultConversationStore(), request_as(alice)
    await branched(store, request)

    def switch() -> list[str]:
        with CaptureQueriesContext(connection) as queries:
            store._activate_sync("t", "a2", request)
        return [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]

    updates = await sync_to_async(switch)()
    # One row off, one row on, the thread's active branch.
    assert len(updates) == 3
    active = [
        m
        async for m in StoredMessage.objects.filter(active=True)
        .order_by("position")
        .values_list("message_id", flat=True)
    ]
    assert active == ["u1", "a1", "u2", "a2"]


async def test_a_save_keeps_the_other_branches_or_drops_those_below_what_it_drops(
    alice: Any, request_as: Callable[[Any], HttpRequest]
) -> None:
    store, request = DefaultConversationStore(), request_as(alice)
    await branched(store, request)
    current = await store.load("t", request=request)
    assert current is not None
    more = [*current.messages, {"id": "u3", "role": "user", "content": "third"}]
    await store.save(Conversation(thread_id="t", messages=more), request=request)
    assert ids(await store.load("t", request=request)) == ["u1", "a1", "u2", "a2b", "u3"]
    assert await StoredMessage.objects.filter(message_id="a2", active=False).aexists()
    assert await store.activate("t", "a2", request=request)
    assert ids(await store.load("t", request=request)) == ["u1", "a1", "u2", "a2"]
    # A save that drops u2 drops both answers to it, whichever branch they are on.
    await store.save(Conversation(thread_id="t", messages=SAVED[:2]), request=request)
    assert ids(await store.load("t", request=request)) == ["u1", "a1"]
    assert await StoredMessage.objects.acount() == 2
    assert await store.branch_points("t", request=request) == {}


async def test_branch_operations_are_owner_scoped(
    alice: Any, bob: Any, request_as: Callable[[Any], HttpRequest]
) -> None:
    store = DefaultConversationStore()
    await branched(store, request_as(alice))
    stranger = request_as(bob)
    assert await store.branch_points("t", request=stranger) is None
    assert not await store.activate("t", "a2", request=stranger)
    assert not await store.fork("t", "a1", "copy", request=stranger)
    assert await StoredConversation.objects.acount() == 1
    assert await StoredMessage.objects.filter(message_id="a2b", active=True).aexists()


async def test_fork_copies_the_active_branch_under_new_uuids(
    alice: Any, request_as: Callable[[Any], HttpRequest]
) -> None:
    store, request = DefaultConversationStore(), request_as(alice)
    await branched(store, request)
    assert await store.fork("t", "u2", "copy", request=request)
    assert ids(await store.load("copy", request=request)) == ["u1", "a1", "u2"]
    copied = [u async for u in StoredMessage.objects.values_list("message_uuid", flat=True)]
    assert len(copied) == len(set(copied)) == 5 + 3
    assert not await store.fork("t", "nope", "copy-2", request=request)
    assert not await store.fork("missing", "u1", "copy-3", request=request)
    # The fork is a thread of its own: it can branch without touching the source.
    chats, messages = await store.repositories(request=request)
    chat = await chats.get_chat_by_thread_id(chats.user_uuid, "copy")
    assert chat is not None
    history = await messages.get_chat_messages(chat.chat_uuid)
    async with messages.transaction():
        await messages.start_branch(chat.chat_uuid, history[2].message_uuid)
    assert ids(await store.load("copy", request=request)) == ["u1", "a1"]
    assert ids(await store.load("t", request=request)) == ["u1", "a1", "u2", "a2b"]


async def _asked(
    store: DefaultConversationStore, request: HttpRequest, thread_id: str, question: str
) -> tuple[Any, Any]:
    """A new thread holding the user's ``question`` as ``u1``: its messages repository and chat."""
    chats, messages = await store.repositories(request=request)
    chat = await chats.create_chat(ChatCreate(thread_id=thread_id, user_uuid=chats.user_uuid))
    await messages.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role="user", content=question, agui_id="u1")
    )
    return messages, chat


async def test_fork_copies_a_streaming_message_as_interrupted(
    alice: Any, request_as: Callable[[Any], HttpRequest]
) -> None:
    store, request = DefaultConversationStore(), request_as(alice)
    messages, chat = await _asked(store, request, "live", "go")
    streaming = await messages.create_message(
        MessageCreate(
            chat_uuid=chat.chat_uuid,
            role="assistant",
            content="half an ans",
            agui_id="a1",
            in_progress=True,
            status="active",
        )
    )
    assert streaming.status == "active"
    assert await store.fork("live", "a1", "snapshot", request=request)
    loaded = await store.load("snapshot", request=request)
    assert loaded is not None
    assert loaded.messages[-1]["status"] == "interrupted"
    assert loaded.messages[-1]["content"] == "half an ans"
    source = await store.load("live", request=request)
    assert source is not None
    assert source.messages[-1]["status"] == "active"


async def test_the_admin_shows_both_answers_under_the_question_the_active_one_marked(
    alice: Any, request_as: Callable[[Any], HttpRequest], admin_client: Any
) -> None:
    store, request = DefaultConversationStore(), request_as(alice)
    await branched(store, request)
    thread = await StoredConversation.objects.aget(thread_id="t")
    page = await sync_to_async(admin_client.get)(
        f"/admin/django_pydantic_agent_store/storedconversation/{thread.pk}/change/"
    )
    text = page.content.decode()
    rows = text[text.index("answer one") :]  # the inline, from its second message on
    again = rows.index("answer two, again")
    old = [i for i in range(len(rows)) if rows.startswith("answer two", i)]
    old = [i for i in old if not rows.startswith("answer two, again", i)]
    # The tree (tests/contrib/store/test_admin_tree.py): the versions in order, under the
    # question they answer, the regenerated one on the active branch.
    assert rows.index("second") < old[0] < again
    assert rows.count("version 1 of 2") == rows.count("version 2 of 2") == 1
    assert rows.index("version 1 of 2") < old[0] < rows.index("version 2 of 2") < again


async def test_fork_at_a_tool_result_takes_the_whole_record_and_stops_running_calls(
    alice: Any, request_as: Callable[[Any], HttpRequest]
) -> None:
    from django_pydantic_agent.chat_history import MessageToolCallCreate

    store, request = DefaultConversationStore(), request_as(alice)
    messages, chat = await _asked(store, request, "tools", "add")
    answer = await messages.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", agui_id="a1")
    )
    done = await messages.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=answer.message_uuid,
            agui_id="c1",
            tool_call_id="c1",
            name="add",
            result_message_id="t1",
            content="5",
            has_result=True,
            status="complete",
        )
    )
    running = await messages.create_message_tool_call(
        MessageToolCallCreate(
            message_uuid=answer.message_uuid, agui_id="c2", name="slow", status="active"
        )
    )
    loaded = await store.load("tools", request=request)
    assert loaded is not None
    assert "t1" in [m["id"] for m in loaded.messages]
    assert await store.fork("tools", "t1", "copy", request=request)
    copy = await store.load("copy", request=request)
    assert copy is not None
    assert [m["id"] for m in copy.messages] == [m["id"] for m in loaded.messages]
    row = await StoredMessage.objects.aget(conversation__thread_id="copy", message_id="a1")
    calls = {call["agui_id"]: call for call in row.tool_calls}
    assert calls["c2"]["status"] == "interrupted"
    assert calls["c1"]["uuid"] != str(done.uuid)
    assert calls["c2"]["uuid"] != str(running.uuid)
