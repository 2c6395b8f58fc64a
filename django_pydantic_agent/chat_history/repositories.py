"""Repository contracts (``ChatRepositoryLike``, ``MessageRepositoryLike``) and in-memory fakes.

The storage agent depends only on these runtime-checkable Protocols, so any backend with the
same method set (Memory Service, Django ORM, in-memory) is a drop-in replacement.

Common semantics: unknown ids give ``None`` (or an empty result); a create whose chat does not
exist raises ``ChatNotFoundError`` (a ``ValueError``), one whose parent message does not exist
``ValueError``; an update applies only its explicitly set, non-``None`` fields
(:func:`~django_pydantic_agent.chat_history.records.apply_update`); reads return messages
oldest first by their sequence.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable
from uuid import UUID, uuid4

from pydantic import BaseModel

from django_pydantic_agent.chat_history.errors import ChatNotFoundError
from django_pydantic_agent.chat_history.keys import (
    chat_deduplication_key,
    emitter_for_role,
    participant_id,
)
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
    apply_update,
    detached,
    nested_record_class,
    update_fields,
)
from django_pydantic_agent.chat_history.transactions import NestedTransaction, TaskScope

__all__ = [
    "ChatRepositoryLike",
    "InMemoryChatRepository",
    "InMemoryMessageRepository",
    "MessageRepositoryLike",
    "NestedRecordWrites",
    "StartsBranches",
    "TaskScope",
]


@runtime_checkable
class StartsBranches(Protocol):
    """Optional, on a message repository that keeps a chat as a tree of branches.

    ``start_branch(chat_uuid, at)`` (inside ``transaction()``) takes record ``at`` and the
    records after it off the chat's active branch, keeping them; the messages created next
    follow the record before ``at``, so the old and the new record are siblings. Reads
    (``get_chat_messages``) return the active branch only. The storage agent branches when a
    run regenerates an answer or edits a user message; without this capability a regenerate
    answers the stored history as it is and an edit is refused.
    """

    async def start_branch(self, chat_uuid: UUID, at: UUID) -> None:
        """Start a new branch of the chat at record ``at``."""
        ...


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


# In-memory repositories -----------------------------------------------------------------------


class InMemoryChatRepository:
    """A ``ChatRepositoryLike`` kept in process memory (tests, demos, single-process runs).

    Records are copied in and out, so callers never share state with the store. Chats are
    scoped by ``(user, thread_id)`` exactly like the Memory Service (dedup key per user).
    """

    def __init__(self, *, chat_class: type[Chat] = Chat) -> None:
        self.chat_class = chat_class
        self._chats: dict[UUID, Chat] = {}

    def _stored(self, chat_uuid: UUID) -> Chat | None:
        return self._chats.get(chat_uuid)

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        """Create a chat, or return the existing chat of ``(user_uuid, thread_id)``.

        Raises:
            ValueError: If ``thread_id`` or ``user_uuid`` is missing.
        """
        if chat_data.thread_id is None or chat_data.user_uuid is None:
            raise ValueError(
                f"create_chat needs both thread_id and user_uuid, got thread_id="
                f"{chat_data.thread_id!r} and user_uuid={chat_data.user_uuid!r}."
            )
        key = chat_deduplication_key(chat_data.user_uuid, chat_data.thread_id)
        for chat in self._chats.values():
            if chat.dedup_key == key:
                return chat.model_copy(deep=True)
        extra = {
            k: v
            for k, v in (chat_data.model_extra or {}).items()
            if k in self.chat_class.model_fields
        }
        chat = self.chat_class(
            **extra,
            thread_id=chat_data.thread_id,
            dedup_key=key,
            name=chat_data.name,
            user_uuid=chat_data.user_uuid,
        )
        chat._participants = [participant_id(chat_data.user_uuid)]
        chat._id = str(uuid4())
        chat._created_at = datetime.now(UTC).isoformat()
        self._chats[chat.chat_uuid] = chat
        return chat.model_copy(deep=True)

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        """Return the chat of ``(user_uuid, thread_id)`` (exact, case-sensitive), or ``None``."""
        for chat in self._chats.values():
            if chat.user_uuid == user_uuid and chat.thread_id == thread_id:
                return chat.model_copy(deep=True)
        return None

    async def get_all_chats(self, user_uuid: UUID | None) -> Sequence[Chat]:
        """Return the chats of ``user_uuid`` (every chat for ``None``), oldest first."""
        return [
            chat.model_copy(deep=True)
            for chat in self._chats.values()
            if user_uuid is None or chat.user_uuid == user_uuid
        ]

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Chat | None:
        """Rename a chat; ``None`` when it is unknown."""
        chat = self._chats.get(chat_uuid)
        if chat is None:
            return None
        chat.name = name
        chat._version += 1
        return chat.model_copy(deep=True)

    async def delete_chat(self, chat_uuid: UUID) -> Chat | None:
        """Delete a chat (its messages become unreachable); ``None`` when it is unknown."""
        chat = self._chats.pop(chat_uuid, None)
        return None if chat is None else chat.model_copy(deep=True)


class NestedRecordWrites(ABC):
    """The four nested-record methods of ``MessageRepositoryLike``, over two primitives.

    A repository implements ``_append_child(field, record_class, data)`` and
    ``_update_child(field, uuid, update)`` for ``field`` ``"tool_calls"`` or ``"reasonings"``,
    and sets ``tool_call_class`` / ``reasoning_class``; this mixin gives it
    ``create_message_tool_call``, ``update_message_tool_call``, ``create_message_reasoning``
    and ``update_message_reasoning``.
    """

    tool_call_class: type[Any]
    reasoning_class: type[Any]

    @abstractmethod
    async def _append_child(self, field: str, record_class: type[Any], data: Any) -> Any:
        """Append a nested record built from ``data`` to its parent message; return it."""

    @abstractmethod
    async def _update_child(self, field: str, uuid: UUID, update: BaseModel) -> Any:
        """Apply ``update`` to the nested record ``uuid``; return it, or ``None``."""

    async def create_message_tool_call(self, data: MessageToolCallCreate) -> ToolCall:
        """Append a tool call to its parent (``ValueError`` if the parent is missing)."""
        result: ToolCall = await self._append_child("tool_calls", self.tool_call_class, data)
        return result

    async def update_message_tool_call(
        self, uuid: UUID, update: MessageToolCallUpdate
    ) -> ToolCall | None:
        """Apply an update to a nested tool call; ``None`` when it is unknown."""
        result: ToolCall | None = await self._update_child("tool_calls", uuid, update)
        return result

    async def create_message_reasoning(self, data: MessageReasoningCreate) -> Reasoning:
        """Append a reasoning step to its parent (``ValueError`` if the parent is missing)."""
        result: Reasoning = await self._append_child("reasonings", self.reasoning_class, data)
        return result

    async def update_message_reasoning(
        self, uuid: UUID, update: MessageReasoningUpdate
    ) -> Reasoning | None:
        """Apply an update to a nested reasoning step; ``None`` when it is unknown."""
        result: Reasoning | None = await self._update_child("reasonings", uuid, update)
        return result


class InMemoryMessageRepository(NestedTransaction, NestedRecordWrites):
    """A ``MessageRepositoryLike`` over an :class:`InMemoryChatRepository`.

    Messages are ordered by an application sequence (``sequence_id``, from 1 in creation order).
    ``transaction()`` applies its batch atomically: an exception inside restores the state
    from before the block, and other writers wait for the block to end.

    Attributes:
        writes: One ``(operation, uuid)`` entry per stored mutation, for tests and budgets.
    """

    def __init__(
        self, chats: InMemoryChatRepository, *, message_class: type[Message] = Message
    ) -> None:
        self.chats = chats
        self.message_class = message_class
        self.tool_call_class = nested_record_class(message_class, "tool_calls")
        self.reasoning_class = nested_record_class(message_class, "reasonings")
        self.writes: list[tuple[str, UUID]] = []
        self._messages: dict[UUID, Message] = {}
        self._sequence = 0
        self._scope = TaskScope()

    # Transactions (``NestedTransaction``) -------------------------------------------------

    def _begin(self) -> tuple[dict[UUID, Message], int, int]:
        return copy.deepcopy(self._messages), self._sequence, len(self.writes)

    def _restore(self, snapshot: tuple[dict[UUID, Message], int, int]) -> None:
        self._messages, self._sequence, count = snapshot
        del self.writes[count:]

    # Lookups ------------------------------------------------------------------------------

    def _live(self, message: Message | None) -> Message | None:
        if message is None or message.chat_uuid is None:
            return None
        if self.chats._stored(message.chat_uuid) is None:
            return None
        return message

    def _find_child(self, field: str, uuid: UUID) -> tuple[Message, Any] | None:
        for message in self._messages.values():
            if self._live(message) is None:
                continue
            for child in getattr(message, field):
                if child.uuid == uuid:
                    return message, child
        return None

    # Writes -------------------------------------------------------------------------------

    async def create_message(self, message_data: MessageCreate) -> Message:
        """Store a new message at the end of its chat.

        Raises:
            ValueError: If ``chat_uuid`` is missing.
            ChatNotFoundError: If it names no chat (a ``ValueError`` too).
        """
        if message_data.chat_uuid is None:
            raise ValueError("create_message needs chat_uuid; pass the chat the message joins.")
        chat = self.chats._stored(message_data.chat_uuid)
        if chat is None:
            raise ChatNotFoundError(message_data.chat_uuid)
        fields = message_data.model_dump()
        declared = self.message_class.model_fields
        kept = {k: v for k, v in fields.items() if k in declared}
        emitter_type, emitter_id = emitter_for_role(message_data.role, chat.participants[0])
        async with self.transaction():
            message = self.message_class(
                **kept,
                message_uuid=uuid4(),
                tool_calls=[],
                reasonings=[],
                emitter_type=emitter_type,
                emitter_id=emitter_id,
            )
            self._sequence += 1
            message._sequence_id = self._sequence
            message._created_at = datetime.now(UTC).isoformat()
            self._messages[message.message_uuid] = message
            self.writes.append(("create_message", message.message_uuid))
            return detached(message)

    async def update_message(self, message_uuid: UUID, update: MessageUpdate) -> Message | None:
        """Apply an update to a message; ``None`` when it is unknown."""
        async with self.transaction():
            message = self._live(self._messages.get(message_uuid))
            if message is None:
                return None
            if update_fields(update):
                staged = detached(message)
                apply_update(staged, update)
                self._messages[message_uuid] = staged
                message = staged
                self.writes.append(("update_message", message_uuid))
            return detached(message)

    async def _append_child(self, field: str, record_class: type[Any], data: Any) -> Any:
        async with self.transaction():
            parent = self._live(self._messages.get(data.message_uuid))
            if parent is None:
                raise ValueError(
                    f"Message {data.message_uuid} does not exist; create the message before "
                    f"appending to its {field}."
                )
            fields = data.model_dump(exclude={"message_uuid"})
            child = record_class(**fields, uuid=uuid4())
            getattr(parent, field).append(child)
            self.writes.append((f"create_{field}", child.uuid))
            return child.model_copy(deep=True)

    async def _update_child(self, field: str, uuid: UUID, update: BaseModel) -> Any:
        async with self.transaction():
            found = self._find_child(field, uuid)
            if found is None:
                return None
            _, child = found
            if update_fields(update):
                staged = child.model_copy(deep=True)
                apply_update(staged, update)
                for name in type(staged).model_fields:
                    setattr(child, name, getattr(staged, name))
                for name, value in (staged.model_extra or {}).items():
                    setattr(child, name, value)
                self.writes.append((f"update_{field}", uuid))
            return child.model_copy(deep=True)

    # Reads --------------------------------------------------------------------------------

    async def get_message(self, message_uuid: UUID) -> Message | None:
        """Return a message by uuid, or ``None``."""
        message = self._live(self._messages.get(message_uuid))
        return None if message is None else detached(message)

    def _chat_messages(self, chat_uuid: UUID) -> list[Message]:
        if self.chats._stored(chat_uuid) is None:
            return []
        found = [m for m in self._messages.values() if m.chat_uuid == chat_uuid]
        return sorted(found, key=lambda m: m.sequence_id)

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> Message | None:
        """Return the first message of the chat with this AG-UI id, or ``None``."""
        for message in self._chat_messages(chat_uuid):
            if message.agui_id == agui_id:
                return detached(message)
        return None

    async def get_tool_call_by_agui_id(self, message_uuid: UUID, agui_id: str) -> ToolCall | None:
        """Return the tool call of a message with this AG-UI id, or ``None``."""
        message = self._live(self._messages.get(message_uuid))
        if message is None:
            return None
        for call in message.tool_calls:
            if call.agui_id == agui_id:
                return call.model_copy(deep=True)
        return None

    async def get_chat_messages(self, chat_uuid: UUID) -> Sequence[Message]:
        """Return every message of the chat in sequence order (``[]`` for an unknown chat)."""
        return [detached(m) for m in self._chat_messages(chat_uuid)]

    async def get_recent_messages(self, chat_uuid: UUID, limit: int) -> Sequence[Message]:
        """Return the newest ``limit`` messages of the chat, oldest first."""
        return [detached(m) for m in self._chat_messages(chat_uuid)[-limit:]]

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        """Return the latest message of each given chat that has one."""
        result: dict[UUID, Message] = {}
        for chat_uuid in chat_uuids:
            messages = self._chat_messages(chat_uuid)
            if messages:
                result[chat_uuid] = detached(messages[-1])
        return result
