"""``DRMemoryServiceClient``: the async HTTP transport for the Agentic Memory Service.

An instance is cheap: a resolved base URL and a headers dict carrying one principal's bearer
token. The connection pool is an ``httpx.AsyncClient``, either owned (built here, closed by
:meth:`DRMemoryServiceClient.aclose`) or injected (shared, never closed here). Identity travels
only in each instance's headers: requests go out with ``auth=None``, no ``Cookie`` header and no
redirect following, so one identity-free pool serves any number of principals.
"""

from __future__ import annotations

import email.utils
import http.cookiejar
import math
import os
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import httpx

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

__all__ = ["DRMemoryServiceClient"]

ENDPOINT_ENV = "DATAROBOT_ENDPOINT"
TOKEN_ENV = "DATAROBOT_API_TOKEN"
DEFAULT_TIMEOUT_SECONDS = 30.0

_SESSION_VERSION_PHRASE = "session version mismatch"
_EVENT_VERSION_PHRASE = "patch of incorrect version of event"


def _non_storing_cookie_jar() -> http.cookiejar.CookieJar:
    """A cookie jar whose policy accepts no domain, so ``Set-Cookie`` is never stored."""
    return http.cookiejar.CookieJar(
        policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]),
    )


def _parse_retry_after(value: str | None, *, now: datetime | None = None) -> int | None:
    """Parse a ``Retry-After`` header value into whole seconds.

    Accepts delta-seconds (ASCII digits, surrounding whitespace ignored) and an HTTP-date
    (seconds until that instant, rounded up, never negative; a naive date counts as UTC).
    Returns ``None`` for a missing, empty or invalid value (signs, decimals, underscores,
    non-ASCII digits, unparseable or overflowing dates).
    """
    if value is None:
        return None
    stripped = value.strip()
    if not stripped:
        return None
    if stripped.isascii() and stripped.isdigit():
        try:
            return int(stripped)
        except ValueError:  # longer than int() accepts from a string
            return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = now if now is not None else datetime.now(UTC)
    try:
        delta = (when - current).total_seconds()
    except OverflowError:  # pragma: no cover - datetime arithmetic stays in range in practice
        return None
    return max(0, math.ceil(delta))


def json_object(response: httpx.Response) -> dict[str, Any]:
    """The JSON object body of a successful response.

    Raises:
        DRMemoryServiceError: If the body is not a JSON object (the endpoint is probably not a
            Memory Service, e.g. a proxy's HTML page), with the response's status code.
    """
    try:
        parsed: Any = response.json()
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        request = response.request
        raise DRMemoryServiceError(
            f"The Memory Service answered {response.status_code} to {request.method} "
            f"{request.url} with a body that is not a JSON object ({response.text[:80]!r}); "
            "check that the endpoint points at the Memory Service API.",
            response.status_code,
        )
    return parsed


def _error_detail(response: httpx.Response) -> tuple[str, dict[str, Any]]:
    """Extract ``(detail, payload)`` from an error response as the wire contract describes."""
    try:
        parsed: Any = response.json()
    except ValueError:
        parsed = None
    payload: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
    raw = payload.get("detail")
    if isinstance(raw, str):
        return raw, payload
    if isinstance(raw, list) and raw and isinstance(raw[0], dict):
        msg = raw[0].get("msg")
        return (str(msg) if msg is not None else response.text), payload
    if "message" in payload:
        return str(payload["message"]), payload
    return (response.text or "Unknown error"), payload


def _raise_for_status(response: httpx.Response) -> None:
    """Raise the typed ``DRMemory*Error`` for a response with status >= 400."""
    status = response.status_code
    detail, payload = _error_detail(response)
    request = response.request
    message = f"The Memory Service answered {status} to {request.method} {request.url}: {detail}"
    lowered = detail.lower()
    if status == 400:
        raise DRMemoryBadRequestError(detail, status, payload, message=message)
    if status == 404:
        raise DRMemoryNotFoundError(detail, status, payload, message=message)
    if status == 409:
        existing = payload.get("existingSessionId") or payload.get("existingMemorySpaceId")
        if "DeduplicationConflict" in str(payload.get("errorName", "")) or existing is not None:
            location = (
                payload.get("existingSessionUrl")
                or payload.get("existingMemorySpaceUrl")
                or response.headers.get("Location")
            )
            raise DRMemoryConflictError(
                detail,
                status,
                payload,
                existing_id=str(existing) if existing else None,
                location=str(location) if location else None,
                message=message,
            )
        if _SESSION_VERSION_PHRASE in lowered:
            raise DRMemoryVersionConflictError(detail, status, payload, message=message)
        raise DRMemoryServiceError(detail, status, payload, message=message)
    if status == 422:
        if _EVENT_VERSION_PHRASE in lowered:
            raise DRMemoryVersionConflictError(detail, status, payload, message=message)
        raise DRMemoryValidationError(detail, status, payload, message=message)
    if status == 429:
        retry_after = _parse_retry_after(response.headers.get("Retry-After"))
        hint = (
            f" Retry after {retry_after} seconds."
            if retry_after is not None
            else " No Retry-After was sent: waiting will not help, free data or raise the limit."
        )
        raise DRMemoryRateLimitError(
            detail, status, payload, retry_after=retry_after, message=message + hint
        )
    raise DRMemoryServiceError(detail, status, payload, message=message)


