"""Request bodies of the emulated Memory Service, validated the way the real service does.

The service is a FastAPI application, so invalid input answers 422 with pydantic's error list.
These models reproduce its limits; the views store the *raw* JSON values (never a re-dump of
these models), so bodies, metadata and strategies echo exactly as they were sent.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

OBJECT_ID_PATTERN = r"^[0-9a-fA-F]{24}$"
SERVER_DEFAULT_STRATEGY: dict[str, Any] = {"type": "soft_delete", "trigger": {"ttl": 15_552_000}}
"""Attached when a session is created with no lifecycle strategy (180 days)."""

MAX_BATCH_ITEMS = 200
MAX_SESSION_DESCRIPTION = 1000
MAX_STRATEGIES = 5

ObjectId = Annotated[StrictStr, Field(pattern=OBJECT_ID_PATTERN)]
DedupKey = Annotated[StrictStr, Field(min_length=1, max_length=72)]
Content = Annotated[StrictStr, Field(min_length=1, max_length=100_000)]
EventType = Literal["message", "tool_output", "status"]


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{value!r} is not an http(s) URL; send an absolute http(s):// URL.")
    return value


HttpUrlText = Annotated[StrictStr, Field(max_length=2083), AfterValidator(_http_url)]


class _Body(BaseModel):
    """Unknown keys are ignored, as the service (pydantic's default) does."""

    model_config = ConfigDict(extra="ignore")


class SpaceCreate(_Body):
    description: Annotated[StrictStr, Field(max_length=1000)] | None = None
    deduplicationKey: DedupKey | None = None
    llmModelName: Annotated[StrictStr, Field(max_length=200)] | None = None
    llmBaseUrl: HttpUrlText | None = None
    customInstructions: Annotated[StrictStr, Field(max_length=10_000)] | None = None


class SpacePatch(_Body):
    """A non-empty object (spec 4.4); null clears a field, unknown keys are ignored."""

    description: Annotated[StrictStr, Field(max_length=1000)] | None = None
    llmModelName: Annotated[StrictStr, Field(max_length=200)] | None = None
    llmBaseUrl: HttpUrlText | None = None
    customInstructions: Annotated[StrictStr, Field(max_length=10_000)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _not_empty(cls, data: Any) -> Any:
        if data == {}:
            raise ValueError(
                "A memory space patch needs at least one of description, llmModelName, "
                "llmBaseUrl or customInstructions; send null to clear a field."
            )
        return data


class Trigger(BaseModel):
    """Exactly one trigger; ``never`` must be ``true`` (the gate is checked by the view)."""

    model_config = ConfigDict(extra="forbid")

    ttl: Annotated[StrictInt, Field(ge=1, le=63_072_000)] | None = None
    eventCount: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None
    tokenCount: Annotated[StrictInt, Field(ge=1, le=100_000_000)] | None = None
    idle: Annotated[StrictInt, Field(ge=1, le=63_072_000)] | None = None
    never: Literal[True] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Trigger:
        chosen = [name for name in type(self).model_fields if getattr(self, name) is not None]
        if len(chosen) != 1:
            raise ValueError(
                f"A trigger needs exactly one of ttl, eventCount, tokenCount, idle or never; "
                f"got {chosen!r}."
            )
        return self


class StrategyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    softDelete: StrictBool = True
    agentId: StrictStr | None = None
    metadata: dict[str, Any] | None = None


class Strategy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["soft_delete", "extract_memories"]
    trigger: Trigger
    opts: StrategyOptions | None = None

    @model_validator(mode="after")
    def _opts_only_for_extraction(self) -> Strategy:
        if self.type == "soft_delete" and self.opts is not None:
            raise ValueError(
                "opts apply only to extract_memories strategies; send null or omit it for "
                "soft_delete."
            )
        return self

    @property
    def is_never(self) -> bool:
        return self.trigger.never is True


Strategies = Annotated[list[Strategy], Field(max_length=MAX_STRATEGIES)]


class SessionCreate(_Body):
    participants: Annotated[list[ObjectId], Field(min_length=1, max_length=1)]
    deduplicationKey: DedupKey | None = None
    description: Annotated[StrictStr, Field(max_length=MAX_SESSION_DESCRIPTION)] | None = None
    metadata: dict[str, Any] | None = None
    lifecycleStrategies: Strategies | None = None


class SessionPatch(_Body):
    """``lifecycleStrategies`` may be omitted but never null or empty."""

    metadata: dict[str, Any] | None = None
    description: Annotated[StrictStr, Field(max_length=MAX_SESSION_DESCRIPTION)] | None = None
    # Omitted means "unchanged"; an explicit null fails validation, as the service's does.
    lifecycleStrategies: Annotated[
        list[Strategy], Field(min_length=1, max_length=MAX_STRATEGIES)
    ] = Field(default=None)  # type: ignore[arg-type]


class EventBody(BaseModel):
    """An event body: ``content`` plus any JSON the caller declared."""

    model_config = ConfigDict(extra="allow")

    content: Content


class Emitter(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["user", "agent"]
    id: ObjectId | None = None


class EventCreate(_Body):
    type: EventType = "message"
    body: EventBody
    emitter: Emitter


class EventCreateBatch(_Body):
    events: Annotated[list[EventCreate], Field(max_length=MAX_BATCH_ITEMS)]


class EventPatch(_Body):
    """At least one of ``body``, ``emitter`` or ``type``; ``body`` replaces the stored body."""

    body: EventBody | None = None
    emitter: Emitter | None = None
    type: EventType | None = None

    @model_validator(mode="after")
    def _something_to_update(self) -> EventPatch:
        if self.body is None and self.emitter is None and self.type is None:
            raise ValueError("An event patch needs at least one of body, emitter or type.")
        return self


class EventPatchItem(EventPatch):
    sequenceId: Annotated[StrictInt, Field(ge=0, le=2**63 - 1)]
    createdAt: StrictStr | None = None


class EventPatchBatch(_Body):
    events: Annotated[list[EventPatchItem], Field(max_length=MAX_BATCH_ITEMS)]

    @model_validator(mode="after")
    def _unique_sequence_ids(self) -> EventPatchBatch:
        seen: set[int] = set()
        for item in self.events:
            if item.sequenceId in seen:
                raise ValueError(
                    f"sequenceId {item.sequenceId!r} appears more than once; send each event "
                    "once per batch."
                )
            seen.add(item.sequenceId)
        return self
