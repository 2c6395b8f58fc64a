"""The event layer under ``MessageRepository``: per-chat caches kept in step with the service.

Every method expects the caller to hold ``state.lock`` of the chat it works on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeVar
from uuid import UUID

from pydantic import BaseModel

from django_pydantic_agent.chat_history.memory_service._branches import is_marker
from django_pydantic_agent.chat_history.memory_service.registry import (
    ChatSessionRegistry,
    ChatState,
)
from django_pydantic_agent.chat_history.records import (
    PAYLOAD_VERSION,
    Message,
    MessageStatus,
    apply_update,
    update_fields,
)
from django_pydantic_agent.memory_service import (
    DRMemoryServiceError,
    DRMemoryVersionConflictError,
)

__all__ = [
    "CONTENT_LIMIT_ERROR",
    "MAX_CONTENT_LENGTH",
    "PAGE_SIZE",
    "EventStore",
    "Mutation",
    "apply_quietly",
    "clone",
    "export",
]

logger = logging.getLogger("django_pydantic_agent.chat_history")

PAGE_SIZE: Final[int] = 100
MAX_BATCH: Final[int] = 200
PATCH_CONFLICT_ATTEMPTS: Final[int] = 3
MAX_CONTENT_LENGTH: Final[int] = 100_000
"""The Memory Service's limit on an event's ``content``, in characters."""
CONTENT_LIMIT_ERROR: Final[str] = (
    f"The message is longer than the Memory Service's {MAX_CONTENT_LENGTH:,}-character limit; "
    f"only its first {MAX_CONTENT_LENGTH:,} characters are stored."
)
_EMITTER_FIELDS: Final[frozenset[str]] = frozenset({"emitter_type", "emitter_id"})

R = TypeVar("R")
Mutation = Callable[[Message], None]


def clone(message: Message) -> Message:
    """A copy whose nested records can be changed without touching ``message``."""
    copy = message.model_copy()
    copy.tool_calls = [call.model_copy(deep=True) for call in message.tool_calls]
    copy.reasonings = [step.model_copy(deep=True) for step in message.reasonings]
    return copy


def export(message: Message) -> Message:
    """A detached copy for callers: changing it never touches the cache (nor the session)."""
    copy = clone(message)
    copy._session = None
    return copy


def _diff(old: Message, new: Message) -> dict[str, Any]:
    """The body fields (and content) whose value differs between two copies of a message."""
    return {
        name: getattr(new, name)
        for name in type(new).model_fields
        if name not in _EMITTER_FIELDS and getattr(old, name) != getattr(new, name)
    }


def _cap(message: Message) -> None:
    """Enforce the service's content limit: keep the first part and mark the record errored."""
    if len(message.content) > MAX_CONTENT_LENGTH:
        message.content = message.content[:MAX_CONTENT_LENGTH]
        message.error = CONTENT_LIMIT_ERROR
    if message.error == CONTENT_LIMIT_ERROR:
        message.status = MessageStatus.ERRORED.value
        message.in_progress = False


def _body(message: Message) -> dict[str, Any]:
    """``post`` keyword arguments recreating ``message``."""
    values = {name: getattr(message, name) for name in type(message).model_fields}
    return values


