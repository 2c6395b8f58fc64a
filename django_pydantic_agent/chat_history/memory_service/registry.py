"""Where a chat lives: ``ChatSessionRegistry``, the ``LocatorIndex`` and the per-chat caches."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, TypeVar
from uuid import UUID

from django_pydantic_agent.chat_history.keys import LocatorKind, locator_key
from django_pydantic_agent.chat_history.memory_service._branches import fold
from django_pydantic_agent.chat_history.memory_service._ids import chat_uuid_of, is_own_chat_uuid
from django_pydantic_agent.chat_history.memory_service._retry import RetryPolicy
from django_pydantic_agent.chat_history.records import Chat, Message
from django_pydantic_agent.chat_history.tree import Tree
from django_pydantic_agent.memory_service import (
    DRDeduplicationKey,
    DRMemoryNotFoundError,
    DRMemorySpace,
    DRRangeKey,
    DRSession,
)

__all__ = ["ChatSessionRegistry", "EntityLocator", "LocatorIndex"]

logger = logging.getLogger("django_pydantic_agent.chat_history")

K = TypeVar("K")
V = TypeVar("V")

DEFAULT_MAX_ENTRIES = 4096
DEFAULT_MAX_CACHED_CHATS = 256


class _LRU(Generic[K, V]):
    """A bounded mapping that forgets its least recently used entries."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"Cache capacity {capacity!r} must be at least 1.")
        self._capacity = capacity
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self._capacity:
            self._data.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._data.pop(key, None)

    def __len__(self) -> int:
        return len(self._data)

    def items(self) -> Iterator[tuple[K, V]]:
        return iter(list(self._data.items()))


class EntityLocator(DRSession):
    """One secondary-index entry: where the entity ``<kind>:<uuid>`` lives.

    Wire-compatible with the reference: description ``//loc/``, dedup key ``"<kind>:<uuid>"``,
    metadata ``kind``, ``session_id``, ``chat_uuid``, ``message_uuid`` (tool calls and
    reasoning steps only), the system participant.
    """

    __description_prefix__ = "loc"

    locator_key: Annotated[str, DRDeduplicationKey]
    kind: str = ""
    session_id: str = ""
    chat_uuid: UUID | None = None
    message_uuid: UUID | None = None


class LocatorIndex:
    """Point lookups and best-effort writes of :class:`EntityLocator` sessions in ``space``."""

    def __init__(self, space: DRMemorySpace, *, retry: RetryPolicy | None = None) -> None:
        self._space = space
        self._retry = retry if retry is not None else RetryPolicy()

    async def get(self, kind: LocatorKind, uuid: UUID) -> EntityLocator | None:
        """Return the locator of ``<kind>:<uuid>`` (one dedup-key lookup), or ``None``."""
        key = locator_key(kind, uuid)
        try:
            return await self._retry.run(lambda: EntityLocator.get(self._space, locator_key=key))
        except DRMemoryNotFoundError:
            return None

    async def put(
        self,
        kind: LocatorKind,
        uuid: UUID,
        *,
        session_id: str,
        chat_uuid: UUID,
        message_uuid: UUID | None = None,
    ) -> EntityLocator | None:
        """Write a locator, best-effort: any failure is logged and ``None`` returned.

        Idempotent: an existing locator with the same key is adopted.
        """
        key = locator_key(kind, uuid)
        try:
            return await self._retry.run(
                lambda: EntityLocator.post(
                    self._space,
                    locator_key=key,
                    kind=kind,
                    session_id=session_id,
                    chat_uuid=chat_uuid,
                    message_uuid=message_uuid,
                )
            )
        except Exception as exc:  # best-effort by contract: the entity is already stored
            logger.warning(
                "Could not write the Memory Service locator %r (%s); the entity is stored, "
                "but another replica may not find it by uuid until it lists the chat.",
                key,
                exc,
            )
            return None


def _indexed_class(chat_class: type[Chat]) -> type[Chat]:
    """``chat_class`` with a second range key holding the chat uuid (``//thread/<t>/<uuid>/``).

    Readers declaring only ``thread_id`` (the reference, ``chat_class`` itself) ignore the
    extra segment; a description filter on ``/<uuid>/`` finds the chat in one request.
    """
    cached = chat_class.__dict__.get("_dpa_indexed")
    if isinstance(cached, type):
        return cached
    indexed = type(
        f"Indexed{chat_class.__name__}",
        (chat_class,),
        {
            "__module__": chat_class.__module__,
            "__annotations__": {"chat_index": Annotated[str, DRRangeKey]},
            "chat_index": "",
        },
    )
    chat_class._dpa_indexed = indexed  # type: ignore[attr-defined]
    return indexed


