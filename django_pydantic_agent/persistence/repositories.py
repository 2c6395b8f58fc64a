"""Chat-history repositories over any ``ConversationStore``: incremental runs on ``load``/``save``.

A store that offers ``repositories()`` (``ProvidesRepositories``) persists runs its own way;
``repositories_for`` returns its pair. For every other store (``DjangoSessionConversationStore``,
a project's ``ModelConversationStore``) it returns the generic adapter of this module:

- ``get_chat_by_thread_id`` loads the conversation once (``store.load``, plus one ``store.list``
  for its title) and keeps its records in memory for the rest of the pair's life;
- every write changes the records in memory, then calls ``store.save`` with the whole
  conversation at the next flush point: the exit of ``message_repo.transaction()``, or at once
  for a write made outside a transaction. A block that raises restores the records and saves
  nothing. Each save asks ``store.exists`` first: a thread deleted meanwhile (by the thread
  route, another tab) raises ``ChatNotFoundError`` and stays deleted;
- ``update_chat_name`` is ``store.rename`` and ``delete_chat`` is ``store.delete``;
- ``start_branch`` (a regenerate or an edit) keeps the records it takes off the active branch
  as a sibling branch inside the stored messages (``persistence.message_tree``), so the
  session store and ``Model*`` stores keep every branch with no change to what they store.

Records are stored as AG-UI wire messages (``persistence.wire``), so the thread drawer, the
thread route and a client-posted save read and write the same list.

Scope and cost: a pair serves one owner (the request's), whose chat-history user is
``owner_user_uuid(owner_id)``; another user's uuid finds nothing and cannot create a chat.
Chat uuids are derived from ``(user, thread_id)``. A lookup by a uuid the pair has not seen
(a cold ``get_message``) lists the owner's threads and loads them until it finds it. Two pairs
writing the same thread at once keep the last whole-conversation save: this adapter is for
stores that know only ``load``/``save``; a store that can do better offers ``repositories()``.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

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
    MessageUpdate,
    Reasoning,
    ToolCall,
    apply_update,
    detached,
    update_fields,
)
from django_pydantic_agent.chat_history.repositories import NestedRecordWrites
from django_pydantic_agent.chat_history.transactions import NestedTransaction, TaskScope
from django_pydantic_agent.persistence.base import (
    Conversation,
    ConversationStore,
    serves_anonymous,
    store_repositories,
)
from django_pydantic_agent.persistence.derive import derive_title
from django_pydantic_agent.persistence.message_tree import (
    branches_by_record,
    records_with_branches,
    split_branches,
    with_sibling,
)
from django_pydantic_agent.persistence.owner import aresolve_owner_uuid
from django_pydantic_agent.persistence.wire import wire_to_records

if TYPE_CHECKING:
    from django.http import HttpRequest

    from django_pydantic_agent.chat_history import ChatRepositoryLike, MessageRepositoryLike

__all__ = [
    "CHAT_UUID_NAMESPACE",
    "ConversationChatRepository",
    "ConversationMessageRepository",
    "bind_conversation_repositories",
    "chat_uuid_for",
    "conversation_repositories",
    "repositories_for",
]

CHAT_UUID_NAMESPACE: Final[uuid.UUID] = uuid.uuid5(
    uuid.NAMESPACE_URL, "django-pydantic-agent:conversation-chat"
)
"""The uuid5 namespace of the chats the adapter derives from ``(user, thread_id)``."""


def chat_uuid_for(user_uuid: uuid.UUID, thread_id: str) -> uuid.UUID:
    """The adapter's chat uuid of ``(user_uuid, thread_id)``: the same on every worker."""
    return uuid.uuid5(CHAT_UUID_NAMESPACE, f"{user_uuid}\0{thread_id}")


@dataclass(eq=False, kw_only=True)
class _Thread:
    """One loaded conversation: its chat, its records (in order) and their unmanaged keys."""

    chat: Chat
    messages: list[Message] = field(default_factory=list)
    extras: dict[uuid.UUID, dict[str, Any]] = field(default_factory=dict)
    originals: dict[uuid.UUID, tuple[str, list[dict[str, Any]]]] = field(default_factory=dict)
    stored: bool = True
    """Whether the store has held the thread (a save checks it is still there)."""
    branches: dict[uuid.UUID | None, Any] = field(default_factory=dict)
    """The other branches after a record (``None``: other first messages), as stored
    (``persistence.message_tree``)."""

    def find(self, message_uuid: uuid.UUID) -> Message | None:
        for message in self.messages:
            if message.message_uuid == message_uuid:
                return message
        return None


