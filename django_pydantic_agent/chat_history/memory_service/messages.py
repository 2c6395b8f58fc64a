"""``MessageRepository``: messages as Memory Service events, cached per chat, written in batches."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import UUID

from django_pydantic_agent.chat_history.agui_messages import message_id
from django_pydantic_agent.chat_history.errors import ChatNotFoundError
from django_pydantic_agent.chat_history.keys import LocatorKind, emitter_for_role
from django_pydantic_agent.chat_history.memory_service._branches import (
    Operation,
    fold,
    is_marker,
    marker_fields,
    replay,
)
from django_pydantic_agent.chat_history.memory_service._events import (
    MAX_CONTENT_LENGTH,
    PAGE_SIZE,
    EventStore,
    Mutation,
    apply_quietly,
    clone,
    export,
)
from django_pydantic_agent.chat_history.memory_service._ids import (
    is_own_chat_uuid,
    mint_child_uuid,
)
from django_pydantic_agent.chat_history.memory_service.registry import (
    ChatSessionRegistry,
    ChatState,
)
from django_pydantic_agent.chat_history.records import (
    PAYLOAD_VERSION,
    Message,
    MessageCreate,
    MessageUpdate,
    ToolCall,
    apply_update,
    nested_record_class,
    update_fields,
)
from django_pydantic_agent.chat_history.repositories import NestedRecordWrites
from django_pydantic_agent.chat_history.transactions import ContextScope, NestedTransaction
from django_pydantic_agent.chat_history.tree import BranchPoint
from django_pydantic_agent.memory_service import (
    DRMemoryNotFoundError,
    DRMemorySpace,
)

__all__ = ["MAX_CONTENT_LENGTH", "MessageRepository"]

logger = logging.getLogger("django_pydantic_agent.chat_history")

_CONCURRENT_TAILS: Final[int] = 8

_KINDS: Final[dict[str, LocatorKind]] = {"tool_calls": "tool_call", "reasonings": "reasoning"}
"""The locator kind of each nested-record field."""


@dataclass(eq=False)
class _Pending:
    """A message touched inside a transaction: its committed ``base`` and the working copy."""

    base: Message | None  # None: created inside the transaction
    work: Message
    mutations: list[Mutation] = field(default_factory=list)


@dataclass(eq=False)
class _Batch:
    """The writes of one transaction, per chat; sent at its exit."""

    chats: dict[UUID, tuple[ChatState, dict[UUID, _Pending]]] = field(default_factory=dict)
    children: list[tuple[ChatState, LocatorKind, UUID, UUID]] = field(default_factory=list)

    def pending(self, state: ChatState) -> dict[UUID, _Pending]:
        entry = self.chats.get(state.chat.chat_uuid)
        if entry is None or entry[0] is not state:
            entry = (state, {})
            self.chats[state.chat.chat_uuid] = entry
        return entry[1]


class MessageRepository(NestedTransaction, NestedRecordWrites):
    """Message persistence backed by session events: one event per logical message.

    Tool calls and reasoning steps are nested in the parent message's event body. Each chat's
    events are cached after they are read or written (bodies and ``createdAt`` tokens), so an
    update is one PATCH and never a re-listing. :meth:`transaction` collects the writes made
    inside it and sends them at exit: per chat, at most one batch POST (new messages, with
    every change made to them meanwhile) and one batch PATCH (changed messages). Reads inside
    see the pending writes, a nested block joins the batch, a block that raises sends nothing;
    concurrent tasks each have their own batch. See the package docstring for the
    consistency model.
    """

    def __init__(
        self,
        space: DRMemorySpace,
        registry: ChatSessionRegistry,
        *,
        message_class: type[Message] = Message,
    ) -> None:
        if registry.space.id != space.id:
            raise ValueError(
                "MessageRepository got a registry of another memory space; pass the "
                "ChatSessionRegistry built on the same DRMemorySpace."
            )
        self._space = space
        self._registry = registry
        self._retry = registry.retry
        self.message_class = message_class
        self.tool_call_class = nested_record_class(message_class, "tool_calls")
        self.reasoning_class = nested_record_class(message_class, "reasonings")
        self._events = EventStore(registry, message_class)
        self._scope: ContextScope[_Batch] = ContextScope(_Batch)

    # Transactions (``NestedTransaction`` over a ``ContextScope``) ------------------------------

    def _batch(self) -> _Batch | None:
        """This task's open batch, or ``None`` outside a transaction."""
        return self._scope.state

    async def _commit(self, snapshot: object) -> None:
        """Send the batch: per chat one POST (new messages), then one PATCH (changed ones),
        each atomic. If the PATCH fails after the POST succeeded, the error is raised and the
        new messages stay stored (a caller that retries re-reads the chat first)."""
        batch = self._batch()
        assert batch is not None  # called while the transaction holds it
        for state, pending in batch.chats.values():
            created = [p.work for p in pending.values() if p.base is None]
            changed = [(p.base, p.mutations) for p in pending.values() if p.base is not None]
            try:
                async with state.lock:
                    if created:
                        await self._events.post(state, created)
                    if changed:
                        await self._events.patch(state, changed)
            except DRMemoryNotFoundError as exc:
                # Events are never deleted one by one: a 404 here is the chat's session gone.
                chat_uuid = state.chat.chat_uuid
                self._registry.unregister(chat_uuid)
                raise ChatNotFoundError(
                    chat_uuid, f"Chat {chat_uuid} was deleted; its messages cannot be written."
                ) from exc
            for message in created:
                if not is_marker(message):
                    await self._put_locators(state, message)
        for state, kind, uuid, parent in batch.children:
            await self._put_child_locator(state, kind, uuid, parent)

    async def _put_locators(self, state: ChatState, message: Message) -> None:
        """Reference-style locators, only for a chat the reference created (uuid4 ids)."""
        chat = state.chat
        if is_own_chat_uuid(chat.chat_uuid):
            return
        await self._registry.locators.put(
            "message", message.message_uuid, session_id=chat.id, chat_uuid=chat.chat_uuid
        )

    async def _put_child_locator(
        self, state: ChatState, kind: LocatorKind, uuid: UUID, message_uuid: UUID
    ) -> None:
        chat = state.chat
        if is_own_chat_uuid(chat.chat_uuid):
            return
        await self._registry.locators.put(
            kind, uuid, session_id=chat.id, chat_uuid=chat.chat_uuid, message_uuid=message_uuid
        )

    # Reads and state -----------------------------------------------------------------------

    async def _state(
        self, chat_uuid: UUID, *, refresh: bool = False, tail: bool = False
    ) -> ChatState | None:
        """The listed cache of a live chat (``refresh``: checked for changes first; ``tail``:
        the newest events a window read is enough)."""
        state = await self._registry.state(chat_uuid)
        if state is None:
            return None
        state.current = False
        try:
            async with state.lock:
                if not state.listed and not (tail and state.tail and not refresh):
                    await self._events.list_all(state)
                elif refresh:
                    await self._events.refresh(state)
        except DRMemoryNotFoundError:
            self._registry.unregister(chat_uuid)
            return None
        return state

    def _view(self, state: ChatState) -> list[Message]:
        """The chat's active branch in order, with this task's pending writes applied."""
        batch = self._batch()
        if batch is None or state.chat.chat_uuid not in batch.chats:
            return state.ordered()
        pending = batch.pending(state)
        created = [p.work for p in pending.values() if p.base is None]
        if not state.markers and not any(is_marker(m) for m in created):
            view = [self._current(state, pending, m.message_uuid) for m in state.ordered()]
            view.extend(created)
            return view
        tree = fold([*state.events(), *created])
        return [self._current(state, pending, uuid) for uuid in tree.active]

    @staticmethod
    def _current(state: ChatState, pending: dict[UUID, _Pending], uuid: UUID) -> Message:
        entry = pending.get(uuid)
        return entry.work if entry is not None else state.messages[uuid]

    def _find(self, state: ChatState, predicate: Callable[[Message], bool]) -> Message | None:
        return next((m for m in self._view(state) if predicate(m)), None)

    def _find_any(self, state: ChatState, predicate: Callable[[Message], bool]) -> Message | None:
        """As ``_find``, on every branch: a record is found by uuid wherever it is (a run
        finishes its records after a branch took them off the active one)."""
        found = self._find(state, predicate)
        if found is not None or not state.markers:
            return found
        batch = self._batch()
        pending = batch.pending(state) if batch is not None else {}
        return next(
            (
                self._current(state, pending, m.message_uuid)
                for m in state.ordered_all()
                if predicate(self._current(state, pending, m.message_uuid))
            ),
            None,
        )

    async def _locate(
        self, uuid: UUID, kind: LocatorKind, predicate: Callable[[Message], bool]
    ) -> tuple[ChatState, Message] | None:
        """Find the message that is (or holds) the entity ``uuid``, refreshing once on a miss."""
        chat_uuid = await self._registry.chat_of(uuid, kind)
        if chat_uuid is None:
            return None
        state = await self._state(chat_uuid, tail=True)
        if state is None:
            return None
        found = self._find_any(state, predicate)
        if found is None:  # refreshed, or listed whole when only a tail was read
            state = await self._state(chat_uuid, refresh=True)
            found = self._find_any(state, predicate) if state is not None else None
        return None if found is None or state is None else (state, found)

    # Branches ------------------------------------------------------------------------------

    def _marker(self, state: ChatState, operation: Operation, target: UUID) -> Message:
        chat_uuid = state.chat.chat_uuid
        return self.message_class(
            **marker_fields(operation, target),
            message_uuid=mint_child_uuid(chat_uuid),
            chat_uuid=chat_uuid,
            emitter_type="agent",
        )

    async def _append_marker(self, state: ChatState, marker: Message) -> None:
        """Queue ``marker`` in the open transaction, else post it now (one request)."""
        batch = self._batch()
        if batch is not None:
            batch.pending(state)[marker.message_uuid] = _Pending(base=None, work=marker)
            return
        chat_uuid = state.chat.chat_uuid
        try:
            async with state.lock:
                await self._events.post(state, [marker])
        except DRMemoryNotFoundError:
            self._registry.unregister(chat_uuid)
            raise ChatNotFoundError(
                chat_uuid, f"Chat {chat_uuid} was deleted; its branches cannot be changed."
            ) from None

    async def start_branch(self, chat_uuid: UUID, at: UUID) -> None:
        """Start a new branch of the chat at record ``at`` of its active branch: it and the
        records after it leave the active branch (kept); the messages created next follow the
        record before it. One ``cut`` marker event, sent with the transaction's new messages
        (in the same batch POST); outside a transaction, one POST now.

        Raises:
            ChatNotFoundError: If the chat is unknown or deleted.
            ValueError: If ``at`` is no record of the chat's active branch.
        """
        state = await self._state(chat_uuid)  # the whole chat: a window read may lack ``at``
        if state is None:
            raise ChatNotFoundError(chat_uuid, f"Chat {chat_uuid} has no memory session.")
        if all(m.message_uuid != at for m in self._view(state)):
            raise ValueError(f"start_branch: {at} is no message of chat {chat_uuid}.")
        await self._append_marker(state, self._marker(state, "cut", at))

    async def create_tree(
        self,
        chat_uuid: UUID,
        parents: Sequence[int | None],
        leaf: int | None,
        create: Callable[[int], Awaitable[UUID]],
    ) -> None:
        """Write a tree of records into an empty chat, in order: ``create(i)`` creates record
        ``i`` (and returns its uuid), which follows record ``parents[i]`` (an earlier index, or
        ``None``), with the branch markers that takes before it; at the end, the branch ending
        at record ``leaf`` is made the active one. Call it inside ``transaction()`` to send it
        all as one batch POST (per 200 events).

        Raises:
            ChatNotFoundError: If the chat is unknown or deleted.
        """
        state = await self._registry.state(chat_uuid)
        if state is None:
            raise ChatNotFoundError(chat_uuid, f"Chat {chat_uuid} has no memory session.")
        created: dict[int, UUID] = {}
        for kind, index in replay(parents, leaf):
            if kind == "message":
                created[index] = await create(index)
            else:
                operation: Operation = "cut" if kind == "cut" else "activate"
                await self._append_marker(state, self._marker(state, operation, created[index]))

    async def _fresh(self, chat_uuid: UUID) -> ChatState | None:
        """The chat's listed cache, checked for changes unless it was just built."""
        state = await self._registry.state(chat_uuid)
        if state is None:
            return None
        refresh = state.listed and not state.current
        return await self._state(chat_uuid, refresh=refresh)

    async def branch_points(self, chat_uuid: UUID) -> dict[str, BranchPoint] | None:
        """For each record of the active branch that has siblings, by AG-UI id: the siblings'
        AG-UI ids (oldest first) and its index among them. ``{}`` for a chat that never
        branched, ``None`` for an unknown chat. A listed cache answers without a request (a
        read of the chat's messages just before keeps it current)."""
        state = await self._state(chat_uuid)
        if state is None:
            return None
        if not state.markers:
            return {}
        return state.tree().branch_points(lambda uuid: message_id(state.messages[uuid]))

    async def activate(self, chat_uuid: UUID, agui_id: str) -> bool:
        """Make the branch through the record read back as ``agui_id`` the active one (on the
        active branch, else the newest with that id), continued down the newest branch at
        each branch point below it: one ``activate`` marker event, none when that branch is
        already active. ``False`` when the chat (or any record of it) has no such id."""
        state = await self._fresh(chat_uuid)
        if state is None:
            return False
        tree = state.tree()
        target = tree.find(agui_id, lambda uuid: message_id(state.messages[uuid]))
        if target is None:
            return False
        if tree.path(target) != tree.active:
            await self._append_marker(state, self._marker(state, "activate", target))
        return True

    async def get_chat_tree(self, chat_uuid: UUID) -> list[tuple[Message, UUID | None, bool]]:
        """Every record of a chat, every branch, oldest first, each with the uuid of the record
        it follows (``None`` for a first record) and whether it is on the active branch
        (``[]`` for an unknown chat)."""
        state = await self._fresh(chat_uuid)
        if state is None:
            return []
        tree = state.tree()
        active = set(tree.active)
        return [
            (export(m), tree.parent.get(m.message_uuid), m.message_uuid in active)
            for m in state.ordered_all()
        ]

    # Writes --------------------------------------------------------------------------------

    async def _mutate(self, state: ChatState, message: Message, mutation: Mutation) -> Message:
        """Apply ``mutation`` to ``message``: pending in a transaction, else one PATCH now."""
        batch = self._batch()
        if batch is not None:
            pending = batch.pending(state)
            entry = pending.get(message.message_uuid)
            if entry is None:
                base = state.messages[message.message_uuid]
                entry = _Pending(base=base, work=clone(base))
                pending[message.message_uuid] = entry
            mutation(entry.work)
            if entry.base is not None:
                entry.mutations.append(mutation)
            return entry.work
        base = state.messages[message.message_uuid]
        async with state.lock:
            await self._events.patch(state, [(base, [mutation])])
        return state.messages.get(message.message_uuid, base)

    async def create_message(self, message_data: MessageCreate) -> Message:
        """Persist a new message as one event and return it.

        Raises:
            ValueError: If ``chat_uuid`` is missing.
            ChatNotFoundError: If it names no live chat (a ``ValueError`` too).
        """
        chat_uuid = message_data.chat_uuid
        if chat_uuid is None:
            raise ValueError(
                "MessageCreate.chat_uuid is None; pass the chat_uuid of the chat the message "
                "belongs to."
            )
        state = await self._registry.state(chat_uuid)
        if state is None:
            raise ChatNotFoundError(
                chat_uuid,
                f"Chat {chat_uuid} has no memory session (unknown or deleted); create the chat "
                "before its messages.",
            )
        state.current = False
        cls = self.message_class
        values = {
            name: value
            for name, value in message_data.model_dump().items()
            if name in cls.model_fields
        }
        participant = state.chat.participants[0] if state.chat.participants else None
        emitter_type, emitter_id = emitter_for_role(str(values.get("role", "user")), participant)
        message = cls(
            **{
                **values,
                "v": PAYLOAD_VERSION,
                "message_uuid": mint_child_uuid(chat_uuid),
                "chat_uuid": chat_uuid,
                "tool_calls": [],
                "reasonings": [],
                "emitter_type": emitter_type,
                "emitter_id": emitter_id,
            }
        )
        batch = self._batch()
        if batch is not None:
            batch.pending(state)[message.message_uuid] = _Pending(base=None, work=message)
            return export(message)
        try:
            async with state.lock:
                if not state.listed and not state.tail:
                    await self._events.list_all(state)
                await self._events.post(state, [message])
        except DRMemoryNotFoundError:
            self._registry.unregister(chat_uuid)
            raise ChatNotFoundError(
                chat_uuid, f"Chat {chat_uuid} was deleted; its messages cannot be written."
            ) from None
        await self._put_locators(state, message)
        return export(state.messages[message.message_uuid])

    async def update_message(self, message_uuid: UUID, update: MessageUpdate) -> Message | None:
        """Patch a message's own fields (set, non-``None`` ones), or ``None`` if it is unknown."""
        located = await self._locate(
            message_uuid, "message", lambda m: m.message_uuid == message_uuid
        )
        if located is None:
            return None
        state, message = located
        if not update_fields(update):
            return export(message)
        apply_quietly(clone(message), update)  # a bad delta raises ValueError now
        return export(await self._mutate(state, message, lambda m: apply_quietly(m, update)))

    async def _append_child(self, attribute: str, record_class: type[Any], data: Any) -> Any:
        parent_uuid: UUID = data.message_uuid
        kind = _KINDS[attribute]
        located = await self._locate(
            parent_uuid, "message", lambda m: m.message_uuid == parent_uuid
        )
        if located is None:
            raise ValueError(
                f"Message {parent_uuid} does not exist; create the message before its "
                f"{kind.replace('_', ' ')}s."
            )
        state, message = located
        values = data.model_dump(exclude={"message_uuid"})
        record: Any = record_class(**{**values, "uuid": mint_child_uuid(state.chat.chat_uuid)})

        def append(target: Message) -> None:
            records = getattr(target, attribute)
            if all(existing.uuid != record.uuid for existing in records):
                records.append(record.model_copy(deep=True))

        updated = await self._mutate(state, message, append)
        batch = self._batch()
        if batch is None:
            await self._put_child_locator(state, kind, record.uuid, parent_uuid)
        else:
            batch.children.append((state, kind, record.uuid, parent_uuid))
        self._registry.remember_entity(record.uuid, state.chat.chat_uuid)
        stored = next((r for r in getattr(updated, attribute) if r.uuid == record.uuid), record)
        return stored.model_copy(deep=True)

    async def _update_child(self, attribute: str, uuid: UUID, update: Any) -> Any:
        kind = _KINDS[attribute]

        def holds(message: Message) -> bool:
            return any(r.uuid == uuid for r in getattr(message, attribute))

        located = await self._locate(uuid, kind, holds)
        if located is None:
            return None
        state, message = located
        current = next(r for r in getattr(message, attribute) if r.uuid == uuid)
        if not update_fields(update):
            return current.model_copy(deep=True)
        apply_update(current.model_copy(deep=True), update)  # a bad delta raises now

        def change(target: Message) -> None:
            for record in getattr(target, attribute):
                if record.uuid == uuid:
                    apply_update(record, update)

        updated = await self._mutate(state, message, change)
        stored = next((r for r in getattr(updated, attribute) if r.uuid == uuid), None)
        return None if stored is None else stored.model_copy(deep=True)

    # Reads -----------------------------------------------------------------------------------

    async def get_message(self, message_uuid: UUID) -> Message | None:
        """Return a message by its application uuid, or ``None``."""
        located = await self._locate(
            message_uuid, "message", lambda m: m.message_uuid == message_uuid
        )
        return None if located is None else export(located[1])

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> Message | None:
        """Return the first message (sequence order) with this AG-UI id in a chat, or ``None``.

        On a cache holding only the chat's newest events (``get_recent_messages``), a message
        they hold costs nothing; another lists the chat (it may be older)."""
        state = await self._state(chat_uuid, tail=True)
        if state is not None and state.tail:
            found = self._find(state, lambda m: m.agui_id == agui_id)
            if found is not None:
                return export(found)
            state = await self._state(chat_uuid)
        if state is None:
            return None
        found = self._find(state, lambda m: m.agui_id == agui_id)
        return None if found is None else export(found)

    async def get_tool_call_by_agui_id(self, message_uuid: UUID, agui_id: str) -> ToolCall | None:
        """Return a tool call by its AG-UI id within a message, or ``None``."""
        message = await self.get_message(message_uuid)
        if message is None:
            return None
        return next((call for call in message.tool_calls if call.agui_id == agui_id), None)

    async def get_chat_messages(self, chat_uuid: UUID) -> Sequence[Message]:
        """The messages of a chat's active branch, oldest first by sequence id (``[]`` for an
        unknown chat).

        A cold cache lists the chat once (pages of 100); a warm one checks the newest event
        (``lastN=1``) and reads only what changed.
        """
        state = await self._registry.state(chat_uuid)
        if state is None:
            return []
        refresh = state.listed and not state.current
        state.current = False
        state = await self._state(chat_uuid, refresh=refresh)
        return [] if state is None else [export(m) for m in self._view(state)]

    async def get_recent_messages(self, chat_uuid: UUID, limit: int) -> Sequence[Message]:
        """The newest ``limit`` messages of a chat, oldest first (``[]`` for an unknown chat).

        A cold cache reads one ``lastN=<limit>`` request (``limit`` up to 100) and keeps those
        events: a run then updates them without listing the chat. A listed cache checks
        freshness as ``get_chat_messages`` does. More than 100 reads the whole chat.
        """
        if limit < 1:
            raise ValueError(f"get_recent_messages(limit={limit!r}) must be at least 1.")
        state = await self._registry.state(chat_uuid)
        if state is None:
            return []
        if state.listed or limit > PAGE_SIZE:
            return list(await self.get_chat_messages(chat_uuid))[-limit:]
        state.current = False
        try:
            async with state.lock:
                if not state.listed:
                    await self._events.read_tail(state, limit)
        except DRMemoryNotFoundError:
            self._registry.unregister(chat_uuid)
            return []
        return [export(m) for m in self._view(state)[-limit:]]

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        """The newest message of each chat that has one: one ``lastN`` request per chat."""
        limit = asyncio.Semaphore(_CONCURRENT_TAILS)

        async def last(chat_uuid: UUID) -> Message | None:
            async with limit:
                return await self._last(chat_uuid)

        found = await asyncio.gather(*(last(chat_uuid) for chat_uuid in chat_uuids))
        return {
            chat_uuid: export(message)
            for chat_uuid, message in zip(chat_uuids, found, strict=True)
            if message is not None
        }

    async def _last(self, chat_uuid: UUID) -> Message | None:
        state = await self._registry.state(chat_uuid)
        if state is None:
            return None
        chat = state.chat
        cls = self.message_class
        try:
            tail = await self._retry.run(lambda: cls.last(chat, 1, type="message"))
            if tail and tail[0].v != PAYLOAD_VERSION:
                tail = await self._retry.run(lambda: cls.last(chat, PAGE_SIZE, type="message"))
        except DRMemoryNotFoundError:
            self._registry.unregister(chat_uuid)
            return None
        if any(is_marker(event) for event in tail):
            # After a branch switch the newest message may be off the active branch.
            listed = await self._fresh(chat_uuid)
            view = self._view(listed) if listed is not None else []
            return view[-1] if view else None
        current = [event for event in tail if event.v == PAYLOAD_VERSION]
        newest = max(current, key=lambda event: event.sequence_id, default=None)
        if newest is not None and state.listed and newest.message_uuid in state.messages:
            async with state.lock:
                if newest.sequence_id == state.max_seq:
                    self._events.absorb(state, newest)
        batch = self._batch()
        if batch is not None and state.chat.chat_uuid in batch.chats:
            view = self._view(state)  # this task's pending writes win
            return view[-1] if view else newest
        return newest