@dataclass(eq=False, kw_only=True)
class ChatState:
    """What this process knows of one chat: its live session and its message events.

    ``messages`` holds the committed (server-acknowledged) messages by uuid. ``listed`` says
    they are the whole chat as of the last check; ``seqs`` are the sequence ids of every
    ``message`` event seen (any body version), whose positions are the listing offsets, and
    ``max_seq`` / ``max_token`` identify the newest one for the ``lastN=1`` freshness check.
    ``tail`` says ``messages`` are only the newest events of the chat (one ``lastN`` read, for
    a context window): ``seqs`` are then not listing offsets, and anything that needs the
    whole chat, or an event the tail does not hold, lists the chat first. ``markers`` are the
    chat's branch markers by uuid (``_branches``): with none, the chat is one branch.
    """

    chat: Chat
    messages: dict[UUID, Message] = field(default_factory=dict)
    markers: dict[UUID, Message] = field(default_factory=dict)
    listed: bool = False
    tail: bool = False
    seqs: list[int] = field(default_factory=list)
    max_seq: int = 0
    max_token: str = ""
    current: bool = False
    """The cache was just built (a listing, or a chat created here): skip one check."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _tree: tuple[tuple[int, int, int], Tree[UUID]] | None = field(default=None, repr=False)

    def events(self) -> list[Message]:
        """The committed messages and branch markers in sequence order."""
        found = [*self.messages.values(), *self.markers.values()]
        return sorted(found, key=lambda m: m.sequence_id)

    def ordered_all(self) -> list[Message]:
        """The committed messages of every branch in sequence order."""
        return sorted(self.messages.values(), key=lambda m: m.sequence_id)

    def tree(self) -> Tree[UUID]:
        """The committed events folded into the chat's tree (kept until an event is added)."""
        key = (len(self.messages), len(self.markers), self.max_seq)
        if self._tree is None or self._tree[0] != key:
            self._tree = (key, fold(self.events()))
        return self._tree[1]

    def ordered(self) -> list[Message]:
        """The committed messages of the active branch in sequence order."""
        if not self.markers:
            return sorted(self.messages.values(), key=lambda m: m.sequence_id)
        return [self.messages[uuid] for uuid in self.tree().active]

    def saw(self, event: Message) -> None:
        """Track ``event`` as the newest event if it is."""
        if event.sequence_id >= self.max_seq:
            self.max_seq = event.sequence_id
            self.max_token = event.created_at

    def reset(self) -> None:
        self.messages.clear()
        self.markers.clear()
        self.listed = False
        self.tail = False
        self.seqs.clear()
        self.max_seq = 0
        self.max_token = ""


