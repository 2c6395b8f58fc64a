"""``ChatRepository``: chats as Memory Service sessions, one per ``(user, thread)``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final
from uuid import UUID

from django_pydantic_agent.chat_history.keys import chat_deduplication_key, participant_id
from django_pydantic_agent.chat_history.memory_service._ids import mint_chat_uuid
from django_pydantic_agent.chat_history.memory_service.registry import ChatSessionRegistry
from django_pydantic_agent.chat_history.records import Chat, ChatCreate
from django_pydantic_agent.memory_service import (
    DRMemoryNotFoundError,
    DRMemorySpace,
    DRMemoryVersionConflictError,
)

__all__ = ["ChatRepository"]

RENAME_ATTEMPTS: Final[int] = 3


class ChatRepository:
    """Chat persistence backed by Memory Service sessions (see the package docstring).

    Shares its caches with the :class:`MessageRepository` built on the same ``registry``.
    """

    def __init__(self, space: DRMemorySpace, registry: ChatSessionRegistry) -> None:
        if registry.space.id != space.id:
            raise ValueError(
                "ChatRepository got a registry of another memory space; pass the "
                "ChatSessionRegistry built on the same DRMemorySpace."
            )
        self._space = space
        self._registry = registry
        self._retry = registry.retry

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        """Create the chat of ``(user_uuid, thread_id)``, or adopt the live one (one POST).

        A new chat is known to have no messages, so reading its history costs nothing.

        Raises:
            ValueError: If ``user_uuid`` or ``thread_id`` is missing.
        """
        if chat_data.user_uuid is None or chat_data.thread_id is None:
            raise ValueError(
                "ChatCreate needs both user_uuid and thread_id (they derive the chat's "
                f"deduplication key); got user_uuid={chat_data.user_uuid!r}, "
                f"thread_id={chat_data.thread_id!r}."
            )
        user_uuid, thread_id = chat_data.user_uuid, chat_data.thread_id
        chat_uuid = mint_chat_uuid()
        indexed = self._registry.indexed_chat_class
        extra = {
            name: value
            for name, value in (chat_data.model_extra or {}).items()
            if name in indexed.model_fields
        }
        chat = await self._retry.run(
            lambda: indexed.post(
                self._space,
                participants=[participant_id(user_uuid)],
                thread_id=thread_id,
                chat_index=str(chat_uuid),
                dedup_key=chat_deduplication_key(user_uuid, thread_id),
                name=chat_data.name,
                chat_uuid=chat_uuid,
                user_uuid=user_uuid,
                **extra,
            )
        )
        # A deduplication conflict adopts the existing chat, which keeps its own uuid and name.
        self._registry.remember(chat, fresh=chat.chat_uuid == chat_uuid)
        return chat

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        """Return the chat of ``(user_uuid, thread_id)``, or ``None`` (one indexed listing).

        The service filter ignores case, so the match on ``thread_id`` and ``user_uuid`` is
        made exactly here.
        """
        chats = await self._retry.run(
            lambda: self._registry.chat_class.list(
                self._space, thread_id=thread_id, participant=participant_id(user_uuid)
            )
        )
        for chat in chats:
            if chat.thread_id == thread_id and chat.user_uuid == user_uuid:
                self._registry.remember(chat)
                return chat
        return None

    async def get_all_chats(self, user_uuid: UUID | None) -> Sequence[Chat]:
        """Every chat of ``user_uuid`` (its participant, then an exact owner match), or all."""
        participant = participant_id(user_uuid) if user_uuid is not None else None
        chats = await self._retry.run(
            lambda: self._registry.chat_class.list(self._space, participant=participant)
        )
        found = [chat for chat in chats if user_uuid is None or chat.user_uuid == user_uuid]
        for chat in found:
            self._registry.remember(chat)
        return found

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Chat | None:
        """Rename a chat (``If-Match`` guarded, re-read and retried on a version conflict).

        Returns ``None`` when no live chat has the uuid.

        Raises:
            DRMemoryVersionConflictError: After three conflicting attempts.
        """
        return await self.patch_chat(chat_uuid, name=name)

    async def patch_chat(self, chat_uuid: UUID, **fields: object) -> Chat | None:
        """Change metadata fields of a chat (declared on the registry's ``chat_class``),
        ``If-Match`` guarded, re-read and retried on a version conflict.

        Returns ``None`` when no live chat has the uuid.

        Raises:
            DRMemoryVersionConflictError: After three conflicting attempts.
        """
        state = await self._registry.state(chat_uuid)
        if state is None:
            return None
        chat = state.chat
        for attempt in range(RENAME_ATTEMPTS):

            async def patch(chat: Chat = chat) -> None:
                await chat.patch(**fields)

            try:
                await self._retry.run(patch)
            except DRMemoryNotFoundError:
                self._registry.unregister(chat_uuid)
                return None
            except DRMemoryVersionConflictError:
                if attempt == RENAME_ATTEMPTS - 1:
                    raise
                try:
                    chat = await self._retry.run(
                        lambda: self._registry.chat_class.get(self._space, id=state.chat.id)
                    )
                except DRMemoryNotFoundError:
                    self._registry.unregister(chat_uuid)
                    return None
                state.chat = chat
                continue
            state.chat = chat
            return chat
        raise AssertionError("unreachable")  # pragma: no cover

    async def delete_chat(self, chat_uuid: UUID) -> Chat | None:
        """Soft-delete a chat and its events; drop everything cached about it.

        Its locators (if any) are left as orphans. Returns ``None`` when the chat is unknown.
        """
        state = await self._registry.state(chat_uuid)
        if state is None:
            return None
        chat = state.chat
        self._registry.unregister(chat_uuid)
        try:
            await self._retry.run(chat.delete)
        except DRMemoryNotFoundError:
            return None
        return chat
