"""Partition one conversation store between several endpoints by a scope name."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.persistence.base import (
    Conversation,
    ConversationMetaList,
    ConversationStore,
    check_limit,
    is_persistent,
    repository_user_uuid,
    store_checks,
    store_repositories,
)
from django_pydantic_agent.persistence.branching import (
    BranchPoint,
    KeepsBranches,
    activate_branch,
    fork_into,
)
from django_pydantic_agent.persistence.features import StoreFeatures, store_features
from django_pydantic_agent.persistence.feedback import Feedback, RatesMessages, thread_feedback
from django_pydantic_agent.persistence.listing import (
    ThreadPage,
    ThreadQuery,
    archive_thread,
    find_threads,
)
from django_pydantic_agent.persistence.transfer import export_thread, import_thread

if TYPE_CHECKING:
    from django.core.checks import CheckMessage
    from django.http import HttpRequest

    from django_pydantic_agent.chat_history import (
        Chat,
        ChatCreate,
        ChatRepositoryLike,
        MessageRepositoryLike,
    )

__all__ = ["SCOPE_SEPARATOR", "ScopedConversationStore"]

SCOPE_SEPARATOR = ":"


class _ScopedChats:
    """The inner store's chat repository seen through a scope: ids prefixed in, stripped out."""

    def __init__(self, inner: ChatRepositoryLike, prefix: str) -> None:
        self._inner = inner
        self._prefix = prefix

    @property
    def user_uuid(self) -> Any:
        """The inner repository's ``user_uuid`` (the user its owner's chats are filed under)."""
        return repository_user_uuid(self._inner)

    def _out(self, chat: Chat | None) -> Chat | None:
        if chat is None or not chat.thread_id.startswith(self._prefix):
            return None
        return chat.model_copy(update={"thread_id": chat.thread_id[len(self._prefix) :]})

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        thread_id = chat_data.thread_id
        keyed = chat_data.model_copy(
            update={"thread_id": None if thread_id is None else f"{self._prefix}{thread_id}"}
        )
        chat = self._out(await self._inner.create_chat(keyed))
        assert chat is not None  # the inner store created it under the prefix
        return chat

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        found = await self._inner.get_chat_by_thread_id(user_uuid, f"{self._prefix}{thread_id}")
        return self._out(found)

    async def get_all_chats(self, user_uuid: UUID | None) -> Sequence[Chat]:
        chats = [self._out(chat) for chat in await self._inner.get_all_chats(user_uuid)]
        return [chat for chat in chats if chat is not None]

    async def _in_scope(self, chat_uuid: UUID) -> bool:
        # A chat of a sibling scope is as absent as a missing one.
        return any(chat.chat_uuid == chat_uuid for chat in await self.get_all_chats(None))

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Chat | None:
        if not await self._in_scope(chat_uuid):
            return None
        return self._out(await self._inner.update_chat_name(chat_uuid, name))

    async def delete_chat(self, chat_uuid: UUID) -> Chat | None:
        if not await self._in_scope(chat_uuid):
            return None
        return self._out(await self._inner.delete_chat(chat_uuid))


