"""Scripted inner agents and short event constructors for the storage-agent tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any
from uuid import UUID

from ag_ui.core import (
    BaseEvent,
    Message,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)

from django_pydantic_agent.chat_history import (
    AGUIStorageAgent,
    InMemoryChatRepository,
    InMemoryMessageRepository,
)
from django_pydantic_agent.chat_history.storage_agent import AGUIAgent
from tests.chat_history.conftest import USER

Script = Sequence[BaseEvent | Callable[[], Any] | BaseException]


class ScriptedAgent(AGUIAgent):
    """Yields a list of events; a callable item is awaited (e.g. a sleep), an exception raised.

    ``seen`` keeps every ``RunAgentInput`` it was given.
    """

    def __init__(self, script: Script = (), name: str = "scripted") -> None:
        self.name = name
        self.script = list(script)
        self.seen: list[RunAgentInput] = []

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        self.seen.append(input)
        for item in self.script:
            if isinstance(item, BaseException):
                raise item
            if callable(item) and not isinstance(item, BaseEvent):
                result = item()
                if asyncio.iscoroutine(result):
                    await result
                continue
            yield item


def inbound_stored(
    chats: InMemoryChatRepository, messages: InMemoryMessageRepository, thread: str = "t1"
) -> Callable[[], Any]:
    """A script step that waits until the run's chat and first message are stored.

    On a new thread the storage agent writes them while the inner agent starts; a test that
    must begin with them stored (as on a thread that exists) puts this step first.
    """

    async def wait() -> None:
        for _ in range(10_000):
            chat = await chats.get_chat_by_thread_id(USER, thread)
            if chat is not None and await messages.get_chat_messages(chat.chat_uuid):
                return
            await asyncio.sleep(0.001)
        raise AssertionError(f"The chat of thread {thread!r} was never stored.")

    return wait


async def _loop_turns() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def paced(script: Script) -> list[Any]:
    """``script`` as a model streams it: the agent awaits between events (its chunks arrive
    over a socket), so a flush one event starts has ended by the next event."""
    out: list[Any] = []
    for item in script:
        out += [item, _loop_turns]
    return out


def run_input(
    *messages: Message, thread: str = "t1", run: str = "r1", **extra: Any
) -> RunAgentInput:
    return RunAgentInput(
        thread_id=thread,
        run_id=run,
        messages=list(messages) or [UserMessage(id="u1", content="Hello")],
        tools=[],
        context=[],
        state={},
        forwarded_props={},
        **extra,
    )


def rs(run: str = "r1") -> RunStartedEvent:
    return RunStartedEvent(thread_id="t1", run_id=run)


def rf(run: str = "r1", **kwargs: Any) -> RunFinishedEvent:
    return RunFinishedEvent(thread_id="t1", run_id=run, **kwargs)


def re_(message: str, code: str | None = None) -> RunErrorEvent:
    return RunErrorEvent(message=message, code=code)


def tms(mid: str, **kwargs: Any) -> TextMessageStartEvent:
    return TextMessageStartEvent(message_id=mid, **kwargs)


def tmc(mid: str, delta: str) -> TextMessageContentEvent:
    return TextMessageContentEvent(message_id=mid, delta=delta)


def tme(mid: str) -> TextMessageEndEvent:
    return TextMessageEndEvent(message_id=mid)


def text(mid: str, *deltas: str) -> list[BaseEvent]:
    return [tms(mid), *(tmc(mid, d) for d in deltas), tme(mid)]


def tcs(tc: str, name: str, parent: str | None = None) -> ToolCallStartEvent:
    return ToolCallStartEvent(tool_call_id=tc, tool_call_name=name, parent_message_id=parent)


def tca(tc: str, delta: str) -> ToolCallArgsEvent:
    return ToolCallArgsEvent(tool_call_id=tc, delta=delta)


def tce(tc: str) -> ToolCallEndEvent:
    return ToolCallEndEvent(tool_call_id=tc)


def tcr(mid: str, tc: str, content: Any) -> ToolCallResultEvent:
    return ToolCallResultEvent(message_id=mid, tool_call_id=tc, content=content)


class Store:
    """A fresh in-memory chat store and storage agents over it."""

    def __init__(self) -> None:
        self.chats = InMemoryChatRepository()
        self.messages = InMemoryMessageRepository(self.chats)

    def agent(
        self, inner: AGUIAgent, *, cls: type[AGUIStorageAgent] = AGUIStorageAgent, **kwargs: Any
    ) -> AGUIStorageAgent:
        return cls("assistant", USER, self.chats, self.messages, inner, **kwargs)

    async def history(self, thread: str = "t1", user: UUID = USER) -> list[Any]:
        chat = await self.chats.get_chat_by_thread_id(user, thread)
        if chat is None:
            return []
        return list(await self.messages.get_chat_messages(chat.chat_uuid))

    async def run(
        self, script: Script, run_in: RunAgentInput | None = None, **kwargs: Any
    ) -> tuple[list[BaseEvent], ScriptedAgent]:
        inner = ScriptedAgent(script)
        events = [e async for e in self.agent(inner, **kwargs).run(run_in or run_input())]
        return events, inner


def summary(messages: Sequence[Any]) -> list[tuple[Any, ...]]:
    """``(role, agui_id, content, status, in_progress)`` of each stored message."""
    return [(m.role, m.agui_id, m.content, m.status, m.in_progress) for m in messages]
