"""HTTP plumbing shared by the AG-UI routes: JSON bodies, body caps, refusals and backend errors.

Each route answers in JSON whatever goes wrong before a stream starts: a handler raises
``errors.Refusal``, and ``views.AGUIView`` answers it. Here: ``read_json_body`` reads an
``application/json`` body without ever reading more than the route's cap, ``read_json_object``
parses such a body into an object (or raises the 4xx naming what is wrong with it), and
``backend_error_response`` answers a ``DatabaseError`` or a ``DRMemoryServiceError``
with a 503 (lock, timeout, outage or rate limit, with ``Retry-After``) or a 500, logged once with
the detail, which the client never sees; an outage of the database, the cache or the file
storage (``persistence.outages``) is a 503 (a full disk a 507), logged as one line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpRequest, JsonResponse

from django_pydantic_agent.agui.errors import Refusal, logged_path
from django_pydantic_agent.agui.unstorable import (
    may_hold_unstorable_values,
    unstorable_problem,
)
from django_pydantic_agent.memory_service import (
    DRMemoryRateLimitError,
    DRMemoryServiceError,
    DRMemoryUnavailableError,
)
from django_pydantic_agent.persistence.outages import (
    CACHE_ERRORS,
    BackendUnavailableError,
    StorageUnavailableError,
    as_unavailable,
    is_database_outage,
)

__all__ = [
    "BACKEND_ERRORS",
    "BACKEND_UNAVAILABLE",
    "DATABASE_BUSY",
    "DATABASE_FAILED",
    "DEFAULT_MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "MEMORY_SERVICE_BUSY",
    "MEMORY_SERVICE_FAILED",
    "NESTED_TOO_DEEPLY",
    "RETRY_AFTER_SECONDS",
    "STORAGE_FULL",
    "backend_error_response",
    "binary_size",
    "body_too_big_response",
    "declared_length",
    "describe_size",
    "error_response",
    "is_json_request",
    "is_transient_database_error",
    "json_body_limit",
    "nested_too_deeply",
    "not_json_response",
    "read_json_body",
    "read_json_object",
]

logger = logging.getLogger("django_pydantic_agent.agui")

#: The body cap of the JSON routes when ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is ``None``: Django's
#: own default for that setting, 2.5 MiB.
DEFAULT_MAX_BODY_BYTES = 2_621_440
#: The deepest nesting of arrays and objects a JSON body may have: the limit of pydantic's JSON
#: parser, which parses the run endpoint's body, so every route refuses the same bodies on every
#: Python (3.13's ``json`` parses far deeper than 3.11's).
MAX_JSON_DEPTH: Final[int] = 200
#: The 400 message for a JSON body nested deeper than ``MAX_JSON_DEPTH``.
NESTED_TOO_DEEPLY = (
    "The request body is nested too deeply to parse; send at most 200 levels of nested "
    "arrays and objects."
)
#: The ``Retry-After`` of a 503 answered for a locked or timed-out database.
RETRY_AFTER_SECONDS = 1
#: The 503 message for a database lock or timeout.
DATABASE_BUSY = "The database is busy; retry in a moment."
#: The 500 message for any other database error (the detail is logged, never sent).
DATABASE_FAILED = "A database error stopped this request. The error has been logged on the server."

#: The 503 message of an outage (``{backend}``: "The database", "The cache", ...).
BACKEND_UNAVAILABLE = "{backend} is unavailable right now; retry in a moment."
#: The 507 message when the attachment storage is full.
STORAGE_FULL = "The attachment storage is full; nothing was stored. Retry later."

#: The 503 message when the Memory Service is unreachable, overloaded or rate-limiting.
MEMORY_SERVICE_BUSY = "The Memory Service is unavailable or busy; retry in a moment."
#: The 500 message for any other Memory Service error (the detail is logged, never sent).
MEMORY_SERVICE_FAILED = (
    "A Memory Service error stopped this request. The error has been logged on the server."
)

# SQLSTATEs of PostgreSQL errors worth retrying: lock_not_available (lock_timeout),
# query_canceled (statement_timeout), deadlock_detected, serialization_failure.
_TRANSIENT_SQLSTATES = frozenset({"55P03", "57014", "40P01", "40001"})
# SQLite's busy errors: the database (SQLITE_BUSY) or a shared-cache table (SQLITE_LOCKED).
_TRANSIENT_MESSAGES = ("database is locked", "database table is locked")


def error_response(status: int, message: str, **headers: str) -> JsonResponse:
    """Return the JSON error body every AG-UI route uses: ``{"error": message}``.

    Each keyword becomes a header, with ``_`` written as ``-`` (``Retry_After="8"``).
    """
    response = JsonResponse({"error": message}, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def binary_size(limit: int) -> str:
    """``limit`` in the largest binary unit it reaches: ``"5 MiB"``, ``"1.5 KiB"``."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if limit >= factor:
            return f"{limit / factor:.1f}".removesuffix(".0") + f" {unit}"
    return f"{limit} bytes"