class ScopedConversationStore:
    """Wrap ``inner`` so that this endpoint sees only its own threads.

    Thread ids are stored as ``"<scope>:<thread_id>"``; callers (and the wire) only ever see
    the unprefixed id. ``list`` keeps only this scope's rows and strips the prefix, so scopes
    that merely share a beginning (``admin`` / ``administrators``) partition cleanly. A scope
    containing ``:`` is refused, because ``admin`` would otherwise see ``admin:readonly``'s
    threads. Owner scoping stays the inner store's job: this partitions endpoints, not users.

    ``limit`` is applied by the inner store before the scope filter, so a busy sibling scope
    can crowd rows out of a page. ``persistent`` and ``features`` are the inner store's: a
    scope offers what the store it wraps can do. ``repositories`` forwards the inner store's
    chat-history repositories with the prefix applied to thread ids both ways (the generic
    adapter when the inner store has none).

    Raises ``ValueError`` for an empty scope or one containing ``:``, ``TypeError`` when
    ``inner`` is not a ``ConversationStore``.
    """

    def __init__(self, inner: ConversationStore, *, scope: str) -> None:
        if not implements(inner, ConversationStore):
            raise TypeError(
                f"inner={inner!r} is not a ConversationStore: pass a store object with async "
                "load, save, delete, list, exists and rename methods."
            )
        if not isinstance(scope, str) or not scope:
            raise ValueError(f"scope={scope!r} is not valid: pass a non-empty string.")
        if SCOPE_SEPARATOR in scope:
            raise ValueError(
                f"scope={scope!r} contains {SCOPE_SEPARATOR!r}, which is reserved as the "
                "separator: a scope containing it would overlap another scope's threads. "
                "Choose a name without a colon (for example 'admin-readonly')."
            )
        self._inner = inner
        self._scope = scope
        self._prefix = f"{scope}{SCOPE_SEPARATOR}"

    def __repr__(self) -> str:
        return f"ScopedConversationStore({self._inner!r}, scope={self._scope!r})"

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """The inner store's system-check messages (``ChecksItself``): a scope adds none."""
        return store_checks(self._inner, **kwargs)

    @property
    def inner(self) -> ConversationStore:
        """The wrapped store."""
        return self._inner

    @property
    def scope(self) -> str:
        """The scope name (never sent to clients)."""
        return self._scope

    @property
    def persistent(self) -> bool:
        """Whether the inner store keeps anything."""
        return is_persistent(self._inner)

    @property
    def features(self) -> StoreFeatures:
        """What the inner store can do (``store_features``)."""
        return store_features(self._inner)

    def _key(self, thread_id: str) -> str:
        return f"{self._prefix}{thread_id}"

    async def load(self, thread_id: str, *, request: HttpRequest) -> Conversation | None:
        """Load this scope's ``thread_id``; the result carries the unprefixed id."""
        conversation = await self._inner.load(self._key(thread_id), request=request)
        if conversation is None:
            return None
        return replace(conversation, thread_id=thread_id)

    async def save(self, conversation: Conversation, *, request: HttpRequest) -> None:
        """Save under this scope's key."""
        key = self._key(conversation.thread_id)
        await self._inner.save(replace(conversation, thread_id=key), request=request)

    async def delete(self, thread_id: str, *, request: HttpRequest) -> None:
        """Delete this scope's ``thread_id``; no-op when absent."""
        await self._inner.delete(self._key(thread_id), request=request)

    async def list(self, *, request: HttpRequest, limit: int | None = None) -> ConversationMetaList:
        """This scope's threads only, with the prefix stripped from every id."""
        check_limit(limit)
        rows = await self._inner.list(request=request, limit=limit)
        return [
            replace(row, thread_id=row.thread_id[len(self._prefix) :])
            for row in rows
            if row.thread_id.startswith(self._prefix)
        ]

    async def exists(self, thread_id: str, *, request: HttpRequest) -> bool:
        """Whether this scope has ``thread_id``."""
        return await self._inner.exists(self._key(thread_id), request=request)

    async def rename(self, thread_id: str, title: str, *, request: HttpRequest) -> None:
        """Rename this scope's ``thread_id``."""
        await self._inner.rename(self._key(thread_id), title, request=request)

    async def find_threads(self, query: ThreadQuery, *, request: HttpRequest) -> ThreadPage:
        """This scope's threads matching ``query``: the inner store's answer (or the generic
        one over its ``list()``) for ids under this scope's prefix, returned without it."""
        scoped = replace(query, prefix=f"{self._key(query.prefix)}")
        return await find_threads(self._inner, scoped, request=request)

    async def archive(self, thread_id: str, archived: bool, *, request: HttpRequest) -> bool:
        """Archive this scope's ``thread_id`` in the inner store (``ArchiveUnsupportedError``
        when it keeps no flag)."""
        return await archive_thread(self._inner, self._key(thread_id), archived, request=request)

    # Branches, forks, export and import (``persistence.branching``, ``.transfer``) -------

    async def branch_points(
        self, thread_id: str, *, request: HttpRequest
    ) -> dict[str, BranchPoint] | None:
        """The inner store's branch points of this scope's thread (``{}`` when it keeps no
        branches; ``None`` for a missing thread)."""
        if implements(self._inner, KeepsBranches):
            return await self._inner.branch_points(self._key(thread_id), request=request)
        return {} if await self.exists(thread_id, request=request) else None

    async def activate(self, thread_id: str, message_id: str, *, request: HttpRequest) -> bool:
        """Switch this scope's thread to the branch through ``message_id``."""
        return await activate_branch(self._inner, self._key(thread_id), message_id, request=request)

    async def fork(
        self, thread_id: str, message_id: str, new_thread_id: str, *, request: HttpRequest
    ) -> bool:
        """Fork this scope's thread into this scope's ``new_thread_id`` (``fork_into``)."""
        return await fork_into(
            self._inner, self._key(thread_id), message_id, self._key(new_thread_id), request=request
        )

    async def rate(
        self, thread_id: str, message_id: str, feedback: Feedback, *, request: HttpRequest
    ) -> bool:
        """Set the feedback on a message of this scope's thread (``False`` when the inner store
        keeps none: ``features.feedback`` says so first)."""
        if not implements(self._inner, RatesMessages):
            return False
        return await self._inner.rate(self._key(thread_id), message_id, feedback, request=request)

    async def ratings(self, thread_id: str, *, request: HttpRequest) -> dict[str, Feedback]:
        """The feedback on this scope's thread (``thread_feedback``)."""
        return await thread_feedback(self._inner, self._key(thread_id), request=request)

    async def export(self, thread_id: str, *, request: HttpRequest) -> dict[str, Any] | None:
        """This scope's thread as an export document (``persistence.transfer``)."""
        return await export_thread(self._inner, self._key(thread_id), request=request)

    async def import_document(
        self, document: dict[str, Any], thread_id: str, *, request: HttpRequest
    ) -> None:
        """Import a checked document as this scope's ``thread_id``."""
        await import_thread(self._inner, document, self._key(thread_id), request=request)

    async def repositories(
        self, *, request: HttpRequest
    ) -> tuple[ChatRepositoryLike, MessageRepositoryLike]:
        """The inner store's repositories (or the generic adapter's) inside this scope.

        Chat thread ids carry the prefix in storage and never outside; a sibling scope's chat
        is invisible, as a missing one is. Messages are reached through their chats, so the
        message repository is the inner one.
        """
        own = await store_repositories(self._inner, request=request)
        if own is None:
            from django_pydantic_agent.persistence.repositories import (
                conversation_repositories,
            )

            # The adapter over this store: its load and save already apply the prefix.
            return await conversation_repositories(self, request=request)
        chats, messages = own
        return _ScopedChats(chats, self._prefix), messages
