"""The ``DRMemory*Error`` tree: every failure the Memory Service client raises.

One base class, :class:`DRMemoryServiceError`, covers service-side errors and an unreachable
service alike, so call sites can catch it without importing httpx. Subclasses narrow the cause
(one per HTTP status the contract gives a meaning to). ``detail`` is the service's own message;
``str(exc)`` is a full sentence that also names the request.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DRMemoryBadRequestError",
    "DRMemoryConflictError",
    "DRMemoryNotFoundError",
    "DRMemoryRateLimitError",
    "DRMemoryServiceError",
    "DRMemoryUnavailableError",
    "DRMemoryValidationError",
    "DRMemoryVersionConflictError",
]


class DRMemoryServiceError(Exception):
    """Base class of every Memory Service client error.

    Attributes:
        detail: The human-readable detail (the service's ``detail`` string when it sent one).
        status_code: The HTTP status, or ``None`` when the error arose before or without a
            response (client-side checks, timeouts, transport failures).
        payload: The parsed JSON error body, ``{}`` when the body was not a JSON object.
    """

    def __init__(
        self,
        detail: str,
        status_code: int | None = None,
        payload: dict[str, Any] | None = None,
        *,
        message: str | None = None,
    ) -> None:
        super().__init__(message if message is not None else detail)
        self.detail = detail
        self.status_code = status_code
        self.payload: dict[str, Any] = payload if payload is not None else {}


class DRMemoryNotFoundError(DRMemoryServiceError):
    """The resource does not exist, was deleted, or belongs to another principal (HTTP 404)."""


class DRMemoryBadRequestError(DRMemoryServiceError):
    """The service rejected the request as malformed (HTTP 400).

    Typical causes: a user emitter that is not a session participant (also raised before any
    HTTP call by the client's own pre-check, with ``status_code=None``) or an invalid ObjectId in
    a participant filter.
    """


class DRMemoryValidationError(DRMemoryServiceError):
    """The request body or query failed the service's schema validation (HTTP 422)."""


class DRMemoryConflictError(DRMemoryServiceError):
    """A deduplication conflict on create (HTTP 409).

    ``post()`` of spaces and sessions adopts the existing resource instead of raising this; it
    escapes only when the service named no existing id.

    Attributes:
        existing_id: Id of the resource that already holds the deduplication key, if named.
        location: URL of that resource (from the body, else the ``Location`` header), if any.
    """

    def __init__(
        self,
        detail: str,
        status_code: int | None = None,
        payload: dict[str, Any] | None = None,
        *,
        existing_id: str | None = None,
        location: str | None = None,
        message: str | None = None,
    ) -> None:
        super().__init__(detail, status_code, payload, message=message)
        self.existing_id = existing_id
        self.location = location


class DRMemoryVersionConflictError(DRMemoryServiceError):
    """An optimistic-concurrency failure: the resource changed since it was read.

    HTTP 409 for a session ``patch()`` with a stale ``If-Match`` version, HTTP 422 for an event
    ``patch()`` with a stale ``createdAt`` token. Re-read the resource and retry.
    """


class DRMemoryRateLimitError(DRMemoryServiceError):
    """The service refused the request for a quota or rate limit (HTTP 429).

    Attributes:
        retry_after: Whole seconds to wait, parsed from ``Retry-After`` (delta-seconds or
            HTTP-date). ``None`` when the header was absent or invalid, as for the storage cap,
            where waiting does not help: free data instead.
    """

    def __init__(
        self,
        detail: str,
        status_code: int | None = None,
        payload: dict[str, Any] | None = None,
        *,
        retry_after: int | None = None,
        message: str | None = None,
    ) -> None:
        super().__init__(detail, status_code, payload, message=message)
        self.retry_after = retry_after


class DRMemoryUnavailableError(DRMemoryServiceError):
    """No HTTP response was received: a timeout or a transport failure.

    ``status_code`` is always ``None``; the original httpx exception is ``__cause__``.
    """
