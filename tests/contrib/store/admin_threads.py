"""Threads written the way a run writes them (the ORM repositories), for the admin tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync

from django_pydantic_agent.chat_history import (
    ChatCreate,
    MessageCreate,
    MessageReasoningCreate,
    MessageToolCallCreate,
    MessageToolCallUpdate,
)
from django_pydantic_agent.contrib.store.models import StoredConversation
from django_pydantic_agent.contrib.store.repositories import (
    OrmChatRepository,
    OrmMessageRepository,
)


@dataclass(frozen=True, kw_only=True)
class Call:
    """A tool call of an assistant message; ``result=None`` leaves it unanswered."""

    name: str
    arguments: str
    result: str | None = None
    tool_call_id: str = "call-1"


@dataclass(frozen=True, kw_only=True)
class Turn:
    role: str
    content: str = ""
    agui_id: str | None = None
    name: str = ""
    error: str | None = None
    status: str = "complete"
    reasoning: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def write_thread(
    turns: list[Turn], *, owner_id: str = "42", thread_id: str = "thread-1", title: str = ""
) -> StoredConversation:
    """Create the thread and its messages through ``OrmChatRepository``/``OrmMessageRepository``.

    Every turn is written by run ``run-1``: the message, then its reasoning steps, then its tool
    calls (each answered with its result when it has one), as the storage agent does.
    """

    async def write() -> None:
        chats = OrmChatRepository(owner_id=owner_id)
        messages = OrmMessageRepository(chats)
        chat = await chats.create_chat(
            ChatCreate(thread_id=thread_id, user_uuid=chats.user_uuid, name=title or "New Chat")
        )
        for turn in turns:
            message = await messages.create_message(
                MessageCreate(
                    chat_uuid=chat.chat_uuid,
                    role=turn.role,
                    content=turn.content,
                    agui_id=turn.agui_id,
                    name=turn.name,
                    error=turn.error,
                    status=turn.status,
                    in_progress=False,
                    run_id="run-1",
                    **turn.extra,
                )
            )
            for text in turn.reasoning:
                await messages.create_message_reasoning(
                    MessageReasoningCreate(
                        message_uuid=message.message_uuid,
                        content=text,
                        status="complete",
                        in_progress=False,
                        run_id="run-1",
                    )
                )
            for call in turn.calls:
                created = await messages.create_message_tool_call(
                    MessageToolCallCreate(
                        message_uuid=message.message_uuid,
                        tool_call_id=call.tool_call_id,
                        agui_id=call.tool_call_id,
                        name=call.name,
                        arguments=call.arguments,
                        run_id="run-1",
                    )
                )
                if call.result is not None:
                    await messages.update_message_tool_call(
                        created.uuid,
                        MessageToolCallUpdate(
                            content=call.result,
                            has_result=True,
                            in_progress=False,
                            status="complete",
                        ),
                    )

    async_to_sync(write)()
    return StoredConversation.objects.get(owner_id=owner_id, thread_id=thread_id)