def describe_size(limit: int) -> str:
    """``limit`` for people, exact and rounded: ``"1024 bytes (1 KiB)"``, ``"100 bytes"``."""
    return f"{limit} bytes ({binary_size(limit)})" if limit >= 1 << 10 else binary_size(limit)


def json_body_limit(max_body_bytes: int | None) -> int:
    """The body cap of a JSON route: ``max_body_bytes``, else ``DATA_UPLOAD_MAX_MEMORY_SIZE``.

    Read at request time, so a changed setting applies at once; ``DEFAULT_MAX_BODY_BYTES`` when
    both are ``None``.
    """
    if max_body_bytes is not None:
        return max_body_bytes
    configured = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return DEFAULT_MAX_BODY_BYTES if configured is None else int(configured)


def declared_length(request: HttpRequest) -> int | None:
    """The request's ``Content-Length``, or ``None`` when it is missing or not a number."""
    raw = request.META.get("CONTENT_LENGTH")
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def body_too_big_response(limit: int, hint: str) -> JsonResponse:
    """The 413 for a body over ``limit`` bytes; ``hint`` tells the caller what to send instead."""
    return error_response(
        413,
        f"The request body is larger than this route's limit of {describe_size(limit)} "
        f"(AGUIServer max_body_bytes, by default DATA_UPLOAD_MAX_MEMORY_SIZE); {hint}",
    )


def is_json_request(request: HttpRequest) -> bool:
    """Whether ``request`` declares ``Content-Type: application/json`` (parameters allowed).

    A cross-site page can send ``text/plain``, form and multipart bodies with the visitor's
    cookies and no preflight, but not ``application/json``; requiring it keeps such requests
    away from the agent even when CSRF checks are off.
    """
    declared = str(request.META.get("CONTENT_TYPE") or "").split(";", 1)[0].strip().lower()
    return declared == "application/json"


def not_json_response() -> JsonResponse:
    """The 415 every JSON route answers to a body that is not declared as JSON."""
    return error_response(
        415, "Send the body as JSON, with the header Content-Type: application/json."
    )


def read_json_body(request: HttpRequest, *, limit: int, too_big: str) -> bytes:
    """The body of an ``application/json`` request; raises the ``Refusal`` refusing it.

    415 when the body is not declared as JSON; 413 when it is over ``limit`` bytes, found by
    reading at most one byte more than the limit (so a chunked body is capped too; a declared
    ``Content-Length`` over it was already refused by the view, unread). ``too_big`` tells the
    caller what to send instead.
    """
    if not is_json_request(request):
        raise Refusal.of(not_json_response())
    # A length declared within the cap is read as declared: ``read(limit + 1)`` allocates the
    # whole cap first (3 ms for a 5 MB body under a 64 MiB cap). A body longer than it declared
    # is read on, to the cap.
    declared = declared_length(request)
    first = limit + 1 if declared is None or declared >= limit else declared + 1
    body = request.read(first)
    if len(body) == first and first <= limit:
        body += request.read(limit + 1 - first)
    if len(body) > limit:
        raise Refusal.of(body_too_big_response(limit, too_big))
    return body


def read_json_object(
    request: HttpRequest,
    *,
    limit: int,
    too_big: str,
    not_object: str,
    not_json: str | None = None,
) -> dict[str, Any]:
    """The body of an ``application/json`` request parsed into a JSON object; raises the
    ``Refusal`` refusing it.

    415 and 413 as ``read_json_body`` (``too_big`` tells the caller what to send instead); 400
    ``NESTED_TOO_DEEPLY`` for a body nested past ``MAX_JSON_DEPTH``; 400 ``not_json``
    for a body that is not JSON (``not_object`` when ``not_json`` is ``None``); 400
    ``not_object`` for JSON that is not an object; 400 naming the first value no store can
    keep (NaN, Infinity, NUL, an unpaired surrogate; ``agui.unstorable``). Each 400 is logged
    as one line (``Refusal.invalid``).
    """
    body = read_json_body(request, limit=limit, too_big=too_big)
    try:
        payload = json.loads(body)
    except RecursionError:
        raise Refusal.invalid(request, NESTED_TOO_DEEPLY) from None
    except (ValueError, UnicodeDecodeError):
        raise Refusal.invalid(request, not_object if not_json is None else not_json) from None
    if nested_too_deeply(payload):
        raise Refusal.invalid(request, NESTED_TOO_DEEPLY)
    if not isinstance(payload, dict):
        raise Refusal.invalid(request, not_object)
    unstorable = unstorable_problem(body) if may_hold_unstorable_values(body) else None
    if unstorable is not None:
        raise Refusal.invalid(request, unstorable)
    return payload


