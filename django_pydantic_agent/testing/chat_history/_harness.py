"""The shared part of the chat-history scenarios: the fixture, flags and helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeAlias
from uuid import UUID

import pytest
from ag_ui.core import (
    BaseEvent,
    UserMessage,
)

from django_pydantic_agent.chat_history import (
    AGUIStorageAgent,
    Chat,
    ChatRepositoryLike,
    Message,
    MessageRepositoryLike,
    MessageStatus,
    Reasoning,
    StreamPersistenceManager,
    ToolCall,
)
from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.testing.agui_script import (
    RF,
    RS,
    TCA,
    TCE,
    TCR,
    TCS,
    TMC,
    TME,
    TMS,
    ScriptedAgent,
    run_input,
)

__all__ = [
    "ACTIVE",
    "COMPLETE",
    "ERRORED",
    "INTERRUPTED",
    "OTHER_USER",
    "USER",
    "ChatHistoryHarness",
    "OpenRepositories",
    "Played",
    "RepositoryPair",
    "at",
    "call_shape",
    "dumps",
    "replayed",
    "shape",
    "step_shape",
]

#: The spec's default user ``U``; ``participant_id(USER) == "ddcbc45ed5383449004fe644"``.
USER = UUID("12345678-1234-5678-1234-567812345678")
#: A second user, for isolation scenarios.
OTHER_USER = UUID("87654321-4321-8765-4321-876543218765")

RepositoryPair: TypeAlias = tuple[ChatRepositoryLike, MessageRepositoryLike]
OpenRepositories: TypeAlias = Callable[[], RepositoryPair]

COMPLETE = MessageStatus.COMPLETE.value
ERRORED = MessageStatus.ERRORED.value
INTERRUPTED = MessageStatus.INTERRUPTED.value
ACTIVE = MessageStatus.ACTIVE.value


@dataclass(frozen=True, kw_only=True)
class Played:
    """What a scripted run produced: the forwarded events and the inner agent."""

    events: list[BaseEvent]
    agent: ScriptedAgent

    @property
    def terminal(self) -> BaseEvent:
        """The last forwarded event."""
        return self.events[-1]


def shape(message: Message) -> tuple[str, str | None, str, str, bool]:
    return (message.role, message.agui_id, message.content, message.status, message.in_progress)


def call_shape(call: ToolCall) -> tuple[str | None, str, str, str, str, bool]:
    return (
        call.tool_call_id,
        call.name,
        call.arguments,
        call.content,
        call.status,
        call.in_progress,
    )


def step_shape(step: Reasoning) -> tuple[str | None, str, str, str, bool]:
    return (step.agui_id, step.name, step.content, step.status, step.in_progress)


def dumps(events: Sequence[BaseEvent]) -> list[dict[str, Any]]:
    return [event.model_dump(mode="json") for event in events]


def replayed(message: Any) -> tuple[str, str, Any]:
    return (type(message).__name__, message.id, getattr(message, "content", None))


def at(milliseconds: int | None) -> datetime:
    assert milliseconds is not None
    return datetime.fromtimestamp(milliseconds / 1000, UTC)


class ChatHistoryHarness:
    """What every scenario group shares: the fixture to override, the flags and the helpers.

    Class flags describe what the backend promises:

    - ``max_content_chars``: the longest text one record can hold (``None``: unbounded). The
      Memory Service refuses event content over 100 000 characters; an unbounded backend must
      store a 150 000-character answer exactly, a bounded one must never duplicate text.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.asyncio]

    max_content_chars: ClassVar[int | None] = None
    agent_name: ClassVar[str] = "assistant"

    @pytest.fixture
    def open_repositories(self) -> OpenRepositories:
        """Return a callable building a new repository pair over the same storage per call."""
        raise NotImplementedError(
            f"{type(self).__name__} must override the open_repositories fixture, returning a "
            "callable that builds a (ChatRepositoryLike, MessageRepositoryLike) pair."
        )

    # -- helpers ----------------------------------------------------------------------------

    def make_storage_agent(
        self,
        chat_repo: ChatRepositoryLike,
        message_repo: MessageRepositoryLike,
        inner: ScriptedAgent,
        *,
        user: UUID,
    ) -> AGUIStorageAgent:
        """Build the storage agent for one run (override to use a subclass)."""
        return AGUIStorageAgent(self.agent_name, user, chat_repo, message_repo, inner)

    def _pair(self, open_repositories: OpenRepositories) -> RepositoryPair:
        chat_repo, message_repo = open_repositories()
        assert implements(chat_repo, ChatRepositoryLike), f"{chat_repo!r} is no ChatRepositoryLike"
        assert implements(message_repo, MessageRepositoryLike), (
            f"{message_repo!r} is no MessageRepositoryLike"
        )
        return chat_repo, message_repo

    async def play(
        self,
        open_repositories: OpenRepositories,
        *script: object,
        input: Any = None,
        user: UUID = USER,
        agent: ScriptedAgent | None = None,
    ) -> Played:
        """Run ``script`` (or ``agent``) through a fresh pair until persistence is done."""
        chat_repo, message_repo = self._pair(open_repositories)
        inner = agent if agent is not None else ScriptedAgent(*script)
        async with StreamPersistenceManager(
            lambda: self.make_storage_agent(chat_repo, message_repo, inner, user=user)
        ) as manager:
            handle = await manager.run(input if input is not None else run_input())
            events = [event async for event in handle.events()]
            await handle.wait()
        return Played(events=events, agent=inner)

    async def stored(
        self, open_repositories: OpenRepositories, *, user: UUID = USER, thread_id: str = "t1"
    ) -> tuple[Chat | None, list[Message]]:
        """Read the chat and its messages back through a fresh pair (a cold replica)."""
        chat_repo, message_repo = self._pair(open_repositories)
        chat = await chat_repo.get_chat_by_thread_id(user, thread_id)
        if chat is None:
            return None, []
        return chat, list(await message_repo.get_chat_messages(chat.chat_uuid))

    async def messages(
        self, open_repositories: OpenRepositories, *, user: UUID = USER, thread_id: str = "t1"
    ) -> list[Message]:
        """The stored messages of ``(user, thread_id)``, which must exist."""
        chat, messages = await self.stored(open_repositories, user=user, thread_id=thread_id)
        assert chat is not None, f"no chat was stored for thread {thread_id!r}"
        return messages

    async def replay(
        self, open_repositories: OpenRepositories, *, run_id: str = "r-replay"
    ) -> list[Any]:
        """The history a next turn's inner agent is given, without that turn's own message."""
        played = await self.play(
            open_repositories,
            RS(run_id),
            RF(run_id),
            input=run_input(UserMessage(id=f"{run_id}-user", content="next"), run_id=run_id),
        )
        assert played.agent.runs == 1, "the next turn was refused"
        history = played.agent.histories[0]
        assert replayed(history[-1]) == ("UserMessage", f"{run_id}-user", "next")
        return history[:-1]

    async def weather_turn(self, open_repositories: OpenRepositories) -> Played:
        """Play S9's turn: an answer, a backend tool call with its result, a second answer."""
        return await self.play(
            open_repositories,
            RS(),
            TMS("m1"),
            TMC("m1", "Let me check"),
            TME("m1"),
            TCS("tc1", "get_weather", parent="m1"),
            TCA("tc1", '{"city":'),
            TCA("tc1", '"Paris"}'),
            TCE("tc1"),
            TCR("res1", "tc1", "18C"),
            TMS("m2"),
            TMC("m2", "It is 18C"),
            TME("m2"),
            RF(),
        )
