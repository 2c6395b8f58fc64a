"""``AGUIAgent`` and ``AGUIStorageAgent``: persist an AG-UI event stream as chat history.

``AGUIStorageAgent.run`` checks the inbound messages against the stored chat (nothing is
written if any is refused), stores the accepted ones, replays the stored history to the inner
agent, and forwards the inner agent's events verbatim and in real time, folding each into the
run's in-memory records as it passes; flushes run in tasks of their own, so the stream never
waits for the store. Writes are few: records are created at their first flush with their
content, completion is folded into the same write, text is flushed by size and by time, the
events that arrive while a flush is in flight are folded into the next one, and every flush is
one ``message_repo.transaction()``.

On a new thread only the lookup comes before the inner agent starts: the chat and the user
messages are written by a task of the run while the agent starts (the first event is not
delayed by them), the run's events wait to be folded until they are, and the terminal event
is not forwarded before they are. If they fail, the run raises and nothing of it is stored.

How a run ends decides the terminal status of this run's records (never another run's):
``RUN_FINISHED`` → ``complete`` (outcome ``cancelled`` → ``interrupted``); ``RUN_ERROR`` →
``errored`` with ``"[code] message"``; cancellation → ``interrupted`` (finalization shielded,
bounded by ``finalize_timeout``, then ``CancelledError`` re-raised); a raw exception →
``errored`` with a generic sentence, then re-raised for the caller to log (the manager logs
it once, with its traceback); a stream that ends with
no terminal event → ``errored`` and a ``RUN_ERROR`` is emitted; a persistence backlog overflow →
``errored`` with a sentence saying events were dropped.

A thread deleted while the run writes to it (a write raises ``ChatNotFoundError``, or finds
its records gone with their chat) ends the run's writes, not the run: the stream goes on to
its terminal event, nothing is retried, and one INFO line says so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing, suppress
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

from django_pydantic_agent.chat_history._flushing import Flusher, is_transient, thread_gone
from django_pydantic_agent.chat_history._inbound import (
    InboundPlan,
    derive_chat_name,
    dump_parts,
    flatten_content,
    plan_inbound,
)
from django_pydantic_agent.chat_history.errors import (
    ChatNotFoundError,
    ErrorCodes,
    InvalidInputError,
    RunFencedError,
)
from django_pydantic_agent.chat_history.fold import EventFold
from django_pydantic_agent.chat_history.keys import chat_deduplication_key
from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.chat_history.records import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    Role,
)
from django_pydantic_agent.chat_history.repositories import (
    ChatRepositoryLike,
    MessageRepositoryLike,
    StartsBranches,
)
from django_pydantic_agent.chat_history.summaries import (
    ReplaysSummaries,
    StoredSummary,
    SummaryStore,
    WrittenSummary,
    summary_through,
)
from django_pydantic_agent.chat_history.tracking import StorageState
from django_pydantic_agent.chat_history.translate import BOOKKEEPING_KEY, translate_messages
from django_pydantic_agent.chat_history.window import (
    HistoryWindow,
    ReadHistory,
    checked_history,
    read_window,
)

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
"""Stored on records when the inner agent raised; the raw text is only logged."""

DROPPED_TEXT: Final[str] = (
    "Events were dropped because the persistence queue was full; this record may be incomplete."
)
INCOMPLETE_STREAM_TEXT: Final[str] = (
    "The agent's stream ended without RUN_FINISHED or RUN_ERROR; the run is incomplete."
)

COMPLETE = MessageStatus.COMPLETE.value
INTERRUPTED = MessageStatus.INTERRUPTED.value
ERRORED = MessageStatus.ERRORED.value

_NIL = UUID(int=0)
_RUN_ENDS: Final = (RunFinishedEvent, RunErrorEvent)
_RETRY_PAUSES: Final = (0.05, 0.2, 0.8)
"""Seconds between the attempts of a write tried three times (the final flush goes on with the
last one while the store's failure is transient)."""
# The final flush stops retrying an outage this long before finalize_timeout abandons it.
_FINAL_FLUSH_MARGIN: Final = 1.0
_THINKING = (  # ag-ui 0.1.x only; registered when the installed ag-ui still has them
    "ThinkingStartEvent",
    "ThinkingEndEvent",
    "ThinkingTextMessageStartEvent",
    "ThinkingTextMessageContentEvent",
    "ThinkingTextMessageEndEvent",
)


_MODELLED_USER_FIELDS: Final = frozenset({"id", "role", "name", "encrypted_value", "content"})
"""The ``UserMessage`` fields a user ``Message`` record models itself."""


def _wire_extra(message: UserMessage) -> dict[str, Any] | None:
    """The posted message's other keys (``attachments``, ``metadata``...) as camelCase JSON."""
    keep = (message.model_fields_set - _MODELLED_USER_FIELDS) | set(message.model_extra or {})
    return message.model_dump(mode="json", by_alias=True, include=keep) or None


async def _written(writes: asyncio.Task[tuple[Chat, list[Message]]]) -> None:
    """Wait for a new thread's first writes: their failure raises, unless the thread was
    deleted meanwhile (the run goes on unstored; its folding logged it)."""
    with suppress(ChatNotFoundError):
        await writes


def _unsaved(message: AGUIMessage) -> AGUIMessage:
    """A new thread's message as replayed before it is stored: no ``uuid`` in its bookkeeping.

    The store assigns the uuid while the inner agent starts, so the provisional one is not
    shown (the status and run id are already what will be stored).
    """
    meta = getattr(message, "metadata", None) or {}
    data = meta.get(BOOKKEEPING_KEY)
    if not isinstance(data, dict) or "uuid" not in data:
        return message
    kept = {key: value for key, value in data.items() if key != "uuid"}
    return message.model_copy(update={"metadata": {**meta, BOOKKEEPING_KEY: kept}})


def _now_ms() -> int:
    return int(time.time() * 1000)


class AGUIAgent(ABC):
    """Minimal AG-UI agent contract: a named object exposing an event stream.

    A subclass names itself by calling ``super().__init__(name)``, or by setting ``name``
    itself (a class attribute, or in its own ``__init__``). ``AGUIAgent.__init__`` called
    without a name keeps a class attribute, and raises ``TypeError`` when there is none.
    """

    name: str

    def __init__(self, name: str | None = None) -> None:
        if name is not None:
            self.name = name
        elif not isinstance(getattr(type(self), "name", None), str):
            raise TypeError(
                f"{type(self).__name__} has no name; pass one to super().__init__(name) "
                "or set name as a class attribute."
            )

    @abstractmethod
    def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        """Yield the agent's AG-UI ``BaseEvent`` stream for one run."""


class AGUIStorageAgent(EventFold, AGUIAgent):
    """Wrap an inner AG-UI agent, persisting its event stream as chat history.

    Args:
        name: Written as ``name`` on every agent-created message.
        user_id: The owning user's UUID (chats are scoped by it).
        chat_repo: Any ``ChatRepositoryLike``.
        message_repo: Any ``MessageRepositoryLike``.
        inner: The wrapped agent; another ``AGUIStorageAgent`` is refused (``ValueError``).
        minimal_chunk_to_persist: Flush a record once this many characters are buffered.
        flush_interval: Flush buffered changes at most this many seconds after they arrive,
            even while the inner agent is silent.
        max_queue_size: Events waiting for a flush in flight beyond this are dropped from
            persistence (still forwarded) and the run's records end ``errored``.
        finalize_timeout: Upper bound, in seconds, on the final drain and flush of a run.
        translate: Stored messages → AG-UI history (default ``translate_messages``).
        history: What the inner agent is sent of the stored thread (default
            ``HistoryWindow()``: the newest messages that fit its token budget, read with one
            bounded query where the repository can; ``HistoryWindow.whole()`` sends all).
        store_before_end: Whether the terminal event waits until what it ends is flushed
            (one flush; a failed one is retried after it) before it is forwarded. Off by
            default: a reader's stream ends at once and storing completes behind it. A server
            that resumes runs on another worker turns it on, so a reader that saw the end never
            meets a run whose end is not stored.
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
        history: HistoryWindow | None = None,
        store_before_end: bool = False,
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
        self.history = history if history is not None else HistoryWindow()
        self.store_before_end = store_before_end
        self._handlers = self.event_handlers()
        self._resolved: dict[type[BaseEvent], Callable[..., Any]] = {}
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
        return self._handler_for_type(type(event))

    def _handler_for_type(self, kind: type[BaseEvent]) -> Callable[..., Any]:
        handler = self._resolved.get(kind)
        if handler is None:
            handler = self.handle_unknown_event
            for klass in kind.__mro__:
                name = self._handlers.get(klass)
                if name is not None:
                    handler = getattr(self, name)
                    break
            self._resolved[kind] = handler
        return handler

    def _folds_text_by_default(self) -> bool:
        """Whether a text delta is folded by the package's own handler and helpers (so
        `_Folding.add_nowait` may fold it without them)."""
        kind = type(self)
        return (
            getattr(self._handler_for_type(TextMessageContentEvent), "__func__", None)
            is EventFold.handle_text_message
            and kind.ensure_message is EventFold.ensure_message
            and kind._append is EventFold._append
        )

    async def handle_unknown_event(self, state: StorageState, chat: Chat, event: BaseEvent) -> None:
        """Handle an event with no registered handler; the default ignores it."""
        logger.debug("No storage handler for %s; it is forwarded but not stored.", event.type)

    async def load_history(self, chat: Chat) -> ReadHistory:
        """Read the stored thread a run needs: what the inner agent is sent (``window``, cut by
        ``history``) and what the inbound list is checked against (``read``)."""
        return await read_window(self.message_repo, chat.chat_uuid, self.history)

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

    def build_user_message_create(
        self, chat: Chat, message: UserMessage, run_id: str
    ) -> MessageCreate:
        """Build the DTO that stores an accepted inbound user message of run ``run_id``."""
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
            run_id=run_id,
            wire_extra=_wire_extra(message),
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
        ``INVALID_INPUT``) and writes nothing. Repository failures before the stream raise;
        on a new thread, a failure to write the chat or its user messages raises from the
        stream, before its terminal event.
        """
        try:
            chat, history, writes, gone, summary = await self._prepare(input)
        except InvalidInputError as exc:
            yield RunStartedEvent(
                thread_id=input.thread_id, run_id=input.run_id, timestamp=_now_ms()
            )
            yield RunErrorEvent(
                message=str(exc), code=ErrorCodes.INVALID_INPUT.value, timestamp=_now_ms()
            )
            return
        replay = self.translate(history)
        inner = self.inner
        summarizes = implements(inner, ReplaysSummaries)
        if implements(inner, ReplaysSummaries):
            inner.replayed_summary = summary
        if writes is not None:
            replay = [_unsaved(message) for message in replay]
        inner_input = input.model_copy(update={"messages": replay})
        state = StorageState(
            run_id=input.run_id,
            thread_id=input.thread_id,
            chat=chat,
            history=history,
            resumed=bool(input.resume),
            event_time_of=self._event_time,
        )
        if gone:
            thread_gone(state)
        folding = _Folding(self, state, writes)
        yield_at = self.max_queue_size // 4
        cause: str | None = None
        started = False
        try:
            async with aclosing(self.inner.run(inner_input)) as stream:
                async for event in stream:
                    if not event.timestamp:
                        event.timestamp = _now_ms()
                    if type(event) is TextMessageContentEvent:
                        pass  # most of a run's events: neither its start nor its end
                    elif isinstance(event, RunStartedEvent):
                        started = True
                    elif isinstance(event, _RUN_ENDS):
                        state.terminal_seen = True
                        if writes is not None:
                            await _written(writes)  # no terminal event before it is stored
                        elif summarizes and isinstance(event, RunFinishedEvent):
                            await self._store_summary(chat, history, summary, input.run_id)
                    if writes is not None and writes.done():
                        await _written(writes)  # a failed write ends the run (raised here)
                        writes = None
                    if not folding.add_nowait(event):
                        await folding.add(event)
                    if self.store_before_end and isinstance(event, _RUN_ENDS):
                        # What the terminal event ends is stored before any reader sees it
                        # (a failed flush is retried after it; a fenced one raises below).
                        await folding.flush_now()
                    if state.fenced is not None:
                        raise state.fenced
                    # Events wait while a flush is in flight; an inner agent that never awaits
                    # would keep that flush from ending and overflow the backlog: past a
                    # quarter of it, give the flush a few loop turns (a store that is slow
                    # costs only these turns, never a wait).
                    if len(folding.pending) > yield_at:
                        for _ in range(4):
                            await asyncio.sleep(0)
                            if len(folding.pending) <= yield_at:
                                break
                    yield event
            if writes is not None:
                await _written(writes)
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
                await folding.add(closing)
                yield closing
        except asyncio.CancelledError:
            cause = "cancelled"
            raise
        except GeneratorExit:
            cause = "abandoned"
            raise
        except Exception:
            # Not logged here: the caller logs what it catches (StreamPersistenceManager does,
            # with the traceback), so one crash is one log record.
            cause = "crashed"
            raise
        finally:
            await self._finish_shielded(folding, state, cause)

    async def _prepare(
        self, input: RunAgentInput
    ) -> tuple[
        Chat,
        list[Message],
        asyncio.Task[tuple[Chat, list[Message]]] | None,
        bool,
        StoredSummary | None,
    ]:
        """Validate the inbound list; return the chat, the history, the pending writes,
        whether the thread was deleted meanwhile and the stored summary sent ahead of the
        history.

        On a thread the store already has, what the inbound list adds is written before this
        returns (if the thread is deleted before that write, the run goes on unstored, with the
        history it read and the inbound messages). On a new thread only the lookup comes
        before the stream: the chat and its user messages are written by the returned task
        while the inner agent starts, from a provisional chat and history built here (``run``
        and its folding wait for it).
        """
        chat = await self.chat_repo.get_chat_by_thread_id(self.user_id, input.thread_id)
        if chat is None:
            return (*self._prepare_new(input), False, None)
        loaded = await self.load_history(chat)
        summary = loaded.summary
        branches = implements(self.message_repo, StartsBranches)
        checked, posted = await checked_history(self.message_repo, chat.chat_uuid, input, loaded)
        plan = plan_inbound(posted, checked, branches=branches)
        history = loaded.window
        if plan.branch_at is not None:
            # An edit or a regenerate (rare) is cut against the whole active branch: the cut
            # may lie before the window, and the records it keeps are counted from the start.
            history = checked
            summary = None  # the cut may fall inside what it stands for: the window alone
            if not loaded.whole:
                history = list(await self.message_repo.get_chat_messages(chat.chat_uuid))
                plan = plan_inbound(input, history, branches=branches)
        try:
            chat, history = await self._write_inbound(input, chat, history, plan)
        except ChatNotFoundError:
            unsaved = [
                Message(**self.build_user_message_create(chat, m, input.run_id).model_dump())
                for m in plan.users
            ]
            return chat, self._window(history[: plan.kept] + unsaved, plan), None, True, None
        return chat, self._window(history, plan), None, False, summary

    async def _store_summary(
        self, chat: Chat, history: list[Message], replayed: StoredSummary | None, run_id: str
    ) -> None:
        """Store the summary a compaction capability wrote during the run (if it wrote one and
        the repository keeps summaries), standing for the replayed messages it replaced. A
        failure is logged: the run and its messages are not affected."""
        written = getattr(self.inner, "written_summary", None)
        repo = self.message_repo
        if not isinstance(written, WrittenSummary) or not implements(repo, SummaryStore):
            return
        through = summary_through(history, written, replayed)
        if through is None:
            return
        try:
            await repo.add_summary(
                chat.chat_uuid,
                text=written.text,
                through_uuid=through,
                created_at=written.created_at,
                run_id=run_id,
            )
        except Exception:
            logger.warning("Could not store the summary of run %r.", run_id, exc_info=True)

    def _window(self, history: list[Message], plan: InboundPlan) -> list[Message]:
        """What the model is sent of ``history``: already the window, but after a branch cut
        (which read the whole branch)."""
        return history if plan.branch_at is None else self.history.select(history)

    def _prepare_new(
        self, input: RunAgentInput
    ) -> tuple[Chat, list[Message], asyncio.Task[tuple[Chat, list[Message]]]]:
        plan = plan_inbound(input, [])  # refuses before anything is written
        first = input.messages[0].content if input.messages else None
        create = ChatCreate(
            name=derive_chat_name(flatten_content(first)),
            thread_id=input.thread_id,
            user_uuid=self.user_id,
        )
        provisional = Chat(
            thread_id=input.thread_id,
            dedup_key=chat_deduplication_key(self.user_id, input.thread_id),
            name=create.name,
            user_uuid=self.user_id,
        )
        history = [
            Message(**self.build_user_message_create(provisional, m, input.run_id).model_dump())
            for m in plan.users
        ]

        async def write_once(retry: bool) -> tuple[Chat, list[Message]]:
            chat = await self.chat_repo.create_chat(create)  # idempotent
            # A retry first looks for the user messages a failed attempt may have stored.
            return await self._write_inbound(input, chat, [], plan, existed=retry)

        async def write() -> tuple[Chat, list[Message]]:
            # Three attempts when the store's failure is transient, as the final flush makes.
            for attempt, pause in enumerate(_RETRY_PAUSES[:-1]):
                try:
                    return await write_once(retry=attempt > 0)
                except Exception as exc:
                    if not is_transient(exc):
                        raise
                    await asyncio.sleep(pause)
            return await write_once(retry=True)

        return provisional, history, asyncio.create_task(write())

    async def _write_inbound(
        self,
        input: RunAgentInput,
        chat: Chat,
        history: list[Message],
        plan: InboundPlan,
        *,
        existed: bool = True,
    ) -> tuple[Chat, list[Message]]:
        """Write what ``plan`` adds to ``chat``; return the chat and its history after."""
        if not (plan.users or plan.answers or plan.resume_carrier or plan.branch_at):
            return chat, history
        async with self.message_repo.transaction():
            if plan.branch_at is not None:
                assert implements(self.message_repo, StartsBranches)
                if plan.renamed is not None:  # renamed first: the cut may take it out of reach
                    stored, new_id = plan.renamed
                    await self.message_repo.update_message(
                        stored.message_uuid, MessageUpdate(agui_id=new_id)
                    )
                await self.message_repo.start_branch(chat.chat_uuid, plan.branch_at.message_uuid)
                history = history[: plan.kept]
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
            created: list[Message] = []
            edit = plan.users[-1] if plan.renamed is not None else None
            for inbound in plan.users:
                if existed and inbound is not edit:
                    # Get-or-create: a double-submitted request validated against the same
                    # history must not store the message twice (atomic on stores whose
                    # transaction() serializes writers; a cheap cached read elsewhere).
                    twin = await self.message_repo.get_message_by_agui_id(
                        chat.chat_uuid, inbound.id
                    )
                    if twin is not None and twin.role == Role.USER.value:
                        created.append(twin)
                        continue
                created.append(
                    await self.message_repo.create_message(
                        self.build_user_message_create(chat, inbound, input.run_id)
                    )
                )
        known = {m.message_uuid for m in history}
        fresh = [m for m in created if m.message_uuid not in known]
        history = [replaced.get(m.message_uuid, m) for m in history] + fresh
        return chat, history

    async def _finish_shielded(
        self, folding: _Folding, state: StorageState, cause: str | None
    ) -> None:
        """Run the final drain, finalization and flush; a second cancel cannot abort it."""
        finish = asyncio.create_task(self._finish(folding, state, cause))
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
        failure = None if finish.cancelled() else finish.exception()
        if failure is not None and not isinstance(failure, RunFencedError):
            logger.error("Finalizing run %r failed.", state.run_id, exc_info=failure)
        if cancelled_again and cause != "cancelled":
            raise asyncio.CancelledError

    async def _finish(self, folding: _Folding, state: StorageState, cause: str | None) -> None:
        await folding.settle()
        if state.unstored or state.gone or state.fenced is not None:
            return
        if cause in ("cancelled", "abandoned"):
            self._terminate(state, INTERRUPTED, None, None)
            if state.outcome is None:
                self._set_outcome(state, {"type": "cancelled"}, force=state.resumed)
        elif cause == "crashed":
            self._terminate(state, ERRORED, CRASH_TEXT, None)
            if state.outcome is None:
                outcome = {"type": "error", "message": CRASH_TEXT}
                self._set_outcome(state, outcome, force=state.resumed)
        elif state.dropped:
            self._terminate(state, ERRORED, DROPPED_TEXT, None)
        # Three attempts; while the store is out (a transient failure: the database or the
        # service restarting), more, until shortly before finalize_timeout.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.finalize_timeout - _FINAL_FLUSH_MARGIN
        attempt = 0
        while True:
            flusher = self._flusher()
            if await flusher.flush(state):
                return
            attempt += 1
            if attempt >= len(_RETRY_PAUSES) and (
                not flusher.transient_failure or loop.time() >= deadline
            ):
                break
            await asyncio.sleep(_RETRY_PAUSES[min(attempt, len(_RETRY_PAUSES)) - 1])
        logger.error(
            "The final flush of run %r failed %d times; some of its changes are not stored.",
            state.run_id,
            attempt,
        )

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

    # Flushing ------------------------------------------------------------------------------------

    async def flush_message_buffer(self, state: StorageState) -> None:
        """Persist every buffered change of this run now (one transaction).

        The three ``flush_*`` methods share one flush, so message text, tool-call arguments
        and reasoning content keep their order and their completion writes.
        """
        await self._flush(state)

    async def flush_tool_call_buffer(self, state: StorageState) -> None:
        """Persist every buffered change of this run now (see ``flush_message_buffer``)."""
        await self._flush(state)

    async def flush_reasoning_buffer(self, state: StorageState) -> None:
        """Persist every buffered change of this run now (see ``flush_message_buffer``)."""
        await self._flush(state)

    def _flusher(self) -> Flusher:
        return Flusher(
            self.message_repo, retry_after=self.flush_interval, chat_gone=self._chat_gone
        )

    async def _flush(self, state: StorageState) -> bool:
        return await self._flusher().flush(state)

    async def _chat_gone(self, state: StorageState) -> bool:
        """Whether the run's chat is no longer in the store (asked only after a failed or
        missing write)."""
        chat = await self.chat_repo.get_chat_by_thread_id(self.user_id, state.thread_id)
        return chat is None or chat.chat_uuid != state.chat.chat_uuid