def nested_too_deeply(payload: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the parsed JSON ``payload`` nests arrays and objects more than ``limit`` deep.

    Walks the containers without recursion and stops at the first one past ``limit``.
    """
    stack: list[tuple[Any, int]] = [(payload, 1)] if isinstance(payload, dict | list) else []
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def is_transient_database_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a lock, timeout or outage worth retrying, rather than a broken query.

    SQLite's "database is locked" (and "database table is locked"), PostgreSQL's lock and
    statement timeouts, deadlocks and serialization failures, by SQLSTATE, and a lost or
    refused connection (``persistence.outages.is_database_outage``).
    """
    if is_database_outage(exc):
        return True
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    if code in _TRANSIENT_SQLSTATES:
        return True
    text = str(exc).lower()
    return any(message in text for message in _TRANSIENT_MESSAGES)


@dataclass(frozen=True, kw_only=True)
class _Backend:
    """How one backend's errors are answered: its name in the log, which of its errors are
    worth retrying, the two messages, and the ``Retry-After`` of a retry."""

    name: str
    transient: Callable[[Any], bool]
    busy: str
    failed: str
    retry_after: Callable[[Any], object] = lambda exc: RETRY_AFTER_SECONDS


def _transient_memory_service_error(exc: DRMemoryServiceError) -> bool:
    if isinstance(exc, DRMemoryRateLimitError | DRMemoryUnavailableError):
        return True
    return exc.status_code in (502, 503, 504)


_DATABASE = _Backend(
    name="a database error",
    transient=is_transient_database_error,
    busy=DATABASE_BUSY,
    failed=DATABASE_FAILED,
)
_MEMORY_SERVICE = _Backend(
    name="a Memory Service error",
    transient=_transient_memory_service_error,
    busy=MEMORY_SERVICE_BUSY,
    failed=MEMORY_SERVICE_FAILED,
    # The service's own wait for a 429, else ours.
    retry_after=lambda exc: getattr(exc, "retry_after", None) or RETRY_AFTER_SECONDS,
)

#: The backend errors every route answers as JSON (``backend_error_response``).
BACKEND_ERRORS: Final[tuple[type[Exception], ...]] = (
    DatabaseError,
    InterfaceError,
    DRMemoryServiceError,
    BackendUnavailableError,
    *CACHE_ERRORS,
)


def _outage_response(request: HttpRequest, exc: BackendUnavailableError) -> JsonResponse:
    """503 (507 for a full storage) with ``Retry-After``, logged as one line, no traceback."""
    logger.warning(
        "%s %s met an outage (%s); answered %s so the client retries.",
        request.method,
        logged_path(request),
        exc,
        507 if isinstance(exc, StorageUnavailableError) and exc.full else 503,
    )
    if isinstance(exc, StorageUnavailableError) and exc.full:
        response = error_response(507, STORAGE_FULL, Retry_After=str(RETRY_AFTER_SECONDS))
    else:
        message = BACKEND_UNAVAILABLE.format(backend=exc.backend)
        response = error_response(503, message, Retry_After=str(RETRY_AFTER_SECONDS))
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def backend_error_response(request: HttpRequest, exc: BaseException) -> JsonResponse:
    """The JSON answer to a backend error raised while serving ``request``, logged once.

    A transient error is a 503 with ``Retry-After`` and a ``WARNING``: for the database a lock
    or timeout (``is_transient_database_error``), for the Memory Service an outage, a timeout or
    a rate limit (no response, 429, 502-504; ``Retry-After`` is the service's own for a 429).
    Any other error is a 500 and an ``ERROR``. Both log the exception with its traceback on the
    ``django_pydantic_agent.agui`` logger; the client sees neither. An outage (the database or
    the cache unreachable or restarting, a file storage that refused a write) is a 503 (a 507
    for a full storage) with ``Retry-After``, logged as one ``WARNING`` line, no traceback.
    """
    unavailable = as_unavailable(exc)
    if unavailable is not None:
        return _outage_response(request, unavailable)
    database = isinstance(exc, DatabaseError | InterfaceError)
    backend = _DATABASE if database else _MEMORY_SERVICE
    transient = backend.transient(exc)
    logger.log(
        logging.WARNING if transient else logging.ERROR,
        "%s %s failed with %s%s.",
        request.method,
        logged_path(request),
        backend.name,
        "; answered 503 so the client retries" if transient else "",
        exc_info=exc,
    )
    if transient:
        response = error_response(503, backend.busy, Retry_After=str(backend.retry_after(exc)))
    else:
        response = error_response(500, backend.failed)
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response
