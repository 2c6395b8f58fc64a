"""The four extension points of AGUIStorageAgent, each proven by a subclass."""

from __future__ import annotations

import asyncio
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    TextMessageContentEvent,
    UserMessage,
)

from django_pydantic_agent.chat_history import (
    AGUIStorageAgent,
    Chat,
    InMemoryChatRepository,
    InMemoryMessageRepository,
    Message,
    MessageCreate,
    MessageRepositoryLike,
    Reasoning,
    StorageState,
    ToolCall,
)
from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.chat_history.records import (
    MessageReasoningCreate,
    MessageToolCallCreate,
)
from django_pydantic_agent.chat_history.repositories import ChatRepositoryLike
from tests.chat_history.conftest import USER
from tests.chat_history.scripted import (
    ScriptedAgent,
    paced,
    rf,
    rs,
    run_input,
    tca,
    tce,
    tcs,
    text,
    tmc,
    tme,
    tms,
)


class TaggedToolCall(ToolCall):
    team: str = ""


class TaggedReasoning(Reasoning):
    team: str = ""


class TaggedMessage(Message):
    team: str = ""
    finished_at: str | None = None
    tags: list[str] = []
    tool_calls: list[TaggedToolCall] = []  # type: ignore[assignment]
    reasonings: list[TaggedReasoning] = []  # type: ignore[assignment]


def _repos() -> tuple[InMemoryChatRepository, InMemoryMessageRepository]:
    chats = InMemoryChatRepository()
    return chats, InMemoryMessageRepository(chats, message_class=TaggedMessage)


async def _stored(chats: InMemoryChatRepository, messages: Any) -> list[Any]:
    chat = await chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    return list(await messages.get_chat_messages(chat.chat_uuid))


class MyCustomEvent(CustomEvent):
    """An application event type."""


class LoudContent(TextMessageContentEvent):
    """A subclass of a known event: handled by its parent's handler."""


class DispatchingAgent(AGUIStorageAgent):
    unknown: list[str] = []

    @classmethod
    def event_handlers(cls) -> dict[type[BaseEvent], str]:
        return {**super().event_handlers(), MyCustomEvent: "handle_my_custom_event"}

    async def handle_my_custom_event(
        self, state: StorageState, chat: Chat, event: MyCustomEvent
    ) -> None:
        message = self.ensure_message(state, chat, None)
        message.changes["tags"] = [*message.changes.get("tags", []), str(event.value)]

    async def handle_unknown_event(self, state: StorageState, chat: Chat, event: BaseEvent) -> None:
        self.unknown.append(event.type.value)


async def test_event_handlers_registry_resolves_along_the_mro_and_falls_through() -> None:
    chats, messages = _repos()
    script = [
        rs(),
        tms("m1"),
        LoudContent(message_id="m1", delta="hi"),
        MyCustomEvent(name="tag", value="urgent"),
        CustomEvent(name="other", value=1),
        tme("m1"),
        rf(),
    ]
    agent = DispatchingAgent("assistant", USER, chats, messages, ScriptedAgent(script))
    agent.unknown = []
    [e async for e in agent.run(run_input())]
    stored = (await _stored(chats, messages))[1]
    assert (stored.content, stored.tags) == ("hi", ["urgent"])
    assert agent.unknown == ["CUSTOM"]


class StructuredTextAgent(AGUIStorageAgent):
    async def handle_text_message(self, state: StorageState, chat: Chat, event: Any) -> None:
        if isinstance(event, TextMessageContentEvent):
            event = event.model_copy(update={"delta": event.delta.upper()})
        await super().handle_text_message(state, chat, event)


async def test_category_handler_override_changes_what_is_stored() -> None:
    chats, messages = _repos()
    # Paced, as a model streams: the new thread is stored before the deltas come, so they are
    # folded as they pass, where the package folds its own handler's deltas without it.
    script = paced([rs(), *text("m1", "quiet ", "words"), rf()])
    agent = StructuredTextAgent("assistant", USER, chats, messages, ScriptedAgent(script))
    events = [e async for e in agent.run(run_input())]
    assert events[2].delta == "quiet "  # type: ignore[attr-defined]  # forwarded unchanged
    assert (await _stored(chats, messages))[1].content == "QUIET WORDS"


