"""``AGUIAgent`` and ``AGUIStorageAgent``: persist an AG-UI event stream as chat history.

``AGUIStorageAgent.run`` checks the inbound messages against the stored chat (nothing is
written if any is refused), stores the accepted ones, replays the stored history to the inner
agent, and forwards the inner agent's events verbatim and in real time while a consumer task it
owns folds them into records. Writes are few: records are created at their first flush with
their content, completion is folded into the same write, text is flushed by size and by time,
and every flush is one ``message_repo.transaction()``.

How a run ends decides the terminal status of this run's records (never another run's):
``RUN_FINISHED`` → ``complete`` (outcome ``cancelled`` → ``interrupted``); ``RUN_ERROR`` →
``errored`` with ``"[code] message"``; cancellation → ``interrupted`` (finalization shielded,
bounded by ``finalize_timeout``, then ``CancelledError`` re-raised); a raw exception →
``errored`` with a generic sentence (details logged), then re-raised; a stream that ends with
no terminal event → ``errored`` and a ``RUN_ERROR`` is emitted; a persistence backlog overflow →
``errored`` with a sentence saying events were dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Any, Final
from uuid import UUID

import ag_ui.core as agui
from ag_ui.core import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    BaseEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.core import Message as AGUIMessage

from django_pydantic_agent.chat_history._inbound import (
    derive_chat_name,
    dump_parts,
    flatten_content,
    plan_inbound,
)
from django_pydantic_agent.chat_history._tracking import (
    StorageState,
    TrackedMessage,
    TrackedReasoning,
    TrackedRecord,
    TrackedToolCall,
    apply_json_patch,
)
from django_pydantic_agent.chat_history.errors import ErrorCodes, InvalidInputError
from django_pydantic_agent.chat_history.records import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    Role,
)
from django_pydantic_agent.chat_history.repositories import (
    ChatRepositoryLike,
    MessageRepositoryLike,
)
from django_pydantic_agent.chat_history.translate import translate_messages

__all__ = [
    "CRASH_TEXT",
    "DROPPED_TEXT",
    "INCOMPLETE_STREAM_TEXT",
    "AGUIAgent",
    "AGUIStorageAgent",
    "StorageState",
]

logger = logging.getLogger("django_pydantic_agent.chat_history")

CRASH_TEXT: Final[str] = "The agent failed with an internal error; details are in the server log."
"""Stored on records (and sent to clients) when the inner agent raised; never the raw text."""

DROPPED_TEXT: Final[str] = (
    "Events were dropped because the persistence queue was full; this record may be incomplete."
)
INCOMPLETE_STREAM_TEXT: Final[str] = (
    "The agent's stream ended without RUN_FINISHED or RUN_ERROR; the run is incomplete."
)

ACTIVE = MessageStatus.ACTIVE.value
COMPLETE = MessageStatus.COMPLETE.value
INTERRUPTED = MessageStatus.INTERRUPTED.value
ERRORED = MessageStatus.ERRORED.value

_NIL = UUID(int=0)
_STOP: Final = object()
_THINKING = {
    "ThinkingStartEvent": "THINKING_START",
    "ThinkingEndEvent": "THINKING_END",
    "ThinkingTextMessageStartEvent": "THINKING_TEXT_MESSAGE_START",
    "ThinkingTextMessageContentEvent": "THINKING_TEXT_MESSAGE_CONTENT",
    "ThinkingTextMessageEndEvent": "THINKING_TEXT_MESSAGE_END",
}


def _type_name(event: BaseEvent) -> str:
    kind = event.type
    return str(getattr(kind, "value", kind))


def _now_ms() -> int:
    return int(time.time() * 1000)


class AGUIAgent(ABC):
    """Minimal AG-UI agent contract: a named object exposing an event stream."""

    name: str

    @abstractmethod
    def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        """Yield the agent's AG-UI ``BaseEvent`` stream for one run."""


