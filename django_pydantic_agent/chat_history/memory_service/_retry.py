"""Bounded retries for transient Memory Service failures (429, 502-504, no response)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from django_pydantic_agent.memory_service import (
    DRMemoryRateLimitError,
    DRMemoryServiceError,
    DRMemoryUnavailableError,
)

__all__ = ["RetryPolicy"]

logger = logging.getLogger("django_pydantic_agent.chat_history")

T = TypeVar("T")

_RETRIED_STATUSES = frozenset({502, 503, 504})


def _transient(exc: DRMemoryServiceError) -> bool:
    if isinstance(exc, DRMemoryRateLimitError | DRMemoryUnavailableError):
        return True
    return type(exc) is DRMemoryServiceError and exc.status_code in _RETRIED_STATUSES


def _maybe_processed(exc: DRMemoryServiceError) -> bool:
    """Whether the service may have carried out the request although it failed.

    A 429 is refused before processing; a lost response or a gateway error may not be.
    """
    return not isinstance(exc, DRMemoryRateLimitError)


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How the Memory Service repositories retry a transient failure.

    A 429 waits ``Retry-After`` when the service sent one, otherwise (like 502/503/504 and a
    request that got no response) an exponential backoff from ``base_delay`` capped at
    ``max_delay``, with jitter. At most ``attempts`` tries within ``total_seconds``; a wait
    that would end past that budget is not started and the last error is raised.

    ``sleep`` is the coroutine used to wait (inject one to observe the waits in tests).
    """

    attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 5.0
    total_seconds: float = 30.0
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy(attempts={self.attempts!r}) must allow one attempt.")
        if self.base_delay < 0 or self.max_delay < 0 or self.total_seconds < 0:
            raise ValueError(
                "RetryPolicy delays and total_seconds must be >= 0 seconds; got "
                f"base_delay={self.base_delay!r}, max_delay={self.max_delay!r}, "
                f"total_seconds={self.total_seconds!r}."
            )

    def delay(self, attempt: int, exc: DRMemoryServiceError) -> float:
        """Seconds to wait before try ``attempt + 1`` after ``exc``."""
        if isinstance(exc, DRMemoryRateLimitError) and exc.retry_after is not None:
            return float(exc.retry_after)
        backoff = min(self.max_delay, self.base_delay * float(2**attempt))
        return backoff * (0.5 + random.random() / 2)  # jitter, not security

    async def run(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        recheck: Callable[[], Awaitable[T | None]] | None = None,
    ) -> T:
        """Run ``operation``, retrying transient failures.

        ``recheck`` makes a non-idempotent operation (an event create) safe to retry: after a
        failure that may have been carried out, it runs before the next try and its non-``None``
        answer (the records found already stored) is returned instead of repeating the write.

        Raises:
            DRMemoryServiceError: The last error, when it is not transient or the attempts or
                the time budget are spent.
        """
        started = time.monotonic()
        uncertain = False
        attempt = 0
        while True:
            try:
                if uncertain and recheck is not None:
                    found = await recheck()
                    if found is not None:
                        return found
                    uncertain = False
                return await operation()
            except DRMemoryServiceError as exc:
                if not _transient(exc):
                    raise
                uncertain = uncertain or _maybe_processed(exc)
                wait = self.delay(attempt, exc)
                attempt += 1
                if attempt >= self.attempts or time.monotonic() - started + wait > (
                    self.total_seconds
                ):
                    raise
                logger.info(
                    "Memory Service request failed (%s); retry %d of %d in %.2f s.",
                    exc,
                    attempt,
                    self.attempts - 1,
                    wait,
                )
                await self.sleep(wait)
