"""Branches on the Memory Service repositories (``StartsBranches``), over real HTTP to the
emulator: cut and activate markers, the active branch every read returns, on any replica."""

from __future__ import annotations

import random
from uuid import UUID, uuid4

import pytest

from django_pydantic_agent.chat_history import (
    Chat,
    Message,
    MessageCreate,
    MessageUpdate,
    StartsBranches,
)
from django_pydantic_agent.chat_history.errors import ChatNotFoundError
from django_pydantic_agent.chat_history.memory_service import MessageRepository
from django_pydantic_agent.chat_history.memory_service._branches import (
    fold,
    is_marker,
    marker_fields,
    replay,
)
from django_pydantic_agent.chat_history.tree import BranchPoint
from django_pydantic_agent.contrib.memory_service_emulator import request_counter
from tests.chat_history import test_memory_service as base
from tests.chat_history.test_memory_service import Service, _chat

pytestmark = pytest.mark.django_db(transaction=True)

service = base.service
_clean_faults = base._clean_faults


def _said(chat: Chat, agui_id: str, role: str = "user") -> MessageCreate:
    return MessageCreate(
        chat_uuid=chat.chat_uuid,
        role=role,
        content=f"text of {agui_id}",
        agui_id=agui_id,
        status="complete",
        in_progress=False,
    )


async def _ids(messages: MessageRepository, chat: Chat) -> list[str | None]:
    return [m.agui_id for m in await messages.get_chat_messages(chat.chat_uuid)]


async def _branched(service: Service) -> tuple[Chat, MessageRepository]:
    """u1 a1 u2 a2, then a2 regenerated as b2 (a2 kept off the active branch)."""
    chats, messages, _ = service.repositories()
    chat = await _chat(chats, f"t-{uuid4().hex}")
    async with messages.transaction():
        for agui_id, role in [("u1", "user"), ("a1", "assistant"), ("u2", "user")]:
            await messages.create_message(_said(chat, agui_id, role))
        a2 = await messages.create_message(_said(chat, "a2", "assistant"))
    async with messages.transaction():
        await messages.start_branch(chat.chat_uuid, a2.message_uuid)
        await messages.create_message(_said(chat, "b2", "assistant"))
    return chat, messages


async def test_the_repository_keeps_branches(service: Service) -> None:
    _, messages, _ = service.repositories()
    assert isinstance(messages, StartsBranches)


async def test_a_cut_keeps_the_old_records_and_every_replica_reads_the_active_branch(
    service: Service,
) -> None:
    chat, messages = await _branched(service)
    _, cold, _ = service.repositories()
    assert await _ids(messages, chat) == ["u1", "a1", "u2", "b2"]
    assert await _ids(cold, chat) == ["u1", "a1", "u2", "b2"]
    assert await cold.branch_points(chat.chat_uuid) == {
        "b2": BranchPoint(siblings=("a2", "b2"), index=1)
    }
    tree = await cold.get_chat_tree(chat.chat_uuid)
    by_id = {m.agui_id: m.message_uuid for m, _, _ in tree}
    assert [(m.agui_id, parent, active) for m, parent, active in tree] == [
        ("u1", None, True),
        ("a1", by_id["u1"], True),
        ("u2", by_id["a1"], True),
        ("a2", by_id["u2"], False),
        ("b2", by_id["u2"], True),
    ]


async def test_a_window_read_on_a_cold_replica_returns_the_active_branch(
    service: Service,
) -> None:
    chat, messages = await _branched(service)
    assert await messages.activate(chat.chat_uuid, "a2")  # the marker is the newest event
    _, cold, _ = service.repositories()
    recent = await cold.get_recent_messages(chat.chat_uuid, 2)
    assert [m.agui_id for m in recent] == ["u2", "a2"]
    # More turns after the switch: a tail with no marker is the end of the active branch.
    async with messages.transaction():
        await messages.create_message(_said(chat, "u3"))
        await messages.create_message(_said(chat, "a3", "assistant"))
    _, colder, _ = service.repositories()
    request_counter.reset()
    recent = await colder.get_recent_messages(chat.chat_uuid, 2)
    assert [m.agui_id for m in recent] == ["u3", "a3"]
    assert request_counter.count(method="GET", route="event-list") == 1  # one lastN read
    last = await colder.get_last_messages([chat.chat_uuid])
    assert last[chat.chat_uuid].agui_id == "a3"


async def test_the_newest_message_after_a_switch_is_the_active_branchs(
    service: Service,
) -> None:
    chat, messages = await _branched(service)
    assert await messages.activate(chat.chat_uuid, "a2")
    _, cold, _ = service.repositories()
    last = await cold.get_last_messages([chat.chat_uuid])
    assert last[chat.chat_uuid].agui_id == "a2"  # not b2, the newest message event


async def test_activating_the_active_branch_writes_nothing(service: Service) -> None:
    chat, messages = await _branched(service)
    await messages.get_chat_messages(chat.chat_uuid)
    request_counter.reset()
    assert await messages.activate(chat.chat_uuid, "b2")
    assert request_counter.count(method="POST") == 0
    assert not await messages.activate(chat.chat_uuid, "nowhere")
    assert not await messages.activate(uuid4(), "b2")


