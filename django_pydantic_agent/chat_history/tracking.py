"""In-memory tracking of the records one run writes: buffers, statuses, pending changes.

Each record of the run is tracked locally from the event that starts it. Nothing is written
until a flush; the first flush creates the record with its content and status in one write, and
later flushes send only what changed (text as an idempotent ``<field>_delta`` at the stored
length). A write is "confirmed" into the tracking only after its flush committed, so a failed
flush is retried from the last confirmed state and never duplicates text.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ag_ui.core import BaseEvent
from pydantic import BaseModel

from django_pydantic_agent.chat_history.errors import RunFencedError
from django_pydantic_agent.chat_history.records import (
    Chat,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageStatus,
    MessageToolCallCreate,
    ToolCall,
)

__all__ = [
    "StorageState",
    "TrackedMessage",
    "TrackedReasoning",
    "TrackedRecord",
    "TrackedText",
    "TrackedToolCall",
    "apply_json_patch",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ACTIVE = MessageStatus.ACTIVE.value


class TrackedText:
    """A text field: the full intended value and the length known to be stored.

    Deltas are kept as parts and joined when the value is read (at a flush), so appending the
    n-th delta of a long answer costs O(len(delta)), not a copy of everything before it.
    """

    __slots__ = ("_length", "_parts", "stored_len")

    def __init__(self, value: str = "", stored_len: int | None = 0) -> None:
        self._parts = [value] if value else []
        self._length = len(value)
        self.stored_len = stored_len
        """Length of the stored prefix; ``None`` when unknown (the next write sends it whole)."""

    def __repr__(self) -> str:
        return f"TrackedText(value={self.value!r}, stored_len={self.stored_len!r})"

    @property
    def value(self) -> str:
        parts = self._parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""

    @value.setter
    def value(self, value: str) -> None:
        self._parts = [value] if value else []
        self._length = len(value)

    def append(self, delta: str) -> int:
        """Add ``delta`` at the end of the value; return the characters now `pending`."""
        self._parts.append(delta)
        length = self._length = self._length + len(delta)
        stored = self.stored_len
        return length if stored is None else length - stored

    def __len__(self) -> int:
        return self._length

    @property
    def pending(self) -> int:
        """Characters not yet confirmed as stored."""
        if self.stored_len is None:
            return self._length
        return self._length - self.stored_len

    @property
    def dirty(self) -> bool:
        return self.stored_len != self._length

    def write_fields(self, name: str) -> dict[str, Any]:
        """The update fields that bring the stored value up to date (a delta when possible)."""
        if not self.dirty:
            return {}
        if self.stored_len is None or self.stored_len > self._length:
            return {name: self.value}
        return {
            f"{name}_delta": self.value[self.stored_len :],
            f"{name}_offset": self.stored_len,
        }


@dataclass(eq=False, kw_only=True)
class TrackedRecord:
    """A record of this run: its create DTO, desired state, and what is confirmed stored."""

    dto: BaseModel
    """The create DTO built by the agent's hook when the record started."""
    text: TrackedText = field(default_factory=TrackedText)
    status: str = ACTIVE
    error: str | None = None
    changes: dict[str, Any] = field(default_factory=dict)
    """Other fields to set at the next write (encrypted values, results, outcome, ...)."""
    uuid: UUID | None = None
    """The stored uuid, once a create committed."""
    stored_status: str | None = None
    foreign: bool = False
    """A record of an earlier run that this run only adds to (e.g. a late tool result)."""
    lost: bool = False
    """The store no longer has it (deleted chat); no more writes are attempted."""

    @property
    def is_active(self) -> bool:
        return self.status == ACTIVE

    @property
    def dirty(self) -> bool:
        if self.lost:
            return False
        return (
            self.uuid is None
            or self.text.dirty
            or self.status != self.stored_status
            or bool(self.changes)
        )

    def status_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"status": self.status, "in_progress": self.status == ACTIVE}
        if self.error is not None:
            fields["error"] = self.error
        return fields

    def confirm(self, uuid: UUID, sent_len: int, sent_status: str, sent: dict[str, Any]) -> None:
        """Record that a write committed (called only after the whole flush succeeded)."""
        self.uuid = uuid
        self.text.stored_len = sent_len
        self.stored_status = sent_status
        for key, value in sent.items():
            if key in self.changes and self.changes[key] is value:
                del self.changes[key]


@dataclass(eq=False, kw_only=True)
class TrackedToolCall(TrackedRecord):
    """A tool call; ``text`` holds its arguments."""

    dto: MessageToolCallCreate
    tool_call_id: str
    parent: TrackedMessage | None = None
    message_uuid: UUID | None = None
    """For a foreign call: the stored parent message."""


@dataclass(eq=False, kw_only=True)
class TrackedReasoning(TrackedRecord):
    """A reasoning step; ``text`` holds its content."""

    dto: MessageReasoningCreate
    agui_id: str | None = None
    parent: TrackedMessage | None = None


@dataclass(eq=False, kw_only=True)
class TrackedMessage(TrackedRecord):
    """A message of this run with its nested records, in start order."""

    dto: MessageCreate
    agui_id: str | None = None
    #: Started without an AG-UI id and given one later: a create sent before then (whose
    #: answer may have been lost) stored it without the id.
    adopted_id: bool = False
    role: str = "assistant"
    tool_calls: list[TrackedToolCall] = field(default_factory=list)
    reasonings: list[TrackedReasoning] = field(default_factory=list)
    activity_content: dict[str, Any] | None = None


