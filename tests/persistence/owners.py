"""Run the chat-history contract against owner-scoped repository pairs.

A store's ``repositories(request=...)`` serves one owner, while the contract acts as two users
(``USER``, ``OTHER_USER``) through one ``open_repositories`` callable. ``routed_pairs`` joins
one pair per owner into a single pair that sends each call to the owner it concerns: by user
uuid for chat lookups, else to the first owner whose pair knows the id. Nothing is
translated, so every record the contract sees comes from a real owner-scoped pair.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any
from uuid import UUID

from django_pydantic_agent.chat_history import (
    Chat,
    ChatCreate,
    ChatRepositoryLike,
    Message,
    MessageRepositoryLike,
)

Pair = tuple[ChatRepositoryLike, MessageRepositoryLike]


class RoutedChats:
    def __init__(self, pairs: dict[UUID, Pair]) -> None:
        self._pairs = pairs

    def _chats(self, user_uuid: UUID | None) -> ChatRepositoryLike:
        pair = self._pairs.get(user_uuid) if user_uuid is not None else None
        return (pair or next(iter(self._pairs.values())))[0]

    async def _first(self, call: Callable[[ChatRepositoryLike], Awaitable[Any]]) -> Any:
        for chats, _ in self._pairs.values():
            found = await call(chats)
            if found is not None:
                return found
        return None

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        return await self._chats(chat_data.user_uuid).create_chat(chat_data)

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        return await self._chats(user_uuid).get_chat_by_thread_id(user_uuid, thread_id)

    async def get_all_chats(self, user_uuid: UUID | None) -> Sequence[Chat]:
        if user_uuid is not None:
            return await self._chats(user_uuid).get_all_chats(user_uuid)
        found: list[Chat] = []
        for chats, _ in self._pairs.values():
            found.extend(await chats.get_all_chats(None))
        return found

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Chat | None:
        result: Chat | None = await self._first(lambda c: c.update_chat_name(chat_uuid, name))
        return result

    async def delete_chat(self, chat_uuid: UUID) -> Chat | None:
        result: Chat | None = await self._first(lambda c: c.delete_chat(chat_uuid))
        return result


class RoutedMessages:
    def __init__(self, pairs: dict[UUID, Pair]) -> None:
        self._repos = [messages for _, messages in pairs.values()]

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for repo in self._repos:
                await stack.enter_async_context(repo.transaction())
            yield

    async def _first(self, call: Callable[[MessageRepositoryLike], Awaitable[Any]]) -> Any:
        for repo in self._repos:
            found = await call(repo)
            if found:
                return found
        return None

    async def _creating(self, call: Callable[[MessageRepositoryLike], Awaitable[Any]]) -> Any:
        error: ValueError | None = None
        for repo in self._repos:
            try:
                return await call(repo)
            except ValueError as exc:
                error = exc
        assert error is not None
        raise error

    async def create_message(self, data: Any) -> Any:
        return await self._creating(lambda r: r.create_message(data))

    async def create_message_tool_call(self, data: Any) -> Any:
        return await self._creating(lambda r: r.create_message_tool_call(data))

    async def create_message_reasoning(self, data: Any) -> Any:
        return await self._creating(lambda r: r.create_message_reasoning(data))

    async def update_message(self, uuid: UUID, update: Any) -> Any:
        return await self._first(lambda r: r.update_message(uuid, update))

    async def update_message_tool_call(self, uuid: UUID, update: Any) -> Any:
        return await self._first(lambda r: r.update_message_tool_call(uuid, update))

    async def update_message_reasoning(self, uuid: UUID, update: Any) -> Any:
        return await self._first(lambda r: r.update_message_reasoning(uuid, update))

    async def get_message(self, uuid: UUID) -> Any:
        return await self._first(lambda r: r.get_message(uuid))

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> Any:
        return await self._first(lambda r: r.get_message_by_agui_id(chat_uuid, agui_id))

    async def get_tool_call_by_agui_id(self, message_uuid: UUID, agui_id: str) -> Any:
        return await self._first(lambda r: r.get_tool_call_by_agui_id(message_uuid, agui_id))

    async def get_chat_messages(self, chat_uuid: UUID) -> Sequence[Message]:
        return await self._first(lambda r: r.get_chat_messages(chat_uuid)) or []

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        merged: dict[UUID, Message] = {}
        for repo in self._repos:
            merged.update(await repo.get_last_messages(chat_uuids))
        return merged


def routed_pairs(pairs: dict[UUID, Pair]) -> tuple[RoutedChats, RoutedMessages]:
    """One pair over ``pairs`` (user uuid → that owner's own pair)."""
    return RoutedChats(pairs), RoutedMessages(pairs)