class _Folding:
    """A run's events, folded into its records as they pass; its flushes, in tasks of their own.

    The run's task folds each event as it forwards it (the handlers only change the in-memory
    records; an override that awaits holds the stream back meanwhile) and starts a flush when
    one is due: by size (``flush_now``), or by time, from the event that finds the interval
    passed or from one timer per interval while the stream is silent. While a flush, or a new
    thread's first writes, is in flight, events wait in ``pending`` and that task folds them
    once it is done, so a flush never reads a record that is changing. Beyond
    ``max_queue_size`` waiting events, the rest of the run is forwarded but not stored.
    """

    def __init__(
        self,
        agent: AGUIStorageAgent,
        state: StorageState,
        writes: asyncio.Task[tuple[Chat, list[Message]]] | None,
    ) -> None:
        self.agent = agent
        self.state = state
        self.pending: deque[BaseEvent] = deque()
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._busy: asyncio.Task[None] | None = None
        self._settled = False
        self._folds_text = agent._folds_text_by_default()
        if writes is not None:
            self._busy = asyncio.create_task(self._work(writes))

    async def add(self, event: BaseEvent) -> None:
        """Fold ``event`` now, or keep it for the task in flight."""
        if not self.add_nowait(event):
            await self._fold(event)
            self._schedule()

    def add_nowait(self, event: BaseEvent) -> bool:
        """`add`, where it needs no handler coroutine; False when ``event`` must be folded.

        That is: an event kept for the task in flight, and a text delta of the message being
        written while ``handle_text_message`` and the helpers it calls are the package's own,
        which fold it exactly as the handler would. A text delta is most of a run's events.
        """
        state = self.state
        if state.unstored or state.gone or state.fenced is not None:
            return True  # the new thread's writes failed or were fenced (run() raises them)
        if self._busy is not None:
            self._keep(event)
            return True
        if self._fold_nowait(event):
            due = state.flush_due
            if state.flush_now or due is None or self._loop.time() >= due:
                self._schedule()
            return True
        return False

    def _fold_nowait(self, event: BaseEvent) -> bool:
        """Fold a text delta of the active message as the default handler would; whether it
        was one (anything else goes through `_fold`)."""
        if type(event) is TextMessageContentEvent and self._folds_text:
            state = self.state
            active = state.active_message
            if active is not None and active.agui_id == event.message_id:
                state.timed_event = event
                # EventFold._append, inlined (``_folds_text`` says it is not overridden).
                delta = event.delta
                if delta and active.text.append(delta) >= self.agent.minimal_chunk_to_persist:
                    state.flush_now = True
                return True
        return False

    def _keep(self, event: BaseEvent) -> None:
        state = self.state
        if len(self.pending) >= self.agent.max_queue_size:
            if not state.dropped:
                logger.error(
                    "The persistence backlog of run %r is full (%d events); later events are "
                    "forwarded but not stored.",
                    state.run_id,
                    self.agent.max_queue_size,
                )
            state.dropped = True
            return
        self.pending.append(event)

    async def flush_now(self) -> None:
        """Wait for the task in flight, fold what waits and flush once (a failure is kept for
        the final flush; a write refused as fenced sets ``state.fenced``)."""
        busy = self._busy
        if busy is not None:
            await asyncio.wait({busy})
        state = self.state
        if state.unstored or state.gone or state.fenced is not None:
            return
        self._busy = asyncio.current_task()  # events folded meanwhile wait, as for a flush
        try:
            await self._catch_up()
            await self._flush_fenced(state)
        finally:
            self._busy = None

    async def settle(self) -> None:
        """Wait for the task in flight, fold what waits, and stop scheduling flushes."""
        self._settled = True
        busy = self._busy
        if busy is not None:
            try:
                await asyncio.wait({busy})
            except asyncio.CancelledError:
                busy.cancel()
                await asyncio.wait({busy})
                raise
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not (self.state.unstored or self.state.gone):
            await self._catch_up()

    async def _fold(self, event: BaseEvent) -> None:
        state = self.state
        state.timed_event = event  # current_event_timestamp reads its time when asked
        try:
            await self.agent._handler_for(event)(state, state.chat, event)
        except Exception:
            logger.exception(
                "Storing %s of run %r failed; the event is forwarded but not stored.",
                type(event).__name__,
                state.run_id,
            )

    async def _catch_up(self) -> bool:
        """Fold the waiting events; whether there were any."""
        if not self.pending:
            return False
        pending = self.pending
        while pending:
            event = pending.popleft()
            if not self._fold_nowait(event):
                await self._fold(event)
        return True

    def _due(self) -> bool:
        state = self.state
        return state.flush_now or (
            state.flush_due is not None and self._loop.time() >= state.flush_due
        )

    def _schedule(self) -> None:
        """After a fold: flush if one is due, else arm the interval (a flush with nothing to
        write costs no request; checking once per interval keeps long runs linear)."""
        if self._settled:
            return
        state = self.state
        if self._due():
            self._busy = asyncio.create_task(self._work())
        elif state.flush_due is None:
            state.flush_due = self._loop.time() + self.agent.flush_interval
            self._arm(state.flush_due)

    async def _flush_fenced(self, state: StorageState) -> None:
        """Flush; a write refused because another worker took the run over stops the storing
        (``run()`` raises it at the next event)."""
        try:
            await self.agent._flush(state)
        except RunFencedError as exc:
            state.fenced = exc
            self.pending.clear()

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            if self._timer.when() <= when:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        due = self.state.flush_due
        if self._busy is not None or self._settled or due is None:
            return  # the task in flight arms the next one
        if self._loop.time() >= due:
            self._busy = asyncio.create_task(self._work())
        else:
            self._arm(due)

    async def _work(self, writes: asyncio.Task[tuple[Chat, list[Message]]] | None = None) -> None:
        """Wait for the new thread's writes or flush; fold what arrived; again while due."""
        state = self.state
        try:
            if writes is None:
                await self._flush_fenced(state)
            else:
                try:
                    state.chat, state.history = await writes
                except ChatNotFoundError:  # deleted before its user messages were written
                    thread_gone(state)
                    self.pending.clear()
                    return
                except Exception:
                    state.unstored = True  # run() raises the failure; nothing more is written
                    self.pending.clear()
                    return
            while True:
                if await self._catch_up() and state.flush_due is None:
                    state.flush_due = self._loop.time() + self.agent.flush_interval
                if not self._due():
                    break
                await self._flush_fenced(state)
        finally:
            self._busy = None
        if state.flush_due is not None and not self._settled:
            self._arm(state.flush_due)