class HeldWrites(InMemoryMessageRepository):
    """Each message write takes a few loop turns, so the deltas after a flush begins wait
    for it and are folded when it ends."""

    async def create_message(self, message_data: Any) -> Message:
        await asyncio.sleep(0.005)
        return await super().create_message(message_data)

    async def update_message(self, message_uuid: Any, update: Any) -> Message | None:
        await asyncio.sleep(0.005)
        return await super().update_message(message_uuid, update)


async def test_deltas_that_waited_for_a_flush_reach_the_override_in_order() -> None:
    chats = InMemoryChatRepository()
    messages = HeldWrites(chats, message_class=TaggedMessage)
    words = [f"w{i} " for i in range(40)]
    script = paced([rs(), *text("m1", *words), rf()])
    agent = StructuredTextAgent(
        "assistant", USER, chats, messages, ScriptedAgent(script), minimal_chunk_to_persist=8
    )
    [e async for e in agent.run(run_input())]
    assert (await _stored(chats, messages))[1].content == "".join(words).upper()


class RoutedTextAgent(AGUIStorageAgent):
    """Text deltas go to a handler of its own (through the table, not an override)."""

    @classmethod
    def event_handlers(cls) -> dict[type[BaseEvent], str]:
        return {**super().event_handlers(), TextMessageContentEvent: "handle_delta"}

    async def handle_delta(self, state: StorageState, chat: Chat, event: Any) -> None:
        message = self.ensure_message(state, chat, event.message_id)
        self._append(state, message, f"[{event.delta}]")


async def test_a_text_delta_routed_to_another_handler_is_folded_by_it() -> None:
    # Deltas of the message being written are folded without a coroutine only while the
    # package's own handler would fold them: a table that routes them elsewhere is followed.
    chats, messages = _repos()
    script = paced([rs(), *text("m1", "a", "b", "c"), rf()])
    agent = RoutedTextAgent("assistant", USER, chats, messages, ScriptedAgent(script))
    [e async for e in agent.run(run_input())]
    assert (await _stored(chats, messages))[1].content == "[a][b][c]"


class TaggedStorageAgent(AGUIStorageAgent):
    def build_message_create(
        self, state: StorageState, chat: Chat, agui_id: str | None, role: str | None
    ) -> MessageCreate:
        base = super().build_message_create(state, chat, agui_id, role)
        return MessageCreate(**base.model_dump(), team="research")

    def build_tool_call_create(
        self, state: StorageState, tool_call_id: str, tool_call_name: str | None
    ) -> MessageToolCallCreate:
        base = super().build_tool_call_create(state, tool_call_id, tool_call_name)
        return base.model_copy(update={"team": "tools"})

    def build_reasoning_create(
        self, state: StorageState, name: str | None
    ) -> MessageReasoningCreate:
        base = super().build_reasoning_create(state, name)
        return base.model_copy(update={"team": "thinkers"})

    def message_update_fields(self, state: StorageState, event: BaseEvent) -> dict[str, Any]:
        return {"finished_at": state.current_event_timestamp.isoformat()}


async def test_s83_15_build_hooks_and_message_update_fields_reach_storage() -> None:
    chats, messages = _repos()
    script = [
        rs(),
        ReasoningMessageStartEvent(message_id="r1"),
        ReasoningMessageContentEvent(message_id="r1", delta="hmm"),
        ReasoningMessageEndEvent(message_id="r1"),
        *text("m1", "answer"),
        tcs("tc1", "f", "m1"),
        tca("tc1", "{}"),
        tce("tc1"),
        tms("m2"),
        tmc("m2", "still going"),
        rf(),
    ]
    agent = TaggedStorageAgent("assistant", USER, chats, messages, ScriptedAgent(script))
    [e async for e in agent.run(run_input())]
    first, second = (await _stored(chats, messages))[1:]
    assert isinstance(first, TaggedMessage)
    assert isinstance(second, TaggedMessage)
    assert (first.team, second.team) == ("research", "research")
    # Completed by TEXT_MESSAGE_END (m1) and by RUN_FINISHED (m2): both got the hook's fields.
    assert first.finished_at is not None
    assert second.finished_at is not None
    assert first.tool_calls[0].team == "tools"
    assert first.reasonings[0].team == "thinkers"