class _Conversations:
    """The state both repositories of one pair share: the owner, the store, loaded threads."""

    def __init__(self, store: ConversationStore, request: HttpRequest, user_uuid: uuid.UUID):
        self.store = store
        self.request = request
        self.user_uuid = user_uuid
        self.participant = participant_id(user_uuid)
        self.threads: dict[uuid.UUID, _Thread] = {}
        self.scanned = False
        self.dirty: set[uuid.UUID] | None = None  # inside a transaction: chats to save at exit
        self.scope = TaskScope()

    def chat(self, thread_id: str, name: str) -> Chat:
        chat_uuid = chat_uuid_for(self.user_uuid, thread_id)
        chat = Chat(
            thread_id=thread_id,
            dedup_key=chat_deduplication_key(self.user_uuid, thread_id),
            name=name,
            chat_uuid=chat_uuid,
            user_uuid=self.user_uuid,
        )
        chat._participants = [self.participant]
        chat._id = str(chat_uuid)
        return chat

    async def _title(self, thread_id: str, messages: Sequence[Any]) -> str:
        for row in await self.store.list(request=self.request):
            if row.thread_id == thread_id:
                return row.title
        return derive_title(messages)

    async def load(self, thread_id: str) -> _Thread | None:
        """The thread, from memory or one ``store.load`` (``None`` when it does not exist)."""
        cached = self.threads.get(chat_uuid_for(self.user_uuid, thread_id))
        if cached is not None:
            return cached
        conversation = await self.store.load(thread_id, request=self.request)
        if conversation is None:
            return None
        chat = self.chat(thread_id, await self._title(thread_id, conversation.messages))
        clean, by_position, root = split_branches(conversation.messages)
        read = wire_to_records(
            clean,
            chat_uuid=chat.chat_uuid,
            participant=self.participant,
            salt=thread_id,
        )
        thread = _Thread(
            chat=chat, messages=read.messages, extras=read.extras, originals=read.originals
        )
        thread.branches = branches_by_record(read.indices, by_position, root)
        self.threads[chat.chat_uuid] = thread
        return thread

    async def by_chat(self, chat_uuid: uuid.UUID) -> _Thread | None:
        """The thread of ``chat_uuid``; a cold miss lists the owner's threads once."""
        cached = self.threads.get(chat_uuid)
        if cached is not None or self.scanned:
            return cached
        for row in await self.store.list(request=self.request):
            if chat_uuid_for(self.user_uuid, row.thread_id) == chat_uuid:
                return await self.load(row.thread_id)
        return None

    async def scan(self) -> None:
        """Load every thread of the owner (the cold by-uuid path)."""
        if self.scanned:
            return
        for row in await self.store.list(request=self.request):
            await self.load(row.thread_id)
        self.scanned = True

    async def by_message(self, message_uuid: uuid.UUID) -> tuple[_Thread, Message] | None:
        for _ in range(2):
            for thread in self.threads.values():
                message = thread.find(message_uuid)
                if message is not None:
                    return thread, message
            if self.scanned:
                return None
            await self.scan()
        return None  # pragma: no cover - the second pass always returns

    async def by_child(
        self, attribute: str, child_uuid: uuid.UUID
    ) -> tuple[_Thread, Message, Any] | None:
        for _ in range(2):
            for thread in self.threads.values():
                for message in thread.messages:
                    for child in getattr(message, attribute):
                        if child.uuid == child_uuid:
                            return thread, message, child
            if self.scanned:
                return None
            await self.scan()
        return None  # pragma: no cover - the second pass always returns

    async def changed(self, thread: _Thread) -> None:
        """A flush point: save now, or at the exit of the open transaction."""
        if self.dirty is not None and self.scope.joined:
            self.dirty.add(thread.chat.chat_uuid)
            return
        await self.save(thread)

    async def save(self, thread: _Thread) -> None:
        """``store.save`` the thread; ``ChatNotFoundError`` if it was deleted since it was stored
        (one ``store.exists`` first, so a save never brings a deleted thread back)."""
        thread_id = thread.chat.thread_id
        if thread.stored and not await self.store.exists(thread_id, request=self.request):
            self.forget(thread.chat.chat_uuid)
            raise ChatNotFoundError(
                thread.chat.chat_uuid,
                f"Chat {thread.chat.chat_uuid} (thread {thread_id!r}) was deleted; its messages "
                "cannot be written.",
            )
        messages = self.wire(thread, thread.messages, root=True)
        await self.store.save(
            Conversation(thread_id=thread_id, messages=messages), request=self.request
        )
        thread.stored = True

    def forget(self, chat_uuid: uuid.UUID) -> None:
        self.threads.pop(chat_uuid, None)

    @staticmethod
    def wire(thread: _Thread, records: Sequence[Message], *, root: bool) -> list[dict[str, Any]]:
        """The wire messages of ``records`` of ``thread``, with their branch data."""
        return records_with_branches(
            records, thread.extras, thread.originals, thread.branches, root=root
        )


