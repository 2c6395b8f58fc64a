"""The event fold: how each AG-UI event family changes the tracked records of a run.

``AGUIStorageAgent`` inherits these handlers; they only change in-memory tracking
(``StorageState``), never the store, so every handler is cheap and a flush writes the result.
Resolution rules (live order, per-run scoping) are documented on each ``ensure_*`` method.
"""

from __future__ import annotations

from typing import Any

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
    RunErrorEvent,
    RunFinishedEvent,
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
)

from django_pydantic_agent.chat_history._inbound import (
    dump_parts,
    flatten_content,
)
from django_pydantic_agent.chat_history.records import (
    Chat,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
)
from django_pydantic_agent.chat_history.tracking import (
    StorageState,
    TrackedMessage,
    TrackedReasoning,
    TrackedRecord,
    TrackedToolCall,
    apply_json_patch,
)

__all__ = ["EventFold"]

ACTIVE = MessageStatus.ACTIVE.value
COMPLETE = MessageStatus.COMPLETE.value
INTERRUPTED = MessageStatus.INTERRUPTED.value
ERRORED = MessageStatus.ERRORED.value


def _type_name(event: BaseEvent) -> str:
    kind = event.type
    return str(getattr(kind, "value", kind))


class EventFold:
    """The category handlers and resolution helpers of ``AGUIStorageAgent``."""

    name: str
    minimal_chunk_to_persist: int

    def build_message_create(
        self, state: StorageState, chat: Chat, agui_id: str | None, role: str | None
    ) -> MessageCreate:
        raise NotImplementedError

    def build_tool_call_create(
        self, state: StorageState, tool_call_id: str, tool_call_name: str | None
    ) -> MessageToolCallCreate:
        raise NotImplementedError

    def build_reasoning_create(
        self, state: StorageState, name: str | None
    ) -> MessageReasoningCreate:
        raise NotImplementedError

    def message_update_fields(self, state: StorageState, event: BaseEvent) -> dict[str, Any]:
        raise NotImplementedError

    def _append(self, state: StorageState, record: TrackedRecord, delta: str | None) -> None:
        if delta and record.text.append(delta) >= self.minimal_chunk_to_persist:
            state.flush_now = True

    # Resolution helpers -----------------------------------------------------------------------

    def _close(self, state: StorageState, record: TrackedRecord, event: BaseEvent | None) -> None:
        """Complete a record of this run that is still active (a reasoning step's duration is
        kept for the run's outcome)."""
        if record.is_active:
            record.status = COMPLETE
            if isinstance(record, TrackedMessage) and event is not None:
                record.changes.update(self.message_update_fields(state, event))
            elif isinstance(record, TrackedReasoning) and record.agui_id:
                took = state.current_event_timestamp - record.dto.created_at
                state.reasoning_ms[record.agui_id] = max(0, round(took.total_seconds() * 1000))

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
            active.adopted_id = True
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
        if active is None or not active.is_active or len(active.text) or active.tool_calls:
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
            if stored != {"type": "success"} or state.reasoning_ms:
                # A plain success adds nothing to the statuses, so it costs no write.
                self._set_outcome(state, stored, force=kind != "success" or bool(pending))
            else:
                state.outcome = {"run_id": state.run_id, **stored}
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
        if state.reasoning_ms:
            outcome["reasoning_ms"] = dict(state.reasoning_ms)
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