class ChatSessionRegistry:
    """Map an app chat uuid to its Memory Service session, and cache what is known of it.

    A bounded in-process LRU covers hot paths (chat uuid → session id, up to ``max_entries``),
    next to the live sessions and message bodies of the ``max_cached_chats`` most recent chats,
    shared by the :class:`ChatRepository` and :class:`MessageRepository` built on this
    registry. A cold resolve of a chat this package created costs one request, a description
    lookup (its uuid is a segment of the description, ``//thread/<thread_id>/<chat_uuid>/``,
    which leaves some 37 characters less for a thread id than the service's 1000). A chat the
    reference created is found through its ``chat:<uuid>`` locator, then fetched by id.
    """

    def __init__(
        self,
        space: DRMemorySpace,
        *,
        locators: LocatorIndex | None = None,
        retry: RetryPolicy | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_cached_chats: int = DEFAULT_MAX_CACHED_CHATS,
        chat_class: type[Chat] = Chat,
    ) -> None:
        self._space = space
        self._retry = retry if retry is not None else RetryPolicy()
        self._locators = (
            locators if locators is not None else LocatorIndex(space, retry=self._retry)
        )
        self._sessions: _LRU[UUID, str] = _LRU(max_entries)
        self._entities: _LRU[UUID, UUID] = _LRU(max_entries)
        self._states: _LRU[UUID, ChatState] = _LRU(max_cached_chats)
        self.chat_class = chat_class
        self.indexed_chat_class = _indexed_class(chat_class)

    @property
    def space(self) -> DRMemorySpace:
        """The memory space holding the chats and their locators."""
        return self._space

    @property
    def locators(self) -> LocatorIndex:
        """The shared :class:`LocatorIndex` for uuid → location lookups."""
        return self._locators

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy every request of the repositories on this registry follows."""
        return self._retry

    def register(self, chat_uuid: UUID, session_id: str) -> None:
        """Cache the ``chat_uuid`` → ``session_id`` mapping."""
        self._sessions.put(chat_uuid, session_id)

    def unregister(self, chat_uuid: UUID) -> None:
        """Drop everything cached about a chat (e.g. after it was deleted)."""
        self._sessions.pop(chat_uuid)
        self._states.pop(chat_uuid)
        for entity, owner in self._entities.items():
            if owner == chat_uuid:
                self._entities.pop(entity)

    def get_session_id(self, chat_uuid: UUID) -> str | None:
        """Return the cached session id of a chat, without a request."""
        return self._sessions.get(chat_uuid)

    async def resolve(self, chat_uuid: UUID) -> str | None:
        """Return the session id of a chat: the cache, else one lookup request.

        Returns ``None`` when no live chat carries the uuid (unknown, deleted, or a reference
        chat whose best-effort ``chat:`` locator was lost).
        """
        cached = self._sessions.get(chat_uuid)
        if cached is not None:
            return cached
        state = await self.state(chat_uuid)
        return state.chat.id if state is not None else None

    # Internal API of the repositories ----------------------------------------------------------

    def remember(self, chat: Chat, *, fresh: bool = False) -> ChatState:
        """Cache a live chat (keeping its known messages); ``fresh``: it has no messages yet."""
        self.register(chat.chat_uuid, chat.id)
        state = self._states.get(chat.chat_uuid)
        if state is None or state.chat.id != chat.id:
            state = ChatState(chat=chat, listed=fresh, current=fresh)
            self._states.put(chat.chat_uuid, state)
        else:
            state.chat = chat
        return state

    def remember_entity(self, entity_uuid: UUID, chat_uuid: UUID) -> None:
        """Remember the chat of a uuid that does not name it (a reference-minted uuid4)."""
        if chat_uuid_of(entity_uuid) is None:
            self._entities.put(entity_uuid, chat_uuid)

    async def chat_of(self, entity_uuid: UUID, kind: LocatorKind) -> UUID | None:
        """The chat uuid of a message / tool call / reasoning uuid, or ``None`` if unknown.

        Free for uuids this package minted (they name their chat) and for entities already
        seen; otherwise one ``<kind>:<uuid>`` locator lookup.
        """
        named = chat_uuid_of(entity_uuid)
        if named is not None:
            return named
        known = self._entities.get(entity_uuid)
        if known is not None:
            return known
        locator = await self._locators.get(kind, entity_uuid)
        if locator is None or locator.chat_uuid is None:
            return None
        if locator.session_id:
            self.register(locator.chat_uuid, locator.session_id)
        self._entities.put(entity_uuid, locator.chat_uuid)
        return locator.chat_uuid

    async def state(self, chat_uuid: UUID) -> ChatState | None:
        """The cached state of a live chat, looking the chat up on a miss (``None``: gone)."""
        state = self._states.get(chat_uuid)
        if state is not None:
            return state
        chat = await self._lookup(chat_uuid)
        if chat is None:
            self._sessions.pop(chat_uuid)
            return None
        return self.remember(chat)

    async def _lookup(self, chat_uuid: UUID) -> Chat | None:
        if is_own_chat_uuid(chat_uuid):
            return await self._by_description(chat_uuid)
        session_id = self._sessions.get(chat_uuid)
        if session_id is None:
            locator = await self._locators.get("chat", chat_uuid)
            if locator is None or not locator.session_id:
                return None
            session_id = locator.session_id
        try:
            chat = await self._retry.run(lambda: self.chat_class.get(self._space, id=session_id))
        except DRMemoryNotFoundError:
            return None
        return chat if chat.chat_uuid == chat_uuid else None

    async def _by_description(self, chat_uuid: UUID) -> Chat | None:
        needle = f"/{chat_uuid}/"
        chat_class = self.chat_class

        async def lookup() -> list[dict[str, Any]]:
            return [item async for item in chat_class._pages(self._space, {"description": needle})]

        for item in await self._retry.run(lookup):
            chat = chat_class._from_wire(self._space, item)
            if chat.chat_uuid == chat_uuid:
                return chat
        return None
