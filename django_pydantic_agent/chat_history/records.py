"""Chat-history records: the stored models, their enums, the create/update DTOs and the codec.

``Chat`` is a Memory Service session and ``Message`` one event per logical message, with the
message's tool calls and reasoning steps nested in its body. Every other backend (the in-memory
repositories, the Django ORM tables) stores the same records, so one storage agent and one
``translate_messages`` serve them all.

Fields beyond the reference's (each optional with a safe default, so reference-written bodies
load unchanged):

- ``run_id`` on ``Message`` / ``ToolCall`` / ``Reasoning``: the AG-UI run that created the
  record (for an inbound user message, the run it started). Finalizers and anonymous-message
  adoption only touch records of their own run.
- ``encrypted_value`` on all three: the opaque ``REASONING_ENCRYPTED_VALUE`` payload (or an
  inbound message's ``encryptedValue``), replayed as ``encrypted_value`` so a provider can
  resume its hidden reasoning. ``ToolCall.result_encrypted_value`` is the one of its result.
- ``content_parts`` on ``Message`` and ``ToolCall``: the raw AG-UI content parts (camelCase
  dicts) of a multimodal user message or a list-valued tool result; ``content`` keeps the
  flattened text. Replay uses the parts when present, so nothing is lost.
- ``result_message_id`` and ``has_result`` on ``ToolCall``: the ``message_id`` of the
  ``TOOL_CALL_RESULT`` (the id AG-UI clients echo back as the tool message id) and whether a
  result was recorded at all (an empty string is a valid result).
- ``run_outcome`` on ``Message``: set on the last message of a run, a JSON object with
  ``run_id``, ``type`` (``success`` / ``interrupt`` / ``cancelled`` / ``error``),
  ``interrupts`` (AG-UI ``Interrupt`` objects, camelCase), ``pending_tool_call_ids``, ``usage``
  (``TokenUsage`` objects) and, once a later run answered the interrupts, ``resolved``
  (interrupt id → ``ResumeEntry``).
- ``activity_type`` / ``activity_content`` on ``Message`` (role ``activity``): an
  ``ACTIVITY_SNAPSHOT`` (with its deltas applied), which AG-UI clients keep as an
  ``ActivityMessage`` and echo back.
- ``wire_extra`` on ``Message``: the keys a posted AG-UI message carried beyond the fields
  the record models (``attachments``, ``metadata``...), as JSON, written back on the wire
  message so a reloaded thread shows them.

Placeholder codec: the Memory Service refuses empty strings in some body fields, so values are
encoded with U+200B ZERO WIDTH SPACE on the wire. The rule is lossless (a real ``"\\u200b"``
round-trips) and reads reference-written data: :func:`encode_placeholder` prefixes one U+200B
to a value made only of U+200B characters (``""`` included); :func:`decode_placeholder` drops
one from a non-empty value made only of them. ``ToolCall.arguments`` / ``content`` and
``Reasoning.content`` are encoded by JSON-mode dumps and decoded by validation given
:data:`WIRE_CONTEXT`; ``Message`` encodes and decodes its own ``content`` (and its nested
records) on the ORM path, so repositories pass plain values and never encode themselves.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Final, Self, TypeVar, get_args
from uuid import UUID, uuid4

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from django_pydantic_agent.chat_history.errors import StaleDeltaError
from django_pydantic_agent.memory_service import DRDeduplicationKey, DREvent, DRRangeKey, DRSession
from django_pydantic_agent.memory_service.event import EmitterType

__all__ = [
    "PAYLOAD_VERSION",
    "PLACEHOLDER",
    "WIRE_CONTEXT",
    "Chat",
    "ChatCreate",
    "Message",
    "MessageCreate",
    "MessageReasoningCreate",
    "MessageReasoningUpdate",
    "MessageStatus",
    "MessageToolCallCreate",
    "MessageToolCallUpdate",
    "MessageUpdate",
    "Reasoning",
    "Role",
    "ToolCall",
    "apply_update",
    "decode_placeholder",
    "detached",
    "encode_placeholder",
    "nested_record_class",
    "update_fields",
]

logger = logging.getLogger("django_pydantic_agent.chat_history")

PLACEHOLDER: Final[str] = "\u200b"
"""U+200B ZERO WIDTH SPACE, the stand-in for an empty string on the wire."""

PAYLOAD_VERSION: Final[int] = 1
"""The ``v`` written on every message body; reads keep only bodies of this version."""

WIRE_CONTEXT: Final[Mapping[str, Any]] = {"chat_history_wire": True}
"""Validation context meaning "this data comes from the wire": placeholders are decoded."""


def encode_placeholder(value: str | None) -> str:
    """Return the wire form of ``value``: one more U+200B if it is only U+200B (or empty)."""
    if value is None:
        return PLACEHOLDER
    if value.strip(PLACEHOLDER) == "":
        return PLACEHOLDER + value
    return value


def decode_placeholder(value: str | None) -> str:
    """Return the value a wire string stands for (inverse of :func:`encode_placeholder`)."""
    if not value:
        return ""
    if value.strip(PLACEHOLDER) == "":
        return value[1:]
    return value


def _is_wire(info: ValidationInfo) -> bool:
    context = info.context
    return isinstance(context, Mapping) and bool(context.get("chat_history_wire"))


def _now() -> datetime:
    return datetime.now(UTC)


class Role(StrEnum):
    """Message source role, mirroring the AG-UI message roles (https://docs.ag-ui.com)."""

    DEVELOPER = "developer"
    SYSTEM = "system"
    ASSISTANT = "assistant"
    USER = "user"
    TOOL = "tool"
    REASONING = "reasoning"


class MessageStatus(StrEnum):
    """Lifecycle status of a message, tool call or reasoning step."""

    ACTIVE = "active"
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    ERRORED = "errored"


class _Nested(BaseModel):
    """Shared behaviour of the records nested in a message body."""

    # Unknown keys (written by a newer schema) are kept, so a whole-body rewrite keeps them too.
    model_config = ConfigDict(extra="allow")


class ToolCall(_Nested):
    """A tool call nested inside a ``Message`` body.

    ``arguments`` and ``content`` carry the placeholder codec. ``content`` is the result text
    (the flattened text for a list result, whose parts are in ``content_parts``).
    """

    uuid: UUID = Field(default_factory=uuid4)
    agui_id: str | None = None
    tool_call_id: str | None = None
    role: str = Role.TOOL.value
    name: str = ""
    arguments: str = ""
    content: str = ""
    in_progress: bool = True
    error: str | None = None
    status: str = MessageStatus.ACTIVE.value
    created_at: datetime = Field(default_factory=_now)
    run_id: str | None = None
    """The run that created the call."""
    result_message_id: str | None = None
    """The ``TOOL_CALL_RESULT.message_id`` (or the inbound tool message id) of the result."""
    has_result: bool = False
    """Whether a result was recorded (stream result or a client's tool message)."""
    content_parts: list[dict[str, Any]] | None = None
    """The raw AG-UI content parts of a list-valued result."""
    encrypted_value: str | None = None
    """An opaque ``REASONING_ENCRYPTED_VALUE`` attached to this call (subtype ``tool-call``)."""
    result_encrypted_value: str | None = None
    """An opaque encrypted value of the result (subtype ``message`` naming the result id)."""

    @field_validator("arguments", "content", mode="before")
    @classmethod
    def _decode(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return ""
        if isinstance(value, str) and _is_wire(info):
            return decode_placeholder(value)
        return value

    @field_serializer("arguments", "content", when_used="json")
    def _encode(self, value: str) -> str:
        return encode_placeholder(value)

    @property
    def answered(self) -> bool:
        """Whether the call has a result (reference data: a non-empty ``content``)."""
        return self.has_result or bool(self.content) or self.result_message_id is not None


class Reasoning(_Nested):
    """A reasoning step nested inside a ``Message`` body; ``content`` carries the codec."""

    uuid: UUID = Field(default_factory=uuid4)
    agui_id: str | None = None
    role: str = Role.REASONING.value
    name: str = ""
    content: str = ""
    in_progress: bool = True
    error: str | None = None
    status: str = MessageStatus.ACTIVE.value
    created_at: datetime = Field(default_factory=_now)
    run_id: str | None = None
    """The run that created the step."""
    encrypted_value: str | None = None
    """The opaque ``REASONING_ENCRYPTED_VALUE`` (subtype ``message``) of this step."""

    @field_validator("content", mode="before")
    @classmethod
    def _decode(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return ""
        if isinstance(value, str) and _is_wire(info):
            return decode_placeholder(value)
        return value

    @field_serializer("content", when_used="json")
    def _encode(self, value: str) -> str:
        return encode_placeholder(value)


class Chat(DRSession):
    """A chat thread, persisted as one Memory Service session.

    ``thread_id`` is the range key (``//thread/<thread_id>/``), ``dedup_key`` the idempotent
    create key (:func:`~django_pydantic_agent.chat_history.chat_deduplication_key`); ``name``,
    ``chat_uuid`` and ``user_uuid`` are metadata. The single participant is the user's
    :func:`~django_pydantic_agent.chat_history.participant_id`.
    """

    __description_prefix__ = "thread"

    thread_id: Annotated[str, DRRangeKey]
    dedup_key: Annotated[str, DRDeduplicationKey]
    name: str = "New Chat"
    chat_uuid: UUID = Field(default_factory=uuid4)
    user_uuid: UUID | None = None


class Message(DREvent, session=Chat):
    """A chat message, persisted as one Memory Service event under a ``Chat``.

    Tool calls and reasoning steps live in ``tool_calls`` / ``reasonings`` in this event's
    body. ``v`` is the body schema version and gates reads. The application time is
    ``timestamp`` because ``created_at`` is the server's. ``content`` carries the placeholder
    codec; the model applies it itself on ``post`` / ``patch`` / reads, so callers pass plain
    text. ``role`` defaults to ``user`` as in the reference: always pass it.
    """

    v: int = PAYLOAD_VERSION
    message_uuid: UUID = Field(default_factory=uuid4)
    chat_uuid: UUID | None = None
    agui_id: str | None = None
    role: str = Role.USER.value
    name: str = ""
    step: str | None = None
    in_progress: bool = True
    error: str | None = None
    status: str = MessageStatus.ACTIVE.value
    timestamp: datetime = Field(default_factory=_now)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    reasonings: list[Reasoning] = Field(default_factory=list)
    run_id: str | None = None
    """The run that created the message (for an inbound user message: the run it started)."""
    encrypted_value: str | None = None
    """An opaque encrypted value for the message (``REASONING_ENCRYPTED_VALUE`` subtype
    ``message`` naming this message, or an inbound ``encryptedValue``)."""
    content_parts: list[dict[str, Any]] | None = None
    """The raw AG-UI content parts of a multimodal user message (``content`` is flattened)."""
    run_outcome: dict[str, Any] | None = None
    """How the run that wrote this message (its last one) ended; see the module docstring."""
    activity_type: str | None = None
    """For role ``activity`` (an ``ACTIVITY_SNAPSHOT`` the client turns into a message)."""
    activity_content: dict[str, Any] | None = None
    """The activity's structured content (snapshot, with later deltas applied)."""
    wire_extra: dict[str, Any] | None = None
    """The posted AG-UI message's keys the record does not model (``attachments``...)."""

    @field_validator("content", mode="before")
    @classmethod
    def _decode_content(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return ""
        if isinstance(value, str) and _is_wire(info):
            return decode_placeholder(value)
        return value

    # The ORM path: encode on the way out, decode on the way in -----------------------------

    @classmethod
    def _create_item(
        cls, session: DRSession, item: Mapping[str, Any], *, where: str
    ) -> dict[str, Any]:
        encoded = {**item, "content": encode_placeholder(item.get("content"))}
        return super()._create_item(session, encoded, where=where)

    def _patch_item(
        self,
        content: str | None,
        emitter_type: EmitterType | None,
        emitter_id: str | None,
        fields: Mapping[str, Any],
        *,
        where: str,
    ) -> dict[str, Any]:
        wire: str | None = None
        if content is not None or fields:
            wire = encode_placeholder(content if content is not None else self.content)
        return super()._patch_item(wire, emitter_type, emitter_id, fields, where=where)

    def _apply(self, data: Mapping[str, Any]) -> None:
        super()._apply(data)
        if "body" not in data:
            return
        self.content = decode_placeholder(self.content)
        for call in self.tool_calls:
            if isinstance(call, ToolCall):
                call.arguments = decode_placeholder(call.arguments)
                call.content = decode_placeholder(call.content)
        for step in self.reasonings:
            if isinstance(step, Reasoning):
                step.content = decode_placeholder(step.content)


def nested_record_class(message_class: type[Message], field: str) -> type[_Nested]:
    """Return the record class of ``message_class.<field>`` (``tool_calls`` or ``reasonings``).

    Lets repositories build a subclass's own ``ToolCall`` / ``Reasoning`` subclass.
    """
    annotation = message_class.model_fields[field].annotation
    args = get_args(annotation)
    if args and isinstance(args[0], type) and issubclass(args[0], _Nested):
        return args[0]
    return ToolCall if field == "tool_calls" else Reasoning


# DTOs -----------------------------------------------------------------------------------------


class _DTO(BaseModel):
    # Extra keys are kept (not dropped as in the reference) so that fields declared by a
    # record subclass reach storage; repositories apply those the record class declares.
    model_config = ConfigDict(extra="allow")


class ChatCreate(_DTO):
    """Fields of a new chat; the repository requires ``thread_id`` and ``user_uuid``."""

    name: str = "New Chat"
    thread_id: str | None = None
    user_uuid: UUID | None = None


class MessageCreate(_DTO):
    """Fields of a new message; ``chat_uuid`` is required by the repository (ValueError)."""

    agui_id: str | None = None
    role: str = Role.USER.value
    name: str = ""
    content: str = ""
    step: str | None = None
    chat_uuid: UUID | None = None
    in_progress: bool = True
    status: str = MessageStatus.ACTIVE.value
    error: str | None = None
    timestamp: datetime = Field(default_factory=_now)
    run_id: str | None = None
    encrypted_value: str | None = None
    content_parts: list[dict[str, Any]] | None = None
    run_outcome: dict[str, Any] | None = None
    activity_type: str | None = None
    activity_content: dict[str, Any] | None = None
    wire_extra: dict[str, Any] | None = None


class _Update(_DTO):
    """An update: only explicitly set, non-``None`` fields (and extras) are applied.

    ``<field>_delta`` with ``<field>_offset`` is an idempotent append: the stored value becomes
    ``stored[:offset] + delta`` (``ValueError`` if the stored value is shorter than ``offset``),
    so a retried write never duplicates text. A full value and a delta for the same field
    cannot be combined.
    """

    @model_validator(mode="after")
    def _one_form(self) -> Self:
        for name in type(self).model_fields:
            if name.endswith("_delta"):
                base = name.removesuffix("_delta")
                if getattr(self, base, None) is not None and getattr(self, name) is not None:
                    raise ValueError(
                        f"{type(self).__name__} got both {base!r} and {name!r}; send the full "
                        "value or a delta, not both."
                    )
                if getattr(self, name) is not None and getattr(self, f"{base}_offset") is None:
                    raise ValueError(
                        f"{type(self).__name__}.{name} needs {base}_offset (the length of the "
                        "stored value the delta follows)."
                    )
        return self


class MessageUpdate(_Update):
    """Changes to a message's own fields."""

    agui_id: str | None = None
    content: str | None = None
    content_delta: str | None = None
    content_offset: int | None = None
    error: str | None = None
    in_progress: bool | None = None
    status: str | None = None
    run_id: str | None = None
    encrypted_value: str | None = None
    content_parts: list[dict[str, Any]] | None = None
    run_outcome: dict[str, Any] | None = None
    activity_content: dict[str, Any] | None = None


class MessageToolCallCreate(_DTO):
    """Fields of a tool call appended to the message ``message_uuid``."""

    message_uuid: UUID
    agui_id: str | None = None
    tool_call_id: str | None = None
    role: str = Role.TOOL.value
    name: str = ""
    arguments: str = ""
    content: str = ""
    in_progress: bool = True
    status: str = MessageStatus.ACTIVE.value
    error: str | None = None
    created_at: datetime = Field(default_factory=_now)
    run_id: str | None = None
    result_message_id: str | None = None
    has_result: bool = False
    content_parts: list[dict[str, Any]] | None = None
    encrypted_value: str | None = None
    result_encrypted_value: str | None = None


class MessageToolCallUpdate(_Update):
    """Changes to a nested tool call."""

    name: str | None = None
    arguments: str | None = None
    arguments_delta: str | None = None
    arguments_offset: int | None = None
    content: str | None = None
    error: str | None = None
    in_progress: bool | None = None
    status: str | None = None
    result_message_id: str | None = None
    has_result: bool | None = None
    content_parts: list[dict[str, Any]] | None = None
    encrypted_value: str | None = None
    result_encrypted_value: str | None = None


class MessageReasoningCreate(_DTO):
    """Fields of a reasoning step appended to the message ``message_uuid``."""

    message_uuid: UUID
    agui_id: str | None = None
    role: str = Role.REASONING.value
    name: str = ""
    content: str = ""
    in_progress: bool = True
    status: str = MessageStatus.ACTIVE.value
    error: str | None = None
    created_at: datetime = Field(default_factory=_now)
    run_id: str | None = None
    encrypted_value: str | None = None


class MessageReasoningUpdate(_Update):
    """Changes to a nested reasoning step."""

    content: str | None = None
    content_delta: str | None = None
    content_offset: int | None = None
    error: str | None = None
    in_progress: bool | None = None
    status: str | None = None
    encrypted_value: str | None = None


def update_fields(update: BaseModel) -> dict[str, Any]:
    """Return the effective changes of an update DTO: set, non-``None`` fields plus extras."""
    changes = {
        name: getattr(update, name)
        for name in update.model_fields_set
        if name in type(update).model_fields and getattr(update, name) is not None
    }
    for name, value in (update.model_extra or {}).items():
        if value is not None:
            changes[name] = value
    return changes


def apply_update(record: BaseModel, update: BaseModel) -> dict[str, Any]:
    """Apply an update DTO to ``record`` in place and return the changes applied.

    Deltas are resolved against the record's current value. Keys the record's class does not
    declare (and cannot keep as extras) are logged and skipped.

    Raises:
        StaleDeltaError: If a delta's offset is past the end of the stored value (a
            ``ValueError``).
    """
    changes = update_fields(update)
    applied: dict[str, Any] = {}
    fields = type(record).model_fields
    keeps_extras = type(record).model_config.get("extra") == "allow"
    for name, value in changes.items():
        if name.endswith("_offset") and name.removesuffix("_offset") + "_delta" in changes:
            continue
        if name.endswith("_delta") and name.removesuffix("_delta") in fields:
            base = name.removesuffix("_delta")
            offset = changes[f"{base}_offset"]
            current = getattr(record, base) or ""
            if len(current) < offset:
                raise StaleDeltaError(
                    f"Cannot append to {type(record).__name__}.{base} at offset {offset}: the "
                    f"stored value has only {len(current)} characters; resend the full value."
                )
            applied[base] = current[:offset] + value
            continue
        if name.endswith("_offset") or name.endswith("_delta"):
            continue
        if name in fields or keeps_extras:
            applied[name] = value
        else:
            logger.warning(
                "%s has no field %r; the update's value for it is not stored. Declare it on a "
                "%s subclass to keep it.",
                type(record).__name__,
                name,
                type(record).__name__,
            )
    for name, value in applied.items():
        setattr(record, name, value)
    return applied


_M = TypeVar("_M", bound=BaseModel)
_IMMUTABLE: Final = (str, int, float, bytes, UUID, datetime, type(None))
_IMMUTABLE_TYPES: Final = frozenset((*_IMMUTABLE, bool))


def detached(model: _M) -> _M:
    """``model.model_copy(deep=True)``, without walking the values nothing can change.

    A shallow copy, then a copy of each field, extra and private value that is not immutable
    (lists and nested models item by item, anything else deep-copied; one memo, so a value
    shared inside the record stays shared in the copy): the strings, numbers, uuids and
    timestamps most of a record holds are kept as they are. The repositories copy every record
    they hand out of their cache, and the run path reads a window of them (a deep copy was a
    third of that read: ``python -m bench --suite run-path``).
    """
    return _detached(model, {})


def _detached(model: _M, memo: dict[int, Any]) -> _M:
    clone = model.model_copy()
    for values in (clone.__dict__, clone.__pydantic_extra__, clone.__pydantic_private__):
        for name, value in (values or {}).items():
            if value.__class__ not in _IMMUTABLE_TYPES:  # most values: one set lookup
                values[name] = _detached_value(value, memo)  # type: ignore[index]
    return clone


def _detached_value(value: Any, memo: dict[int, Any]) -> Any:
    if isinstance(value, _IMMUTABLE):
        return value
    known = memo.get(id(value))
    if known is not None:
        return known
    if value.__class__ is list:
        items: list[Any] = []
        memo[id(value)] = items
        items.extend(_detached_value(item, memo) for item in value)
        return items
    if isinstance(value, BaseModel):
        memo[id(value)] = clone = _detached(value, memo)
        return clone
    return copy.deepcopy(value, memo)