async def test_flush_methods_are_public_and_persist_immediately() -> None:
    class EagerAgent(AGUIStorageAgent):
        async def handle_text_message(self, state: StorageState, chat: Chat, event: Any) -> None:
            await super().handle_text_message(state, chat, event)
            await self.flush_message_buffer(state)
            await self.flush_tool_call_buffer(state)
            await self.flush_reasoning_buffer(state)

    chats, messages = _repos()
    script = [rs(), *text("m1", "a", "b"), rf()]
    agent = EagerAgent("assistant", USER, chats, messages, ScriptedAgent(script))
    [e async for e in agent.run(run_input())]
    kinds = [op for op, _ in messages.writes]
    # user message; m1 at its start; each delta; its completion
    assert kinds == ["create_message", "create_message", *["update_message"] * 3]
    assert (await _stored(chats, messages))[1].content == "ab"


class Delegating:
    """A repository that shares no base class with ours: it only has the methods."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        self.calls.append(name)
        return target


async def test_any_structural_repository_is_accepted() -> None:
    chats, messages = _repos()
    chat_repo, message_repo = Delegating(chats), Delegating(messages)
    # Python 3.12's isinstance() misses members found through __getattr__; implements() does not.
    assert implements(chat_repo, ChatRepositoryLike)
    assert implements(message_repo, MessageRepositoryLike)
    script = [rs(), *text("m1", "hi"), rf()]
    agent = AGUIStorageAgent("assistant", USER, chat_repo, message_repo, ScriptedAgent(script))  # type: ignore[arg-type]
    [e async for e in agent.run(run_input(UserMessage(id="u1", content="Hello")))]
    assert "create_message" in message_repo.calls
    assert "transaction" in message_repo.calls
    assert (await _stored(chats, messages))[1].content == "hi"


class ThinkingStartEvent(BaseEvent):
    type: str = "THINKING_START"  # type: ignore[assignment]
    title: str | None = None


class ThinkingTextMessageStartEvent(BaseEvent):
    type: str = "THINKING_TEXT_MESSAGE_START"  # type: ignore[assignment]


class ThinkingTextMessageContentEvent(BaseEvent):
    type: str = "THINKING_TEXT_MESSAGE_CONTENT"  # type: ignore[assignment]
    delta: str


class ThinkingTextMessageEndEvent(BaseEvent):
    type: str = "THINKING_TEXT_MESSAGE_END"  # type: ignore[assignment]


class ThinkingEndEvent(BaseEvent):
    type: str = "THINKING_END"  # type: ignore[assignment]


THINKING = (
    ThinkingStartEvent,
    ThinkingTextMessageStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingEndEvent,
)


class LegacyAgent(AGUIStorageAgent):
    @classmethod
    def event_handlers(cls) -> dict[type[BaseEvent], str]:
        return {**super().event_handlers(), **dict.fromkeys(THINKING, "handle_reasoning")}


def test_s84_2_thinking_events_are_not_registered_on_ag_ui_1_0() -> None:
    names = {klass.__name__ for klass in AGUIStorageAgent.event_handlers()}
    assert not any(name.startswith("Thinking") for name in names)
    assert "ReasoningEncryptedValueEvent" in names


async def test_s15_thinking_events_store_a_titled_reasoning() -> None:
    chats, messages = _repos()
    script = [
        rs(),
        ThinkingStartEvent(title="Plan"),
        ThinkingTextMessageStartEvent(),
        ThinkingTextMessageContentEvent(delta="a"),
        ThinkingTextMessageContentEvent(delta="b"),
        ThinkingTextMessageEndEvent(),
        ThinkingEndEvent(),
        *text("m1", "x"),
        rf(),
    ]
    agent = LegacyAgent("assistant", USER, chats, messages, ScriptedAgent(script))  # type: ignore[arg-type]
    [e async for e in agent.run(run_input())]
    stored = (await _stored(chats, messages))[1]
    assert stored.agui_id == "m1"
    assert [(r.agui_id, r.name, r.content, r.status) for r in stored.reasonings] == [
        (None, "Plan", "ab", "complete")
    ]