@dataclass(eq=False, kw_only=True)
class StorageState:
    """The storage agent's view of one run (one per ``AGUIStorageAgent.run``).

    Attributes:
        run_id / thread_id: The run being stored; ``chat`` its chat.
        history: The stored chat as the run started (after the inbound writes).
        active_step: The name from the last ``STEP_STARTED`` (stamped on new messages).
        current_event_timestamp: Time of the event being handled (the create timestamp).
        active_message / active_tool_call / active_reasoning: What events fold onto.
        active_reasoning_agui_id / active_reasoning_title: The open reasoning phase.
        messages: Every message of this run, in start order.
        tool_calls: This run's tool calls by AG-UI id; ``foreign`` holds earlier runs' calls
            that got a result in this run.
        terminal_seen: Whether ``RUN_FINISHED`` or ``RUN_ERROR`` was handled.
        resumed: Whether the run answers interrupts (its outcome is then always stored, so it
            supersedes the interrupt outcome it resumed).
        dropped: Whether events were dropped from persistence (queue overflow).
        unstored: Whether writing a new thread's chat and user messages failed (nothing of
            the run is written then; the run fails).
        gone: Whether the thread was deleted while the run wrote to it (nothing more of the
            run is written; the run goes on to its end).
        fenced: The refusal of a write because another worker took the run over (nothing
            more of the run is written; the run stops), or ``None``.
        reasoning_ms: How long each reasoning step of this run took, by AG-UI id, in
            milliseconds (from its start event's time to its end event's): stored with the
            run's outcome.
    """

    run_id: str
    thread_id: str
    chat: Chat
    history: list[Message] = field(default_factory=list)
    active_step: str | None = None
    # The event being handled and how to read its time: ``current_event_timestamp`` converts
    # it only when a record is created, not for every delta.
    timed_event: BaseEvent | None = field(default=None, repr=False)
    event_time_of: Callable[[BaseEvent], datetime] | None = field(default=None, repr=False)
    _event_time: datetime = field(default=_EPOCH, repr=False)
    active_message: TrackedMessage | None = None
    active_tool_call: TrackedToolCall | None = None
    active_reasoning: TrackedReasoning | None = None
    active_reasoning_agui_id: str | None = None
    active_reasoning_title: str | None = None
    messages: list[TrackedMessage] = field(default_factory=list)
    tool_calls: dict[str, TrackedToolCall] = field(default_factory=dict)
    foreign: list[TrackedToolCall] = field(default_factory=list)
    resumed: bool = False
    terminal_seen: bool = False
    dropped: bool = False
    unstored: bool = False
    gone: bool = False
    fenced: RunFencedError | None = None
    flush_due: float | None = None
    flush_now: bool = False
    needs_recovery: bool = False
    outcome: dict[str, Any] | None = None
    reasoning_ms: dict[str, int] = field(default_factory=dict)

    @property
    def current_event_timestamp(self) -> datetime:
        event, read = self.timed_event, self.event_time_of
        if event is not None and read is not None:
            self._event_time = read(event)
            self.timed_event = None
        return self._event_time

    @current_event_timestamp.setter
    def current_event_timestamp(self, value: datetime) -> None:
        self._event_time = value
        self.timed_event = None

    def records(self) -> list[TrackedRecord]:
        """Every record of this run (not the foreign ones), parents before children."""
        found: list[TrackedRecord] = []
        for message in self.messages:
            found.append(message)
            found.extend(message.reasonings)
            found.extend(message.tool_calls)
        return found

    def dirty(self) -> bool:
        return any(r.dirty for r in self.records()) or any(c.dirty for c in self.foreign)

    def stored_call(self, tool_call_id: str) -> tuple[Message, ToolCall] | None:
        """A tool call of an earlier run with this AG-UI id."""
        for message in reversed(self.history):
            for call in message.tool_calls:
                if tool_call_id in (call.tool_call_id, call.agui_id):
                    return message, call
        return None


def _pointer(path: str) -> list[str]:
    if not path:
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for part in parts:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def _put(doc: Any, parts: list[str], value: Any, *, insert: bool) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    key = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if key == "-" else int(key)
        if insert:
            parent.insert(index, value)
        else:
            parent[index] = value
    else:
        parent[key] = value
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    parent = _walk(doc, parts[:-1])
    key = parts[-1]
    value = parent.pop(int(key)) if isinstance(parent, list) else parent.pop(key)
    return value


def apply_json_patch(document: dict[str, Any], operations: list[Any]) -> dict[str, Any]:
    """Apply RFC 6902 operations to a copy of ``document`` and return it.

    Raises:
        ValueError: If an operation does not apply (missing path, failed ``test``).
    """
    doc: Any = copy.deepcopy(document)
    for raw in operations:
        op = raw.model_dump(by_alias=True) if isinstance(raw, BaseModel) else dict(raw)
        kind = op.get("op")
        parts = _pointer(str(op.get("path", "")))
        try:
            if kind == "add":
                doc = _put(doc, parts, copy.deepcopy(op.get("value")), insert=True)
            elif kind == "replace":
                doc = _put(doc, parts, copy.deepcopy(op.get("value")), insert=False)
            elif kind == "remove":
                _remove(doc, parts)
            elif kind in ("move", "copy"):
                source = _pointer(str(op.get("from", "")))
                value = (
                    _remove(doc, source) if kind == "move" else copy.deepcopy(_walk(doc, source))
                )
                doc = _put(doc, parts, value, insert=True)
            elif kind == "test":
                if _walk(doc, parts) != op.get("value"):
                    raise ValueError(f"test failed at {op.get('path')!r}")
            else:
                raise ValueError(f"unknown operation {kind!r}")
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ValueError(f"JSON patch operation {op!r} does not apply: {exc}") from exc
    if not isinstance(doc, dict):
        raise ValueError("A JSON patch turned the activity content into a non-object.")
    return doc
