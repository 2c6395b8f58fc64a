"""Repository contracts (``ChatRepositoryLike``, ``MessageRepositoryLike``) and in-memory fakes.

The storage agent depends only on these runtime-checkable Protocols, so any backend with the
same method set (Memory Service, Django ORM, in-memory) is a drop-in replacement.

Common semantics: unknown ids give ``None`` (or an empty result); a create whose chat or parent
message does not exist raises ``ValueError``; an update applies only its explicitly set,
non-``None`` fields (:func:`~django_pydantic_agent.chat_history.records.apply_update`); reads
return messages oldest first by their sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable
from uuid import UUID

from django_pydantic_agent.chat_history.records import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    Reasoning,
    ToolCall,
)

__all__ = ["ChatRepositoryLike", "MessageRepositoryLike"]


@runtime_checkable
class ChatRepositoryLike(Protocol):
    """Structural interface for chat persistence."""

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        """Create a chat (idempotent by ``(user, thread)``) or return the existing one."""
        ...

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        """Return the chat for a ``(user, thread_id)`` pair, or ``None``."""
        ...

    async def get_all_chats(self, user_uuid: UUID | None) -> Sequence[Chat]:
        """Return every chat, optionally scoped to a single user (``None``: all users)."""
        ...

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Chat | None:
        """Rename a chat, returning the updated chat, or ``None`` when it is unknown."""
        ...

    async def delete_chat(self, chat_uuid: UUID) -> Chat | None:
        """Delete a chat, returning the deleted chat, or ``None`` when it is unknown."""
        ...


@runtime_checkable
class MessageRepositoryLike(Protocol):
    """Structural interface for message persistence (one record per logical message)."""

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """Return an async context manager scoping a batch of writes.

        A transactional backend applies the batch atomically; others may make it a no-op.
        """
        ...

    async def create_message(self, message_data: MessageCreate) -> Message:
        """Persist a new message and return it (``ValueError`` if its chat is missing)."""
        ...

    async def update_message(self, message_uuid: UUID, update: MessageUpdate) -> Message | None:
        """Patch a message in place, or return ``None`` when it is unknown."""
        ...

    async def create_message_tool_call(self, data: MessageToolCallCreate) -> ToolCall:
        """Append a tool call to its parent message (``ValueError`` if the parent is missing)."""
        ...

    async def update_message_tool_call(
        self, uuid: UUID, update: MessageToolCallUpdate
    ) -> ToolCall | None:
        """Patch a nested tool call, or return ``None`` when it is unknown."""
        ...

    async def create_message_reasoning(self, data: MessageReasoningCreate) -> Reasoning:
        """Append a reasoning step to its parent (``ValueError`` if the parent is missing)."""
        ...

    async def update_message_reasoning(
        self, uuid: UUID, update: MessageReasoningUpdate
    ) -> Reasoning | None:
        """Patch a nested reasoning step, or return ``None`` when it is unknown."""
        ...

    async def get_message(self, message_uuid: UUID) -> Message | None:
        """Return a message by its application UUID, or ``None``."""
        ...

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> Message | None:
        """Return a message by its AG-UI id within a chat, or ``None``."""
        ...

    async def get_tool_call_by_agui_id(self, message_uuid: UUID, agui_id: str) -> ToolCall | None:
        """Return a tool call by its AG-UI id within a message, or ``None``."""
        ...

    async def get_chat_messages(self, chat_uuid: UUID) -> Sequence[Message]:
        """Return every message in a chat, oldest first (by sequence)."""
        ...

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        """Return the most recent message of each chat that has at least one."""
        ...
