"""The ORM classes of the wire spec's acceptance checklist (§15 setup), shared by the tests."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from pydantic import BaseModel

from django_pydantic_agent.memory_service import (
    DRConcurrencyField,
    DRDeduplicationKey,
    DREvent,
    DRRangeKey,
    DRSession,
)

SYS = "000000000000000000000000"
USER = "aabbccddeeff001122334455"


class ChatSession(DRSession):
    __description_prefix__ = "chat"

    tenant: Annotated[str, DRRangeKey]
    topic: Annotated[str, DRRangeKey]
    chat_id: Annotated[str, DRDeduplicationKey]
    rev: Annotated[int, DRConcurrencyField]
    title: str = ""


class ChatMessage(DREvent, session=ChatSession):
    __event_type__ = "message"

    score: float = 0.0


class StatusEvent(DREvent, session=ChatSession):
    __event_type__ = "status"


class ToolOutput(DREvent, session=ChatSession):
    __event_type__ = "tool_output"


class Other(DRSession):
    __description_prefix__ = "chatx"

    q: Annotated[str, DRRangeKey]


class Loc(DRSession):
    __description_prefix__ = "loc"

    key: Annotated[str, DRDeduplicationKey()]
    kind: str | None = None


class NoStrategies(DRSession):
    __description_prefix__ = "nos"
    __lifecycle_strategies__ = []


class MonthTTL(DRSession):
    __description_prefix__ = "month"
    __lifecycle_strategies__ = [{"type": "soft_delete", "trigger": {"ttl": 2592000}}]


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Part(BaseModel):
    name: str
    weight: float
    count: int


class Rich(DRSession):
    """Metadata of every pydantic-expressible kind."""

    __description_prefix__ = "rich"

    when: datetime | None = None
    color: Color = Color.RED
    parts: list[Part] = []
    note: str | None = None


class Typed(DREvent, session=Rich):
    """Body fields of every pydantic-expressible kind."""

    tags: list[str] = []
    meta: dict[str, Any] = {}
    when: datetime | None = None
    ref: UUID | None = None
    nested: list[Part] = []
    opt: str | None = "default"
    color: Color = Color.RED
    ratio: float = 0.0
    count: int = 0