class DRMemoryServiceClient:
    """Async client for the Agentic Memory Service REST API.

    Args:
        endpoint: API endpoint ending in ``/api/v2``; defaults to ``$DATAROBOT_ENDPOINT``.
        api_token: Bearer token of the principal; defaults to ``$DATAROBOT_API_TOKEN``.
            Multi-principal applications pass each user's token explicitly.
        base_path: Mount path of the service under the endpoint (``"memory"``).
        http_client: A shared ``httpx.AsyncClient`` to send through. The caller owns it and
            :meth:`aclose` leaves it open. Keep it identity-free (no ``auth``); this client
            sends no cookies and follows no redirects whatever the pool is configured with.
        timeout: Per-request timeout in seconds for an owned pool; ignored when
            ``http_client`` is given (configure the injected pool instead).

    Raises:
        ValueError: If no endpoint or token is given or found in the environment, the
            endpoint is not an http(s) URL, the token holds characters no bearer token has,
            or ``timeout`` is not positive.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        api_token: str | None = None,
        *,
        base_path: str = "memory",
        http_client: httpx.AsyncClient | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        resolved_endpoint = endpoint if endpoint is not None else os.environ.get(ENDPOINT_ENV)
        if not resolved_endpoint or not resolved_endpoint.strip("/"):
            raise ValueError(
                f"No Memory Service endpoint was configured (endpoint={endpoint!r}); pass "
                f"endpoint='https://<host>/api/v2' or set the {ENDPOINT_ENV} environment "
                "variable."
            )
        token = api_token if api_token is not None else os.environ.get(TOKEN_ENV)
        if not token:
            raise ValueError(
                "No Memory Service API token was configured; pass api_token=... or set the "
                f"{TOKEN_ENV} environment variable."
            )
        if any(ch.isspace() or not ch.isprintable() or not ch.isascii() for ch in token):
            raise ValueError(
                "The Memory Service API token contains whitespace, control or non-ASCII "
                "characters, which no bearer token has; pass the token exactly as issued."
            )
        trimmed = resolved_endpoint.rstrip("/")
        if httpx.URL(trimmed).scheme not in ("http", "https"):
            raise ValueError(
                f"The Memory Service endpoint {resolved_endpoint!r} is not an http(s) URL; pass "
                "an absolute URL such as 'https://app.datarobot.com/api/v2'."
            )
        if http_client is None and not timeout > 0:
            raise ValueError(
                f"timeout={timeout!r} is not a positive number of seconds; pass e.g. 30.0."
            )
        self._base_url = trimmed + "/" + base_path.strip("/")
        self._headers = {
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self._owns_http = http_client is None
        self._http = (
            http_client
            if http_client is not None
            else httpx.AsyncClient(timeout=timeout, cookies=_non_storing_cookie_jar())
        )

    @property
    def base_url(self) -> str:
        """The resolved service base URL, ``<endpoint>/<base_path>`` without a trailing slash."""
        return self._base_url

    def __repr__(self) -> str:
        return f"DRMemoryServiceClient(base_url={self._base_url!r})"

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        extra_headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """Send one request and return the response when its status is below 400.

        ``path`` is relative to :attr:`base_url` and must end with ``/`` (the service does not
        redirect). ``json=None`` sends no body.

        Raises:
            DRMemoryBadRequestError: 400.
            DRMemoryNotFoundError: 404.
            DRMemoryConflictError: 409 naming an existing resource (deduplication conflict).
            DRMemoryVersionConflictError: 409 ``Session version mismatch`` or 422
                ``Patch of incorrect version of event``.
            DRMemoryValidationError: any other 422.
            DRMemoryRateLimitError: 429, with ``retry_after`` from ``Retry-After``.
            DRMemoryUnavailableError: no response (timeout or transport failure).
            DRMemoryServiceError: any other status >= 400.
        """
        url = self._base_url.rstrip("/") + "/" + path.lstrip("/")
        headers = dict(self._headers)
        if extra_headers:
            headers.update(extra_headers)
        request = self._http.build_request(method, url, params=params, json=json, headers=headers)
        # The pool may be shared by many principals: never replay a cookie it may have stored.
        if "Cookie" in request.headers:
            del request.headers["Cookie"]
        try:
            response = await self._http.send(request, auth=None, follow_redirects=False)
        except httpx.TimeoutException as exc:
            raise DRMemoryUnavailableError(
                f"The Memory Service request {method} {url} timed out ({type(exc).__name__}); "
                "the service may be overloaded or unreachable, retry later or raise the timeout.",
            ) from exc
        except httpx.TransportError as exc:
            raise DRMemoryUnavailableError(
                f"The Memory Service at {url} is unreachable ({type(exc).__name__}: {exc}); "
                "check the endpoint and that the service is running.",
            ) from exc
        if response.status_code >= 400:
            _raise_for_status(response)
        return response

    async def aclose(self) -> None:
        """Close the connection pool if this instance created it; an injected pool stays open."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