async def test_a_cut_off_the_active_branch_is_refused_and_nothing_is_sent(
    service: Service,
) -> None:
    chat, messages = await _branched(service)
    tree = await messages.get_chat_tree(chat.chat_uuid)
    [a2] = [m for m, _, _ in tree if m.agui_id == "a2"]
    request_counter.reset()
    with pytest.raises(ValueError, match="is no message of chat"):
        async with messages.transaction():
            await messages.start_branch(chat.chat_uuid, a2.message_uuid)
    assert request_counter.count(method="POST") == 0
    assert await _ids(messages, chat) == ["u1", "a1", "u2", "b2"]


async def test_reads_inside_the_transaction_see_the_pending_cut(service: Service) -> None:
    chat, messages = await _branched(service)
    [u1] = [m for m in await messages.get_chat_messages(chat.chat_uuid) if m.agui_id == "u1"]
    async with messages.transaction():
        await messages.start_branch(chat.chat_uuid, u1.message_uuid)
        assert await _ids(messages, chat) == []
        await messages.create_message(_said(chat, "v1"))
        assert await _ids(messages, chat) == ["v1"]
    _, cold, _ = service.repositories()
    assert await _ids(cold, chat) == ["v1"]
    assert await cold.branch_points(chat.chat_uuid) == {
        "v1": BranchPoint(siblings=("u1", "v1"), index=1)
    }


@pytest.mark.parametrize("seed", range(40))
def test_replayed_events_fold_into_the_tree_they_were_made_from(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.randint(1, 12)
    parents: list[int | None] = [None]
    for index in range(1, size):
        parents.append(rng.choice([None, *range(index)]) if rng.random() < 0.4 else index - 1)
    leaf = rng.randrange(size)
    nodes = [UUID(int=i + 1) for i in range(size)]
    events = []
    for kind, index in replay(parents, leaf):
        if kind == "message":
            events.append(Message(message_uuid=nodes[index], role="user", content=str(index)))
        else:
            fields = marker_fields("cut" if kind == "cut" else "activate", nodes[index])
            events.append(Message(message_uuid=uuid4(), **fields))
    tree = fold(events)
    assert [tree.parent[node] for node in nodes] == [
        None if parent is None else nodes[parent] for parent in parents
    ]
    expected: list[UUID] = []
    current: int | None = leaf
    while current is not None:
        expected.insert(0, nodes[current])
        current = parents[current]
    assert tree.active == expected
    # Markers never show as messages.
    assert all(is_marker(e) == (e.message_uuid not in tree.parent) for e in events)


async def test_a_record_off_the_active_branch_is_still_updated_by_uuid(service: Service) -> None:
    # A run finishing its records (interrupted, errored) after a branch took them off the
    # active one still reaches them, on a cold replica too.
    chat, messages = await _branched(service)
    tree = await messages.get_chat_tree(chat.chat_uuid)
    [a2] = [m for m, _, active in tree if m.agui_id == "a2" and not active]
    _, cold, _ = service.repositories()
    updated = await cold.update_message(a2.message_uuid, MessageUpdate(status="interrupted"))
    assert updated is not None
    assert updated.status == "interrupted"
    _, colder, _ = service.repositories()
    statuses = {m.agui_id: m.status for m, _, _ in await colder.get_chat_tree(chat.chat_uuid)}
    assert statuses["a2"] == "interrupted"
    assert await _ids(colder, chat) == ["u1", "a1", "u2", "b2"]


def test_a_marker_the_fold_cannot_act_on_is_skipped() -> None:
    one, two = Message(role="user", content="1"), Message(role="assistant", content="2")
    unknown = Message(message_uuid=uuid4(), **marker_fields("cut", uuid4()))
    garbled = Message(message_uuid=uuid4(), **{**marker_fields("cut", one.message_uuid)})
    garbled.content = "cut not-a-uuid"
    off_branch = Message(message_uuid=uuid4(), **marker_fields("cut", two.message_uuid))
    tree = fold([one, unknown, garbled, two, one, off_branch])
    assert tree.active == [one.message_uuid]  # the repeated ``one`` is read once
    tree = fold([one, two, Message(**marker_fields("cut", two.message_uuid)), off_branch])
    assert tree.active == [one.message_uuid]


async def test_an_unknown_or_deleted_chat_has_no_branches(service: Service) -> None:
    chats, messages, _ = service.repositories()
    nowhere = uuid4()
    assert await messages.branch_points(nowhere) is None
    assert await messages.get_chat_tree(nowhere) == []
    with pytest.raises(ChatNotFoundError):
        await messages.start_branch(nowhere, uuid4())
    with pytest.raises(ChatNotFoundError):
        await messages.create_tree(nowhere, [None], 0, lambda index: _never())
    chat, messages = await _branched(service)
    [u1] = [m for m in await messages.get_chat_messages(chat.chat_uuid) if m.agui_id == "u1"]
    await chats.delete_chat(chat.chat_uuid)
    # A repository that still holds the chat's cache learns of the delete when it writes.
    with pytest.raises(ChatNotFoundError):
        await messages.start_branch(chat.chat_uuid, u1.message_uuid)
    assert not await service.repositories()[1].activate(chat.chat_uuid, "a2")


async def _never() -> UUID:  # pragma: no cover - create_tree refuses before it creates
    raise AssertionError("nothing is created in an unknown chat")