def _chunks(items: Sequence[R], size: int) -> list[Sequence[R]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def apply_quietly(message: Message, update: BaseModel) -> None:
    """Apply an update on replay; a delta that no longer fits (capped content) is dropped."""
    try:
        apply_update(message, update)
    except ValueError:
        if message.error != CONTENT_LIMIT_ERROR:
            raise
        trimmed = {
            name: value
            for name, value in update_fields(update).items()
            if not name.startswith("content")
        }
        apply_update(message, type(update).model_validate(trimmed))


class EventStore:
    """Reads and writes the ``message`` events of cached chats for one message class."""

    def __init__(self, registry: ChatSessionRegistry, message_class: type[Message]) -> None:
        self._registry = registry
        self._retry = registry.retry
        self.message_class = message_class

    def absorb(self, state: ChatState, event: Message) -> None:
        """Record a message-type event read from or written to the service."""
        if event.sequence_id not in state.seqs:
            state.seqs.append(event.sequence_id)
            if len(state.seqs) > 1 and state.seqs[-2] > event.sequence_id:
                state.seqs.sort()
        state.saw(event)
        if is_marker(event):
            state.markers[event.message_uuid] = event
            return
        if event.v != PAYLOAD_VERSION:
            return
        state.messages[event.message_uuid] = event
        registry = self._registry
        chat_uuid = state.chat.chat_uuid
        registry.remember_entity(event.message_uuid, chat_uuid)
        for call in event.tool_calls:
            registry.remember_entity(call.uuid, chat_uuid)
        for step in event.reasonings:
            registry.remember_entity(step.uuid, chat_uuid)

    async def page(self, state: ChatState, offset: int) -> list[Message]:
        chat = state.chat
        return await self._retry.run(
            lambda: self.message_class.list(chat, type="message", offset=offset, limit=PAGE_SIZE)
        )

    async def list_all(self, state: ChatState) -> None:
        """Read the whole chat (pages of 100) into the cache."""
        events: list[Message] = []
        while True:
            page = await self.page(state, len(events))
            events.extend(page)
            if len(page) < PAGE_SIZE:
                break
        state.reset()
        for event in events:
            self.absorb(state, event)
        state.listed = True

    async def read_tail(self, state: ChatState, n: int) -> None:
        """Read the newest ``n`` (1-100) message events into the cache: one ``lastN`` request.

        Fewer than ``n`` events are the whole chat (the cache is then ``listed``). A tail
        holding an event of another body version is listed whole instead, so the cache never
        holds fewer current messages than the chat's newest ``n`` without saying so.
        """
        chat = state.chat
        tail = await self._retry.run(lambda: self.message_class.last(chat, n, type="message"))
        if any(event.v != PAYLOAD_VERSION for event in tail):
            await self.list_all(state)
            return
        state.reset()
        for event in tail:
            self.absorb(state, event)
        if len(tail) < n:
            state.listed = True  # the whole chat: its seqs are the listing offsets
        else:
            state.tail = True

    async def refresh(self, state: ChatState) -> None:
        """Bring a listed cache up to date: one ``lastN=1`` request when nothing changed.

        A ``tail`` cache (offsets unknown) is listed whole instead."""
        if not state.listed:
            await self.list_all(state)
            return
        chat = state.chat
        tail = await self._retry.run(lambda: self.message_class.last(chat, 1, type="message"))
        if not tail:
            if state.seqs:
                await self.list_all(state)
            return
        last = tail[0]
        if last.sequence_id == state.max_seq:
            if last.created_at != state.max_token:
                self.absorb(state, last)
            return
        if last.sequence_id < state.max_seq:
            await self.list_all(state)
            return
        newer: list[Message] = []
        while True:
            page = await self.page(state, len(state.seqs) + len(newer))
            newer.extend(page)
            if len(page) < PAGE_SIZE:
                break
        if not newer or newer[0].sequence_id <= state.max_seq:
            await self.list_all(state)  # events were deleted: offsets moved
            return
        for event in newer:
            self.absorb(state, event)

    async def reread(self, state: ChatState, seqs: Sequence[int]) -> None:
        """Re-read the events ``seqs`` (after a version conflict) from their offset on."""
        first = min(seqs)
        if not state.listed or first not in state.seqs:
            await self.list_all(state)
            return
        offset = state.seqs.index(first)
        events: list[Message] = []
        while True:
            page = await self.page(state, offset + len(events))
            events.extend(page)
            if len(page) < PAGE_SIZE:
                break
        if not events or events[0].sequence_id != first:
            await self.list_all(state)
            return
        for event in events:
            self.absorb(state, event)

    async def find_posted(self, state: ChatState, wanted: list[UUID]) -> list[Message] | None:
        """After a create that may have been stored: the stored events, or ``None`` if not."""
        chat = state.chat
        tail = await self.message_class.last(chat, PAGE_SIZE, type="message")
        found = {event.message_uuid: event for event in tail if event.message_uuid in wanted}
        window_reaches_back = len(tail) < PAGE_SIZE or tail[0].sequence_id <= state.max_seq
        if not found and not window_reaches_back:
            offset = len(state.seqs) if state.listed else 0  # a tail's seqs are no offsets
            while True:
                page = await self.message_class.list(
                    chat, type="message", offset=offset, limit=PAGE_SIZE
                )
                found.update((e.message_uuid, e) for e in page if e.message_uuid in wanted)
                offset += len(page)
                if len(page) < PAGE_SIZE:
                    break
        if not found:
            return None
        if len(found) != len(wanted):  # pragma: no cover - batch creates are atomic
            raise DRMemoryServiceError(
                f"Only {len(found)} of {len(wanted)} messages of an interrupted batch create "
                f"are stored in chat {chat.chat_uuid}; re-read the chat before writing again."
            )
        return [found[uuid] for uuid in wanted]

    async def post(self, state: ChatState, messages: list[Message]) -> None:
        """Create ``messages`` (batches of 200), never twice even when a response is lost."""
        chat = state.chat
        cls = self.message_class
        for chunk in _chunks(messages, MAX_BATCH):
            for message in chunk:
                _cap(message)
            wanted = [m.message_uuid for m in chunk]
            items = [_body(m) for m in chunk]

            async def operation(items: list[dict[str, Any]] = items) -> list[Message]:
                if len(items) == 1:
                    return [await cls.post(chat, **items[0])]
                return await cls.post_batch(chat, items)

            async def recheck(wanted: list[UUID] = wanted) -> list[Message] | None:
                return await self.find_posted(state, wanted)

            created = await self._retry.run(operation, recheck=recheck)
            if created and created[0].sequence_id != state.max_seq + 1:
                # Someone wrote in between: read the chat again when asked.
                state.listed = state.tail = False
            for event in created:
                self.absorb(state, event)

    async def patch(self, state: ChatState, changed: list[tuple[Message, list[Mutation]]]) -> None:
        """Apply ``mutations`` to the committed messages: one PATCH (or batch) per attempt."""
        chat = state.chat
        cls = self.message_class
        for attempt in range(PATCH_CONFLICT_ATTEMPTS):
            updates: list[tuple[Message, dict[str, Any]]] = []
            for base, mutations in changed:
                work = clone(base)
                for mutation in mutations:
                    mutation(work)
                _cap(work)
                changes = _diff(base, work)
                if changes:
                    changes.setdefault("content", work.content)
                    updates.append((base, changes))
            if not updates:
                return
            try:
                for chunk in _chunks(updates, MAX_BATCH):

                    async def send(chunk: Sequence[tuple[Message, dict[str, Any]]] = chunk) -> None:
                        if len(chunk) == 1:
                            event, changes = chunk[0]
                            await event.patch(**changes)
                        else:
                            await cls.patch_batch(chat, chunk)

                    await self._retry.run(send)
                    for event, _ in chunk:
                        state.saw(event)
                return
            except DRMemoryVersionConflictError:
                if attempt == PATCH_CONFLICT_ATTEMPTS - 1:
                    raise
                await self.reread(state, [event.sequence_id for event, _ in updates])
                changed = [
                    (state.messages[base.message_uuid], mutations)
                    for base, mutations in changed
                    if base.message_uuid in state.messages
                ]
