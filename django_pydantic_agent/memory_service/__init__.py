"""Async client for the DataRobot Agentic Memory Service (httpx and pydantic only).

Names and semantics follow the ``datarobot.application_utils.persistence`` ORM, so code
written against it ports by changing one import.
"""

from __future__ import annotations

from django_pydantic_agent.memory_service.client import DRMemoryServiceClient
from django_pydantic_agent.memory_service.errors import (
    DRMemoryBadRequestError,
    DRMemoryConflictError,
    DRMemoryNotFoundError,
    DRMemoryRateLimitError,
    DRMemoryServiceError,
    DRMemoryUnavailableError,
    DRMemoryValidationError,
    DRMemoryVersionConflictError,
)
from django_pydantic_agent.memory_service.event import DREvent
from django_pydantic_agent.memory_service.keys import (
    DEFAULT_SESSION_TTL_SECONDS,
    SYSTEM_PARTICIPANT,
    DRConcurrencyField,
    DRDeduplicationKey,
    DRRangeKey,
)
from django_pydantic_agent.memory_service.session import DRSession
from django_pydantic_agent.memory_service.space import DRMemorySpace

__all__ = [
    "DEFAULT_SESSION_TTL_SECONDS",
    "SYSTEM_PARTICIPANT",
    "DRConcurrencyField",
    "DRDeduplicationKey",
    "DREvent",
    "DRMemoryBadRequestError",
    "DRMemoryConflictError",
    "DRMemoryNotFoundError",
    "DRMemoryRateLimitError",
    "DRMemoryServiceClient",
    "DRMemoryServiceError",
    "DRMemorySpace",
    "DRMemoryUnavailableError",
    "DRMemoryValidationError",
    "DRMemoryVersionConflictError",
    "DRRangeKey",
    "DRSession",
]