class ConversationChatRepository:
    """A ``ChatRepositoryLike`` over one owner's threads in a ``ConversationStore``.

    Build it with ``conversation_repositories``. Only the owner's user uuid finds or creates
    chats; ``get_all_chats`` lists the owner's threads (metadata only, no bodies).
    """

    def __init__(self, state: _Conversations) -> None:
        self._state = state

    @property
    def user_uuid(self) -> uuid.UUID:
        """The chat-history user of the pair's owner."""
        return self._state.user_uuid

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        """Return the owner's chat of ``thread_id``; a new one is saved empty and renamed.

        The chat's name is the thread's title (``store.rename``), as a drawer shows it.

        Raises ``ValueError`` for a missing ``thread_id`` / ``user_uuid`` or a user uuid that
        is not the owner's.
        """
        if chat_data.thread_id is None or chat_data.user_uuid is None:
            raise ValueError(
                f"create_chat needs both thread_id and user_uuid, got thread_id="
                f"{chat_data.thread_id!r} and user_uuid={chat_data.user_uuid!r}."
            )
        state = self._state
        if chat_data.user_uuid != state.user_uuid:
            raise ValueError(
                f"create_chat got user_uuid={chat_data.user_uuid} but these repositories act "
                f"for the request's owner, user {state.user_uuid}; build the repositories "
                "from the request of the user the chat belongs to."
            )
        existing = await state.load(chat_data.thread_id)
        if existing is not None:
            return existing.chat.model_copy(deep=True)
        chat = state.chat(chat_data.thread_id, chat_data.name)
        chat._created_at = datetime.now(UTC).isoformat()
        thread = _Thread(chat=chat, stored=False)
        state.threads[chat.chat_uuid] = thread
        await state.save(thread)  # a chat is a thread the drawer lists: saved at once
        await state.store.rename(chat.thread_id, chat.name, request=state.request)
        return chat.model_copy(deep=True)

    async def get_chat_by_thread_id(self, user_uuid: uuid.UUID, thread_id: str) -> Chat | None:
        """The owner's chat of ``thread_id`` (one load and one list), or ``None``."""
        if user_uuid != self._state.user_uuid:
            return None
        thread = await self._state.load(thread_id)
        return None if thread is None else thread.chat.model_copy(deep=True)

    async def get_all_chats(self, user_uuid: uuid.UUID | None) -> Sequence[Chat]:
        """The owner's chats from ``store.list`` (``None``: the owner's too); others get ``[]``."""
        state = self._state
        if user_uuid is not None and user_uuid != state.user_uuid:
            return []
        rows = await state.store.list(request=state.request)
        return [state.chat(row.thread_id, row.title) for row in rows]

    async def update_chat_name(self, chat_uuid: uuid.UUID, name: str) -> Chat | None:
        """``store.rename`` the chat's thread; ``None`` when the owner has no such chat."""
        thread = await self._state.by_chat(chat_uuid)
        if thread is None:
            return None
        await self._state.store.rename(thread.chat.thread_id, name, request=self._state.request)
        thread.chat.name = name
        return thread.chat.model_copy(deep=True)

    async def delete_chat(self, chat_uuid: uuid.UUID) -> Chat | None:
        """``store.delete`` the chat's thread; ``None`` when the owner has no such chat."""
        thread = await self._state.by_chat(chat_uuid)
        if thread is None:
            return None
        await self._state.store.delete(thread.chat.thread_id, request=self._state.request)
        self._state.forget(chat_uuid)
        return thread.chat.model_copy(deep=True)