class AGUIStorageAgent(AGUIAgent):
    """Wrap an inner AG-UI agent, persisting its event stream as chat history.

    Args:
        name: Written as ``name`` on every agent-created message.
        user_id: The owning user's UUID (chats are scoped by it).
        chat_repo / message_repo: Any ``ChatRepositoryLike`` / ``MessageRepositoryLike``.
        inner: The wrapped agent; another ``AGUIStorageAgent`` is refused (``ValueError``).
        minimal_chunk_to_persist: Flush a record once this many characters are buffered.
        flush_interval: Flush buffered changes at most this many seconds after they arrive,
            even while the inner agent is silent.
        max_queue_size: Events waiting for persistence beyond this are dropped from
            persistence (still forwarded) and the run's records end ``errored``.
        finalize_timeout: Upper bound, in seconds, on the final drain and flush of a run.
        translate: Stored messages → AG-UI history (default ``translate_messages``).
    """

    def __init__(
        self,
        name: str,
        user_id: UUID,
        chat_repo: ChatRepositoryLike,
        message_repo: MessageRepositoryLike,
        inner: AGUIAgent,
        *,
        minimal_chunk_to_persist: int = 5000,
        flush_interval: float = 0.25,
        max_queue_size: int = 10_000,
        finalize_timeout: float = 30.0,
        translate: Callable[[Sequence[Message]], list[AGUIMessage]] = translate_messages,
    ) -> None:
        if isinstance(inner, AGUIStorageAgent):
            raise ValueError(
                f"AGUIStorageAgent {name!r} cannot wrap another AGUIStorageAgent "
                f"({inner.name!r}); wrap the inner agent once."
            )
        if minimal_chunk_to_persist < 1 or flush_interval <= 0 or max_queue_size < 1:
            raise ValueError(
                "minimal_chunk_to_persist and max_queue_size must be at least 1 and "
                f"flush_interval positive; got {minimal_chunk_to_persist!r}, "
                f"{max_queue_size!r} and {flush_interval!r}."
            )
        self.name = name
        self.user_id = user_id
        self.chat_repo = chat_repo
        self.message_repo = message_repo
        self.inner = inner
        self.minimal_chunk_to_persist = minimal_chunk_to_persist
        self.flush_interval = flush_interval
        self.max_queue_size = max_queue_size
        self.finalize_timeout = finalize_timeout
        self._translate = translate
        self._handlers = self.event_handlers()
        self._warned_seconds = False

    # Extension point 1: the dispatch table ------------------------------------------------

    @classmethod
    def event_handlers(cls) -> dict[type[BaseEvent], str]:
        """Return the AG-UI-event-type → handler-method-name table.

        A subclass of a registered event uses its parent's handler (resolved along the MRO);
        anything unregistered goes to :meth:`handle_unknown_event`. ``Thinking*`` events are
        registered only when the installed ag-ui still defines them.
        """
        table: dict[type[BaseEvent], str] = {
            RunStartedEvent: "handle_run_lifecycle",
            RunFinishedEvent: "handle_run_lifecycle",
            RunErrorEvent: "handle_run_lifecycle",
            StepStartedEvent: "handle_step",
            StepFinishedEvent: "handle_step",
            TextMessageStartEvent: "handle_text_message",
            TextMessageContentEvent: "handle_text_message",
            TextMessageEndEvent: "handle_text_message",
            TextMessageChunkEvent: "handle_text_message",
            ToolCallStartEvent: "handle_tool_call",
            ToolCallArgsEvent: "handle_tool_call",
            ToolCallEndEvent: "handle_tool_call",
            ToolCallChunkEvent: "handle_tool_call",
            ToolCallResultEvent: "handle_tool_call",
            ReasoningStartEvent: "handle_reasoning",
            ReasoningMessageStartEvent: "handle_reasoning",
            ReasoningMessageContentEvent: "handle_reasoning",
            ReasoningMessageEndEvent: "handle_reasoning",
            ReasoningMessageChunkEvent: "handle_reasoning",
            ReasoningEndEvent: "handle_reasoning",
            ReasoningEncryptedValueEvent: "handle_reasoning",
            ActivitySnapshotEvent: "handle_activity",
            ActivityDeltaEvent: "handle_activity",
        }
        for class_name in _THINKING:
            legacy = getattr(agui, class_name, None)
            if isinstance(legacy, type) and issubclass(legacy, BaseEvent):
                table[legacy] = "handle_reasoning"
        return table

    def _handler_for(self, event: BaseEvent) -> Callable[..., Any]:
        for klass in type(event).__mro__:
            name = self._handlers.get(klass)
            if name is not None:
                handler: Callable[..., Any] = getattr(self, name)
                return handler
        return self.handle_unknown_event

    async def handle_unknown_event(self, state: StorageState, chat: Chat, event: BaseEvent) -> None:
        """Handle an event with no registered handler; the default ignores it."""
        logger.debug("No storage handler for %s; it is forwarded but not stored.", event.type)

    def translate(self, messages: Sequence[Message]) -> list[AGUIMessage]:
        """Translate stored messages into the AG-UI history given to the inner agent."""
        return self._translate(messages)

    # Extension point 3: DTO builders -------------------------------------------------------

    def build_message_create(
        self, state: StorageState, chat: Chat, agui_id: str | None, role: str | None
    ) -> MessageCreate:
        """Build the DTO that creates an agent message (content and status are added later).

        Override to populate extra fields of a ``Message`` subclass (extra keys, or a
        ``MessageCreate`` subclass).
        """
        return MessageCreate(
            agui_id=agui_id,
            role=role or Role.ASSISTANT.value,
            name=self.name,
            content="",
            step=state.active_step,
            chat_uuid=chat.chat_uuid,
            timestamp=state.current_event_timestamp,
            run_id=state.run_id,
        )

    def build_user_message_create(self, chat: Chat, message: UserMessage) -> MessageCreate:
        """Build the DTO that stores an accepted inbound user message."""
        return MessageCreate(
            agui_id=message.id,
            role=Role.USER.value,
            name=message.name or "",
            content=flatten_content(message.content),
            content_parts=dump_parts(message.content),
            chat_uuid=chat.chat_uuid,
            in_progress=False,
            status=COMPLETE,
            timestamp=datetime.now(UTC),
            encrypted_value=message.encrypted_value,
        )

    def build_tool_call_create(
        self, state: StorageState, tool_call_id: str, tool_call_name: str | None
    ) -> MessageToolCallCreate:
        """Build the DTO that appends a tool call to the active message.

        ``message_uuid`` is filled in when the call is written (its parent may not be stored
        yet when this runs).
        """
        parent = state.active_message
        return MessageToolCallCreate(
            message_uuid=(parent.uuid if parent is not None and parent.uuid else _NIL),
            agui_id=tool_call_id,
            tool_call_id=tool_call_id,
            name=tool_call_name or "UNKNOWN",
            created_at=state.current_event_timestamp,
            run_id=state.run_id,
        )

    def build_reasoning_create(
        self, state: StorageState, name: str | None
    ) -> MessageReasoningCreate:
        """Build the DTO that appends a reasoning step to the active message."""
        parent = state.active_message
        return MessageReasoningCreate(
            message_uuid=(parent.uuid if parent is not None and parent.uuid else _NIL),
            agui_id=state.active_reasoning_agui_id,
            name=name or "",
            created_at=state.current_event_timestamp,
            run_id=state.run_id,
        )

    def message_update_fields(self, state: StorageState, event: BaseEvent) -> dict[str, Any]:
        """Extra fields stored with a message's terminal write (default: none).

        Called when ``event`` completes or fails a message of this run; the keys are stored
        when the ``Message`` class (or subclass) declares them.
        """
        return {}

    # run() ----------------------------------------------------------------------------------

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        """Store inbound messages, replay history, then stream the inner agent.

        ``input`` is not modified; the inner agent gets a copy whose ``messages`` are the
        stored history. A refused input yields ``RUN_STARTED`` then ``RUN_ERROR`` (code
        ``INVALID_INPUT``) and writes nothing. Repository failures before the stream raise.
        """
        try:
            chat, history = await self._prepare(input)
        except InvalidInputError as exc:
            yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
            yield RunErrorEvent(message=str(exc), code=ErrorCodes.INVALID_INPUT.value)
            return
        inner_input = input.model_copy(update={"messages": self.translate(history)})
        state = StorageState(
            run_id=input.run_id, thread_id=input.thread_id, chat=chat, history=history
        )
        queue: asyncio.Queue[Any] = asyncio.Queue()
        consumer = asyncio.create_task(self._consume(queue, state, chat))
        cause: str | None = None
        started = False
        try:
            async with aclosing(self.inner.run(inner_input)) as stream:
                async for event in stream:
                    if not event.timestamp:
                        event.timestamp = _now_ms()
                    if isinstance(event, RunStartedEvent):
                        started = True
                    elif isinstance(event, RunFinishedEvent | RunErrorEvent):
                        state.terminal_seen = True
                    self._enqueue(queue, state, event)
                    yield event
            if not state.terminal_seen:
                if not started:
                    yield RunStartedEvent(
                        thread_id=input.thread_id, run_id=input.run_id, timestamp=_now_ms()
                    )
                closing = RunErrorEvent(
                    message=INCOMPLETE_STREAM_TEXT,
                    code=ErrorCodes.INTERNAL_ERROR.value,
                    timestamp=_now_ms(),
                )
                state.terminal_seen = True
                self._enqueue(queue, state, closing)
                yield closing
        except asyncio.CancelledError:
            cause = "cancelled"
            raise
        except GeneratorExit:
            cause = "abandoned"
            raise
        except Exception:
            logger.exception(
                "The inner agent %r failed during run %r of thread %r.",
                self.inner.name,
                input.run_id,
                input.thread_id,
            )
            cause = "crashed"
            raise
        finally:
            await self._finish_shielded(queue, consumer, state, chat, cause)

    def _enqueue(self, queue: asyncio.Queue[Any], state: StorageState, event: BaseEvent) -> None:
        if queue.qsize() >= self.max_queue_size:
            if not state.dropped:
                logger.error(
                    "The persistence queue of run %r is full (%d events); later events are "
                    "forwarded but not stored.",
                    state.run_id,
                    self.max_queue_size,
                )
            state.dropped = True
            return
        queue.put_nowait(event)

    async def _prepare(self, input: RunAgentInput) -> tuple[Chat, list[Message]]:
        """Validate the inbound list, then write what it adds; return the chat and history."""
        chat = await self.chat_repo.get_chat_by_thread_id(self.user_id, input.thread_id)
        history = list(await self.message_repo.get_chat_messages(chat.chat_uuid)) if chat else []
        plan = plan_inbound(input, history)
        if chat is None:
            first = input.messages[0].content if input.messages else None
            chat = await self.chat_repo.create_chat(
                ChatCreate(
                    name=derive_chat_name(flatten_content(first)),
                    thread_id=input.thread_id,
                    user_uuid=self.user_id,
                )
            )
        if not (plan.users or plan.answers or plan.resume_carrier):
            return chat, history
        async with self.message_repo.transaction():
            replaced: dict[UUID, Message] = {}
            for answer in plan.answers:
                updated = await self.message_repo.update_message_tool_call(
                    answer.call.uuid,
                    MessageToolCallUpdate(
                        content=answer.content,
                        content_parts=answer.content_parts,
                        result_message_id=answer.result_id,
                        has_result=True,
                        error=answer.error,
                        result_encrypted_value=answer.encrypted_value,
                    ),
                )
                if updated is not None:
                    owner = replaced.get(answer.message.message_uuid) or answer.message
                    # Shallow: a stored record may hold its live session (and HTTP client).
                    calls = [updated if c.uuid == updated.uuid else c for c in owner.tool_calls]
                    replaced[answer.message.message_uuid] = owner.model_copy(
                        update={"tool_calls": calls}
                    )
            carrier = plan.resume_carrier
            if carrier is not None:
                outcome = dict(carrier.run_outcome or {})
                outcome["resolved"] = {**(outcome.get("resolved") or {}), **plan.resolved}
                updated_carrier = await self.message_repo.update_message(
                    carrier.message_uuid, MessageUpdate(run_outcome=outcome)
                )
                if updated_carrier is not None:
                    base = replaced.get(carrier.message_uuid)
                    if base is not None:
                        updated_carrier.tool_calls = base.tool_calls
                    replaced[carrier.message_uuid] = updated_carrier
            created = [
                await self.message_repo.create_message(self.build_user_message_create(chat, m))
                for m in plan.users
            ]
        history = [replaced.get(m.message_uuid, m) for m in history] + created
        return chat, history

    async def _finish_shielded(
        self,
        queue: asyncio.Queue[Any],
        consumer: asyncio.Task[None],
        state: StorageState,
        chat: Chat,
        cause: str | None,
    ) -> None:
        """Run the final drain, finalization and flush; a second cancel cannot abort it."""
        finish = asyncio.create_task(self._finish(queue, consumer, state, chat, cause))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.finalize_timeout
        cancelled_again = False
        while not finish.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                logger.error(
                    "Finalizing run %r took longer than %.1f s; it was abandoned and its "
                    "records may stay active.",
                    state.run_id,
                    self.finalize_timeout,
                )
                finish.cancel()
                deadline = loop.time() + 1.0
            try:
                await asyncio.wait({finish}, timeout=max(remaining, 0.01))
            except asyncio.CancelledError:
                cancelled_again = True
        if not finish.cancelled() and finish.exception() is not None:
            logger.error("Finalizing run %r failed.", state.run_id, exc_info=finish.exception())
        if cancelled_again and cause != "cancelled":
            raise asyncio.CancelledError

    async def _finish(
        self,
        queue: asyncio.Queue[Any],
        consumer: asyncio.Task[None],
        state: StorageState,
        chat: Chat,
        cause: str | None,
    ) -> None:
        queue.put_nowait(_STOP)
        try:
            await consumer
        except asyncio.CancelledError:
            consumer.cancel()
            await asyncio.wait({consumer})
            raise
        if cause in ("cancelled", "abandoned"):
            self._terminate(state, INTERRUPTED, None, None)
            if state.outcome is None:
                self._set_outcome(state, {"type": "cancelled"}, force=False)
        elif cause == "crashed":
            self._terminate(state, ERRORED, CRASH_TEXT, None)
            if state.outcome is None:
                self._set_outcome(state, {"type": "error", "message": CRASH_TEXT}, force=False)
        elif state.dropped:
            self._terminate(state, ERRORED, DROPPED_TEXT, None)
        for attempt in range(3):
            if await self._flush(state):
                return
            await asyncio.sleep(0.05 * 4**attempt)
        logger.error(
            "The final flush of run %r failed three times; some of its changes are not stored.",
            state.run_id,
        )

    # The consumer ---------------------------------------------------------------------------

    async def _consume(self, queue: asyncio.Queue[Any], state: StorageState, chat: Chat) -> None:
        loop = asyncio.get_running_loop()
        while True:
            timeout = None if state.flush_due is None else max(0.0, state.flush_due - loop.time())
            try:
                item = await asyncio.wait_for(queue.get(), timeout)
            except TimeoutError:
                await self._flush(state)
                continue
            if item is _STOP:
                return
            state.current_event_timestamp = self._event_time(item)
            try:
                await self._handler_for(item)(state, chat, item)
            except Exception:
                logger.exception(
                    "Storing %s of run %r failed; the event is forwarded but not stored.",
                    _type_name(item),
                    state.run_id,
                )
            if state.flush_now:
                await self._flush(state)
            elif state.flush_due is None and state.dirty():
                state.flush_due = loop.time() + self.flush_interval

    def _event_time(self, event: BaseEvent) -> datetime:
        stamp = event.timestamp or _now_ms()
        if stamp < 100_000_000_000:
            if not self._warned_seconds:
                logger.warning(
                    "Event timestamps of run look like seconds (%r), not milliseconds; they "
                    "are read as seconds.",
                    stamp,
                )
                self._warned_seconds = True
            stamp *= 1000
        try:
            return datetime.fromtimestamp(stamp / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return datetime.now(UTC)

    def _append(self, state: StorageState, record: TrackedRecord, delta: str | None) -> None:
        if not delta:
            return
        record.text.value += delta
        if record.text.pending >= self.minimal_chunk_to_persist:
            state.flush_now = True

    # Resolution helpers -----------------------------------------------------------------------

    def _close(self, state: StorageState, record: TrackedRecord, event: BaseEvent | None) -> None:
        """Complete a record of this run that is still active."""
        if record.is_active:
            record.status = COMPLETE
            if isinstance(record, TrackedMessage) and event is not None:
                record.changes.update(self.message_update_fields(state, event))

    def ensure_message(
        self, state: StorageState, chat: Chat, agui_id: str | None, role: str | None = None
    ) -> TrackedMessage:
        """Return the message events fold onto, starting (or adopting an id for) one.

        With an id: the active message if it has it; an anonymous active message of this run
        adopts it; another message of this run with it becomes active; otherwise a new one
        starts (the previous active message is completed). Without an id: the active message,
        or a new anonymous one. Messages of earlier runs are never reused (S38).
        """
        active = state.active_message
        if agui_id is None:
            if active is None:
                active = self._start_message(state, chat, None, role)
            return active
        if active is not None and active.agui_id == agui_id:
            return active
        if (
            active is not None
            and active.agui_id is None
            and not any(m.agui_id == agui_id for m in state.messages)
        ):
            active.agui_id = agui_id
            if active.uuid is not None:
                active.changes["agui_id"] = agui_id
            else:
                active.dto = active.dto.model_copy(update={"agui_id": agui_id})
            return active
        for message in state.messages:
            if message.agui_id == agui_id:
                state.active_message = message
                return message
        return self._start_message(state, chat, agui_id, role)

    def _start_message(
        self, state: StorageState, chat: Chat, agui_id: str | None, role: str | None
    ) -> TrackedMessage:
        previous = state.active_message
        if previous is not None:
            self._close(state, previous, None)
        dto = self.build_message_create(state, chat, agui_id, role)
        message = TrackedMessage(dto=dto, agui_id=agui_id, role=dto.role)
        state.messages.append(message)
        state.active_message = message
        state.active_reasoning = None
        return message

    def _message_for_reasoning(self, state: StorageState, chat: Chat) -> TrackedMessage:
        # Reasoning comes before the answer in live order: once the active message has text or
        # tool calls (or ended), a new reasoning block belongs to the next message.
        active = state.active_message
        if active is None or not active.is_active or active.text.value or active.tool_calls:
            return self._start_message(state, chat, None, None)
        return active

    def ensure_tool_call(
        self, state: StorageState, chat: Chat, tool_call_id: str, name: str | None
    ) -> TrackedToolCall:
        """Return this run's tool call with ``tool_call_id``, starting it on the active message."""
        call = state.tool_calls.get(tool_call_id)
        if call is None:
            parent = self.ensure_message(state, chat, None)
            dto = self.build_tool_call_create(state, tool_call_id, name)
            call = TrackedToolCall(dto=dto, tool_call_id=tool_call_id, parent=parent)
            parent.tool_calls.append(call)
            state.tool_calls[tool_call_id] = call
        elif name and call.dto.name == "UNKNOWN":
            if call.uuid is None:
                call.dto = call.dto.model_copy(update={"name": name})
            else:
                call.changes["name"] = name
        state.active_tool_call = call
        return call

    def ensure_reasoning(
        self, state: StorageState, chat: Chat, agui_id: str | None, *, new: bool = False
    ) -> TrackedReasoning:
        """Return the active reasoning step (or the one with ``agui_id``), starting one."""
        active = state.active_reasoning
        if not new and active is not None and agui_id in (None, active.agui_id):
            return active
        if not new and agui_id is not None:
            for message in state.messages:
                for step in message.reasonings:
                    if step.agui_id == agui_id:
                        state.active_reasoning = step
                        return step
        if active is not None:
            self._close(state, active, None)
        parent = self._message_for_reasoning(state, chat)
        if agui_id is not None:
            state.active_reasoning_agui_id = agui_id
        dto = self.build_reasoning_create(state, state.active_reasoning_title)
        step = TrackedReasoning(dto=dto, agui_id=dto.agui_id, parent=parent)
        parent.reasonings.append(step)
        state.active_reasoning = step
        return step

    # Extension point 2: category handlers ------------------------------------------------------

    async def handle_run_lifecycle(self, state: StorageState, chat: Chat, event: BaseEvent) -> None:
        """``RUN_FINISHED`` / ``RUN_ERROR`` finalize this run's records and flush.

        ``RUN_STARTED`` changes nothing (buffers are kept). The outcome, pending tool calls,
        interrupts and usage are stored on the run's last message.
        """
        if isinstance(event, RunFinishedEvent):
            outcome = event.outcome
            kind = getattr(outcome, "type", "success")
            stored: dict[str, Any] = {"type": kind}
            pending = list(getattr(outcome, "pending_tool_call_ids", None) or [])
            interrupts = list(getattr(outcome, "interrupts", None) or [])
            if interrupts:
                stored["interrupts"] = [
                    i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in interrupts
                ]
                pending += [i.tool_call_id for i in interrupts if i.tool_call_id]
            if pending:
                stored["pending_tool_call_ids"] = pending
            if event.usage:
                stored["usage"] = [
                    u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in event.usage
                ]
            status = INTERRUPTED if kind == "cancelled" else COMPLETE
            self._terminate(state, status, None, event)
            self._set_outcome(state, stored, force=kind != "success" or bool(pending))
            state.terminal_seen = True
            state.flush_now = True
        elif isinstance(event, RunErrorEvent):
            text = f"[{event.code}] {event.message}" if event.code else event.message
            stored = {"type": "error", "message": event.message}
            if event.code:
                stored["code"] = event.code
            if event.usage:
                stored["usage"] = [
                    u.model_dump(mode="json", by_alias=True, exclude_none=True) for u in event.usage
                ]
            self._terminate(state, ERRORED, text, event)
            self._set_outcome(state, stored)
            state.terminal_seen = True
            state.flush_now = True

    def _terminate(
        self, state: StorageState, status: str, error: str | None, event: BaseEvent | None
    ) -> None:
        """Give every still-active record of this run a terminal status."""
        for record in state.records():
            if record.is_active:
                record.status = status
                if error is not None:
                    record.error = error
                if isinstance(record, TrackedMessage) and event is not None:
                    record.changes.update(self.message_update_fields(state, event))
        state.active_reasoning = None

    def _set_outcome(
        self, state: StorageState, outcome: dict[str, Any], *, force: bool = True
    ) -> None:
        outcome = {"run_id": state.run_id, **outcome}
        state.outcome = outcome
        carriers = [m for m in state.messages if m.role != "activity"]
        if carriers:
            carriers[-1].changes["run_outcome"] = outcome
        elif force:
            message = TrackedMessage(
                dto=self.build_message_create(state, state.chat, None, None), status=COMPLETE
            )
            message.changes["run_outcome"] = outcome
            state.messages.append(message)

    async def handle_step(self, state: StorageState, chat: Chat, event: BaseEvent) -> None:
        """Track the active step name across ``STEP_STARTED`` / ``STEP_FINISHED``."""
        if isinstance(event, StepStartedEvent):
            state.active_step = event.step_name
        elif isinstance(event, StepFinishedEvent):
            state.active_step = None

    async def handle_text_message(self, state: StorageState, chat: Chat, event: BaseEvent) -> None:
        """Fold text-message events onto a message of this run (chunks buffered like content)."""
        if isinstance(event, TextMessageStartEvent):
            self.ensure_message(state, chat, event.message_id, event.role)
        elif isinstance(event, TextMessageContentEvent):
            message = self.ensure_message(state, chat, event.message_id)
            self._append(state, message, event.delta)
        elif isinstance(event, TextMessageChunkEvent):
            message = self.ensure_message(state, chat, event.message_id, event.role)
            self._append(state, message, event.delta)
        elif isinstance(event, TextMessageEndEvent):
            message = self.ensure_message(state, chat, event.message_id)
            self._close(state, message, event)

    async def handle_tool_call(self, state: StorageState, chat: Chat, event: BaseEvent) -> None:
        """Fold tool-call events onto per-call records (each with its own buffer and status)."""
        if isinstance(event, ToolCallStartEvent):
            if event.parent_message_id:
                self.ensure_message(state, chat, event.parent_message_id)
            self.ensure_tool_call(state, chat, event.tool_call_id, event.tool_call_name)
        elif isinstance(event, ToolCallArgsEvent):
            call = self.ensure_tool_call(state, chat, event.tool_call_id, None)
            self._append(state, call, event.delta)
        elif isinstance(event, ToolCallChunkEvent):
            if event.parent_message_id:
                self.ensure_message(state, chat, event.parent_message_id)
            tool_call_id = event.tool_call_id or (
                state.active_tool_call.tool_call_id if state.active_tool_call else ""
            )
            call = self.ensure_tool_call(state, chat, tool_call_id, event.tool_call_name)
            self._append(state, call, event.delta)
        elif isinstance(event, ToolCallEndEvent):
            call = self.ensure_tool_call(state, chat, event.tool_call_id, None)
            self._close(state, call, event)
        elif isinstance(event, ToolCallResultEvent):
            self._record_result(state, chat, event)

    def _record_result(self, state: StorageState, chat: Chat, event: ToolCallResultEvent) -> None:
        call = state.tool_calls.get(event.tool_call_id)
        if call is None:
            stored = state.stored_call(event.tool_call_id)
            if stored is not None:
                message, record = stored
                call = next(
                    (c for c in state.foreign if c.uuid == record.uuid),
                    None,
                )
                if call is None:
                    call = TrackedToolCall(
                        dto=MessageToolCallCreate(message_uuid=message.message_uuid),
                        tool_call_id=event.tool_call_id,
                        uuid=record.uuid,
                        status=record.status,
                        stored_status=record.status,
                        foreign=True,
                        message_uuid=message.message_uuid,
                    )
                    call.text.value = record.arguments
                    call.text.stored_len = len(record.arguments)
                    state.foreign.append(call)
            else:
                call = self.ensure_tool_call(state, chat, event.tool_call_id, None)
        call.changes.update(
            {
                "content": flatten_content(event.content),
                "content_parts": dump_parts(event.content),
                "result_message_id": event.message_id,
                "has_result": True,
            }
        )

    async def handle_reasoning(self, state: StorageState, chat: Chat, event: BaseEvent) -> None:
        """Fold reasoning events onto reasoning steps of this run.

        ``Reasoning*`` events are primary; the deprecated ``Thinking*`` events (ag-ui 0.1.x
        only) map one-to-one and are recognised by their ``type``.
        """
        kind = _type_name(event)
        if isinstance(event, ReasoningStartEvent):
            state.active_reasoning_agui_id = event.message_id
            state.active_reasoning_title = None
        elif isinstance(event, ReasoningMessageStartEvent):
            state.active_reasoning_agui_id = event.message_id
            self.ensure_reasoning(state, chat, event.message_id, new=True)
        elif isinstance(event, ReasoningMessageContentEvent | ReasoningMessageChunkEvent):
            step = self.ensure_reasoning(state, chat, event.message_id)
            self._append(state, step, event.delta)
        elif isinstance(event, ReasoningMessageEndEvent):
            if state.active_reasoning is not None:
                self._close(state, state.active_reasoning, event)
                state.active_reasoning = None
        elif isinstance(event, ReasoningEndEvent):
            if state.active_reasoning is not None:
                self._close(state, state.active_reasoning, event)
            state.active_reasoning = None
            state.active_reasoning_agui_id = None
            state.active_reasoning_title = None
        elif isinstance(event, ReasoningEncryptedValueEvent):
            self._record_encrypted(state, chat, event)
        elif kind == "THINKING_START":
            state.active_reasoning_title = getattr(event, "title", None)
            state.active_reasoning_agui_id = None
        elif kind == "THINKING_TEXT_MESSAGE_START":
            self.ensure_reasoning(state, chat, None, new=True)
        elif kind == "THINKING_TEXT_MESSAGE_CONTENT":
            step = self.ensure_reasoning(state, chat, None)
            self._append(state, step, getattr(event, "delta", None))
        elif kind in ("THINKING_TEXT_MESSAGE_END", "THINKING_END"):
            if state.active_reasoning is not None:
                self._close(state, state.active_reasoning, event)
            state.active_reasoning = None
            if kind == "THINKING_END":
                state.active_reasoning_title = None

    def _record_encrypted(
        self, state: StorageState, chat: Chat, event: ReasoningEncryptedValueEvent
    ) -> None:
        entity, value = event.entity_id, event.encrypted_value
        if event.subtype == "tool-call":
            call = state.tool_calls.get(entity)
            if call is None:
                call = self.ensure_tool_call(state, chat, entity, None)
            call.changes["encrypted_value"] = value
            return
        for message in state.messages:
            for step in message.reasonings:
                if step.agui_id == entity:
                    step.changes["encrypted_value"] = value
                    return
        for message in state.messages:
            if message.agui_id == entity:
                message.changes["encrypted_value"] = value
                return
        for call in [*state.tool_calls.values(), *state.foreign]:
            result_id = call.changes.get("result_message_id")
            if result_id == entity:
                call.changes["result_encrypted_value"] = value
                return
        # An encrypted-only reasoning block (no text): a step of its own.
        step = self.ensure_reasoning(state, chat, entity, new=True)
        step.changes["encrypted_value"] = value
        if state.active_reasoning_agui_id != entity:
            self._close(state, step, event)

    async def handle_activity(self, state: StorageState, chat: Chat, event: BaseEvent) -> None:
        """Store ``ACTIVITY_SNAPSHOT`` / ``ACTIVITY_DELTA`` as an ``activity`` message."""
        if not isinstance(event, ActivitySnapshotEvent | ActivityDeltaEvent):
            return
        message = next(
            (m for m in state.messages if m.role == "activity" and m.agui_id == event.message_id),
            None,
        )
        if message is None:
            dto = self.build_message_create(state, chat, event.message_id, "activity")
            message = TrackedMessage(
                dto=dto, agui_id=event.message_id, role="activity", status=COMPLETE
            )
            state.messages.append(message)
        if isinstance(event, ActivitySnapshotEvent):
            if event.replace is False and message.activity_content:
                return
            content = dict(event.content)
        else:
            content = apply_json_patch(message.activity_content or {}, list(event.patch))
        message.activity_content = content
        message.changes["activity_content"] = content
        message.changes["activity_type"] = event.activity_type

    # Flushing ------------------------------------------------------------------------------------

    async def flush_message_buffer(self, state: StorageState) -> None:
        """Persist buffered changes of this run (messages first); kept for API parity."""
        await self._flush(state)

    async def flush_tool_call_buffer(self, state: StorageState) -> None:
        """Persist buffered changes of this run (tool-call arguments included)."""
        await self._flush(state)

    async def flush_reasoning_buffer(self, state: StorageState) -> None:
        """Persist buffered changes of this run (reasoning content included)."""
        await self._flush(state)

    async def _flush(self, state: StorageState) -> bool:
        """Write every pending change in one transaction; confirm it locally only on success."""
        state.flush_now = False
        if not state.dirty():
            state.flush_due = None
            return True
        commits: list[Callable[[], None]] = []
        try:
            if state.needs_recovery:
                await self._recover(state)
            async with self.message_repo.transaction():
                for message in state.messages:
                    await self._write_message(state, message, commits)
                for call in state.foreign:
                    await self._write_tool_call(call, call.message_uuid, commits)
        except Exception:
            logger.warning(
                "Persisting run %r failed; the changes are kept and retried.",
                state.run_id,
                exc_info=True,
            )
            state.needs_recovery = True
            state.flush_due = asyncio.get_running_loop().time() + self.flush_interval
            return False
        for commit in commits:
            commit()
        state.needs_recovery = False
        state.flush_due = None
        return True

    @staticmethod
    def _confirmer(
        record: TrackedRecord, uuid: UUID, sent_len: int, status: str, sent: dict[str, Any]
    ) -> Callable[[], None]:
        return lambda: record.confirm(uuid, sent_len, status, sent)

    async def _write_message(
        self,
        state: StorageState,
        message: TrackedMessage,
        commits: list[Callable[[], None]],
    ) -> None:
        uuid = message.uuid
        if message.lost:
            return
        sent = dict(message.changes)
        sent_len = len(message.text.value)
        if uuid is None:
            update: dict[str, Any] = {
                "content": message.text.value,
                **message.status_fields(),
                **sent,
            }
            if message.dto.chat_uuid is None:
                update["chat_uuid"] = state.chat.chat_uuid
            created = await self.message_repo.create_message(message.dto.model_copy(update=update))
            uuid = created.message_uuid
            commits.append(self._confirmer(message, uuid, sent_len, message.status, sent))
        elif message.dirty:
            fields = {**message.text.write_fields("content"), **sent}
            if message.status != message.stored_status:
                fields.update(message.status_fields())
            result = await self.message_repo.update_message(uuid, MessageUpdate(**fields))
            if result is None:
                self._lost(message)
                return
            commits.append(self._confirmer(message, uuid, sent_len, message.status, sent))
        for step in message.reasonings:
            await self._write_reasoning(step, uuid, commits)
        for call in message.tool_calls:
            await self._write_tool_call(call, uuid, commits)

    async def _write_tool_call(
        self, call: TrackedToolCall, parent: UUID | None, commits: list[Callable[[], None]]
    ) -> None:
        if call.lost or not call.dirty or parent is None:
            return
        sent = dict(call.changes)
        sent_len = len(call.text.value)
        if call.uuid is None:
            update = {
                "message_uuid": parent,
                "arguments": call.text.value,
                **call.status_fields(),
                **sent,
            }
            created = await self.message_repo.create_message_tool_call(
                call.dto.model_copy(update=update)
            )
            commits.append(self._confirmer(call, created.uuid, sent_len, call.status, sent))
            return
        fields = {**call.text.write_fields("arguments"), **sent}
        if call.status != call.stored_status:
            fields.update(call.status_fields())
        result = await self.message_repo.update_message_tool_call(
            call.uuid, MessageToolCallUpdate(**fields)
        )
        if result is None:
            self._lost(call)
            return
        commits.append(self._confirmer(call, call.uuid, sent_len, call.status, sent))

    async def _write_reasoning(
        self, step: TrackedReasoning, parent: UUID, commits: list[Callable[[], None]]
    ) -> None:
        if step.lost or not step.dirty:
            return
        sent = dict(step.changes)
        sent_len = len(step.text.value)
        if step.uuid is None:
            update = {
                "message_uuid": parent,
                "content": step.text.value,
                **step.status_fields(),
                **sent,
            }
            if step.agui_id is not None:
                update["agui_id"] = step.agui_id
            created = await self.message_repo.create_message_reasoning(
                step.dto.model_copy(update=update)
            )
            commits.append(self._confirmer(step, created.uuid, sent_len, step.status, sent))
            return
        fields = {**step.text.write_fields("content"), **sent}
        if step.status != step.stored_status:
            fields.update(step.status_fields())
        result = await self.message_repo.update_message_reasoning(
            step.uuid, MessageReasoningUpdate(**fields)
        )
        if result is None:
            self._lost(step)
            return
        commits.append(self._confirmer(step, step.uuid, sent_len, step.status, sent))

    @staticmethod
    def _lost(record: TrackedRecord) -> None:
        logger.warning(
            "A record of this run (%s) is no longer in the store; its later changes are dropped.",
            record.uuid,
        )
        record.lost = True

    async def _recover(self, state: StorageState) -> None:
        """After a failed flush, re-read what the store really holds for this run's records."""
        chat_uuid = state.chat.chat_uuid
        stored = [
            m
            for m in await self.message_repo.get_chat_messages(chat_uuid)
            if m.run_id == state.run_id
        ]
        claimed: set[UUID] = set()
        for message in state.messages:
            match = next((m for m in stored if m.message_uuid == message.uuid), None)
            if match is None:
                match = next(
                    (
                        m
                        for m in stored
                        if m.message_uuid not in claimed
                        and m.message_uuid not in {t.uuid for t in state.messages}
                        and m.agui_id == message.agui_id
                        and m.role == message.role
                    ),
                    None,
                )
            if match is None:
                _reset(message)
                for child in (*message.tool_calls, *message.reasonings):
                    _reset(child)
                continue
            claimed.add(match.message_uuid)
            _sync(message, match.content, match.status, match.message_uuid)
            for call in message.tool_calls:
                found = next(
                    (
                        c
                        for c in match.tool_calls
                        if c.uuid == call.uuid or c.tool_call_id == call.tool_call_id
                    ),
                    None,
                )
                if found is None:
                    _reset(call)
                else:
                    _sync(call, found.arguments, found.status, found.uuid)
            taken: set[UUID] = set()
            for step in message.reasonings:
                candidates = [r for r in match.reasonings if r.uuid not in taken]
                found_step = next((r for r in candidates if r.uuid == step.uuid), None) or next(
                    (r for r in candidates if step.agui_id and r.agui_id == step.agui_id), None
                )
                if found_step is None and step.agui_id is None:
                    found_step = next((r for r in candidates if r.agui_id is None), None)
                if found_step is None:
                    _reset(step)
                else:
                    taken.add(found_step.uuid)
                    _sync(step, found_step.content, found_step.status, found_step.uuid)
        state.needs_recovery = False


def _reset(record: TrackedRecord) -> None:
    record.uuid = None
    record.stored_status = None
    record.text.stored_len = 0


def _sync(record: TrackedRecord, stored_text: str, status: str, uuid: UUID) -> None:
    record.uuid = uuid
    record.stored_status = status
    if record.text.value.startswith(stored_text):
        record.text.stored_len = len(stored_text)
    else:
        record.text.stored_len = None