class ConversationMessageRepository(NestedTransaction, NestedRecordWrites):
    """A ``MessageRepositoryLike`` keeping each loaded conversation in memory.

    Writes are saved with ``store.save`` at the exit of ``transaction()`` (one save per chat
    changed inside it), or at once outside a transaction. A block that raises restores the
    records and saves none; a save that fails keeps them, for the next flush to save again.
    """

    tool_call_class = ToolCall
    reasoning_class = Reasoning

    def __init__(self, state: _Conversations) -> None:
        self._state = state
        self._scope = state.scope

    def _begin(self) -> dict[uuid.UUID, tuple[list[Message], Any, Any]]:
        self._state.dirty = set()
        return {
            key: (
                list(map(detached, thread.messages)),
                copy.deepcopy(thread.extras),
                copy.deepcopy(thread.branches),
            )
            for key, thread in self._state.threads.items()
        }

    def _restore(self, snapshot: dict[uuid.UUID, tuple[list[Message], Any, Any]]) -> None:
        self._state.dirty = None
        for key, thread in self._state.threads.items():
            if key in snapshot:
                thread.messages, thread.extras, thread.branches = snapshot[key]

    async def _commit(self, snapshot: object) -> None:
        state = self._state
        dirty, state.dirty = state.dirty or set(), None
        for chat_uuid in dirty:
            changed = state.threads.get(chat_uuid)
            if changed is not None:
                await state.save(changed)

    async def start_branch(self, chat_uuid: uuid.UUID, at: uuid.UUID) -> None:
        """Start a branch at record ``at``: it and the records after it leave the active
        branch and are kept as a sibling branch inside the record before it (or the first
        record, for a branch at the first message; ``persistence.message_tree``); a
        regenerate or an edit answers the history up to there (``chat_history.StartsBranches``).
        Saved with the transaction's other writes.

        Raises:
            ValueError: If ``at`` is no record of the owner's chat ``chat_uuid``.
        """
        thread = await self._state.by_chat(chat_uuid)
        index = None
        if thread is not None:
            index = next((i for i, m in enumerate(thread.messages) if m.message_uuid == at), None)
        if thread is None or index is None:
            raise ValueError(f"start_branch: {at} is no message of chat {chat_uuid}.")
        parent = thread.messages[index - 1].message_uuid if index else None
        tail = self._state.wire(thread, thread.messages[index:], root=False)
        for message in thread.messages[index:]:
            thread.extras.pop(message.message_uuid, None)
            thread.branches.pop(message.message_uuid, None)
        thread.branches[parent] = with_sibling(thread.branches.get(parent), tail)
        del thread.messages[index:]
        await self._state.changed(thread)

    # Writes -------------------------------------------------------------------------------

    async def create_message(self, message_data: MessageCreate) -> Message:
        """Append a message to its chat (``ValueError`` if the chat is missing)."""
        if message_data.chat_uuid is None:
            raise ValueError("create_message needs chat_uuid; pass the chat the message joins.")
        state = self._state
        thread = await state.by_chat(message_data.chat_uuid)
        if thread is None:
            raise ChatNotFoundError(
                message_data.chat_uuid,
                f"Chat {message_data.chat_uuid} does not exist for this owner; create it "
                "before its messages.",
            )
        declared = Message.model_fields
        kept = {k: v for k, v in message_data.model_dump().items() if k in declared}
        emitter_type, emitter_id = emitter_for_role(message_data.role, state.participant)
        message = Message(
            **kept,
            message_uuid=uuid.uuid4(),
            tool_calls=[],
            reasonings=[],
            emitter_type=emitter_type,
            emitter_id=emitter_id,
        )
        message._sequence_id = max((m.sequence_id for m in thread.messages), default=0) + 1
        message._created_at = datetime.now(UTC).isoformat()
        thread.messages.append(message)
        await state.changed(thread)
        return detached(message)

    async def update_message(
        self, message_uuid: uuid.UUID, update: MessageUpdate
    ) -> Message | None:
        """Apply ``update`` to a message; ``None`` when it is unknown."""
        found = await self._state.by_message(message_uuid)
        if found is None:
            return None
        thread, message = found
        if update_fields(update):
            staged = detached(message)
            apply_update(staged, update)
            thread.messages[thread.messages.index(message)] = staged
            message = staged
            await self._state.changed(thread)
        return detached(message)

    async def _append_child(self, attribute: str, record_class: type[Any], data: BaseModel) -> Any:
        parent_uuid: uuid.UUID = getattr(data, "message_uuid")  # noqa: B009
        found = await self._state.by_message(parent_uuid)
        if found is None:
            raise ValueError(
                f"Message {parent_uuid} does not exist; create the message before appending "
                f"to its {attribute}."
            )
        thread, parent = found
        child = record_class(**data.model_dump(exclude={"message_uuid"}), uuid=uuid.uuid4())
        getattr(parent, attribute).append(child)
        await self._state.changed(thread)
        return child.model_copy(deep=True)

    async def _update_child(self, attribute: str, child_uuid: uuid.UUID, update: BaseModel) -> Any:
        found = await self._state.by_child(attribute, child_uuid)
        if found is None:
            return None
        thread, _, child = found
        if update_fields(update):
            staged = child.model_copy(deep=True)
            apply_update(staged, update)
            for name in type(staged).model_fields:
                setattr(child, name, getattr(staged, name))
            await self._state.changed(thread)
        return child.model_copy(deep=True)

    # Reads --------------------------------------------------------------------------------

    async def get_message(self, message_uuid: uuid.UUID) -> Message | None:
        """A message by uuid, or ``None``."""
        found = await self._state.by_message(message_uuid)
        return None if found is None else detached(found[1])

    async def get_message_by_agui_id(self, chat_uuid: uuid.UUID, agui_id: str) -> Message | None:
        """The chat's first message with this AG-UI id, or ``None``."""
        thread = await self._state.by_chat(chat_uuid)
        if thread is None:
            return None
        for message in thread.messages:
            if message.agui_id == agui_id:
                return detached(message)
        return None

    async def get_tool_call_by_agui_id(
        self, message_uuid: uuid.UUID, agui_id: str
    ) -> ToolCall | None:
        """The message's tool call with this AG-UI id, or ``None``."""
        found = await self._state.by_message(message_uuid)
        if found is None:
            return None
        for call in found[1].tool_calls:
            if call.agui_id == agui_id:
                return call.model_copy(deep=True)
        return None

    async def get_chat_messages(self, chat_uuid: uuid.UUID) -> Sequence[Message]:
        """Every message of the chat in order (``[]`` for an unknown chat)."""
        thread = await self._state.by_chat(chat_uuid)
        return [] if thread is None else [detached(m) for m in thread.messages]

    async def get_last_messages(self, chat_uuids: list[uuid.UUID]) -> dict[uuid.UUID, Message]:
        """The latest message of each given chat that has one."""
        result: dict[uuid.UUID, Message] = {}
        for chat_uuid in chat_uuids:
            thread = await self._state.by_chat(chat_uuid)
            if thread is not None and thread.messages:
                result[chat_uuid] = detached(thread.messages[-1])
        return result


async def conversation_repositories(
    store: ConversationStore, *, request: HttpRequest, user_uuid: uuid.UUID | None = None
) -> tuple[ConversationChatRepository, ConversationMessageRepository]:
    """The generic adapter's pair over ``store`` for ``request``'s owner.

    ``user_uuid`` defaults to ``owner_user_uuid`` of the owner the store's anonymous policy
    resolves (``serves_anonymous``). Raises ``AnonymousOperationError`` where the store would.
    """
    if user_uuid is None:
        user_uuid = await aresolve_owner_uuid(request, allow_anonymous=serves_anonymous(store))
    return bind_conversation_repositories(store, request=request, user_uuid=user_uuid)


def bind_conversation_repositories(
    store: ConversationStore, *, request: HttpRequest, user_uuid: uuid.UUID
) -> tuple[ConversationChatRepository, ConversationMessageRepository]:
    """The adapter's pair for an owner already resolved to ``user_uuid`` (no request is made).

    The store still scopes every call by ``request``; ``user_uuid`` is the chat-history user
    its chats are filed under (``owner_user_uuid`` of the request's owner, normally).
    """
    state = _Conversations(store, request, user_uuid)
    return ConversationChatRepository(state), ConversationMessageRepository(state)


async def repositories_for(
    store: ConversationStore, *, request: HttpRequest
) -> tuple[ChatRepositoryLike, MessageRepositoryLike]:
    """The repositories a run on ``store`` persists through: its own, else the adapter's.

    Check ``is_persistent(store)`` first: a Null store means a stateless run with no
    repositories at all. Raises ``AnonymousOperationError`` where the store would.
    """
    own = await store_repositories(store, request=request)
    if own is not None:
        return own
    return await conversation_repositories(store, request=request)
