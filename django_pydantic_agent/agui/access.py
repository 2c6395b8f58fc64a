"""The access policy every AG-UI view applies: authentication, authorization, CSRF, throttling.

One ``AccessPolicy`` is built per ``AGUIServer`` and shared by all of its views, so every route
answers the same way. The order is fixed and load-bearing: identify the caller (401), authorize
them (403), and only then look at the HTTP method (405). A route that answered 405 to a stranger
would tell them which optional routes are mounted. CSRF is checked after authentication with
Django's own ``CsrfViewMiddleware`` logic, so a failure is a JSON 403 like every other refusal.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from asgiref.sync import markcoroutinefunction, sync_to_async
from django.db import DatabaseError
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.middleware.csrf import CsrfViewMiddleware

from django_pydantic_agent.agui.http import (
    body_too_big_response,
    database_error_response,
    declared_length,
    error_response,
)
from django_pydantic_agent.agui.ids import is_valid_id
from django_pydantic_agent.persistence import AnonymousOperationError, StoreError, StoreLimitError

__all__ = [
    "AGUIView",
    "AccessPolicy",
    "AuthorizeHook",
    "GetUserHook",
    "Handler",
    "ThrottleHook",
    "call_hook",
    "error_response",
    "is_async_callable",
    "store_refusal",
]

#: ``get_user(request)``: returns the acting user (or ``None`` for "nobody"); sync or async.
GetUserHook: TypeAlias = Callable[[HttpRequest], Any]
#: ``authorize(request) -> bool``: ``False`` refuses with 403; sync or async.
AuthorizeHook: TypeAlias = Callable[[HttpRequest], "bool | Awaitable[bool]"]
#: ``throttle(request) -> None | float``: ``None`` allows, a number of seconds refuses with
#: 429 and that ``Retry-After``; sync or async.
ThrottleHook: TypeAlias = Callable[[HttpRequest], "float | Awaitable[float | None] | None"]

_UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def store_refusal(exc: StoreError, *, store: str) -> JsonResponse:
    """Map a store's deliberate refusal to its JSON answer; nothing was written.

    ``AnonymousOperationError`` is a 403, ``StoreLimitError`` a 413, and any other
    ``StoreError`` a 409. Store messages are written for the caller and name no other owner.
    ``store`` names the kind of store in the 403 text: ``"conversation"`` or ``"attachment"``.
    """
    if isinstance(exc, AnonymousOperationError):
        return error_response(403, f"This agent's {store} store does not serve anonymous visitors.")
    if isinstance(exc, StoreLimitError):
        return error_response(413, str(exc))
    return error_response(409, str(exc))


class _CsrfCheck(CsrfViewMiddleware):
    """Django's CSRF middleware logic, returning the failure reason instead of a page."""

    def _reject(self, request: HttpRequest, reason: str) -> HttpResponse:
        return error_response(403, f"CSRF verification failed: {reason}")


def _no_response(request: HttpRequest) -> HttpResponse:  # pragma: no cover - never called
    raise AssertionError("The CSRF check never calls the next handler.")


def _csrf_failure(request: HttpRequest) -> HttpResponse | None:
    """Run Django's CSRF check on ``request``; return a 403 response, or ``None`` if it passes.

    Synchronous: it may read ``request.POST`` or a database-backed session, so call it off the
    event loop.
    """
    check = _CsrfCheck(_no_response)
    check.process_request(request)  # loads the CSRF cookie (or session) secret
    return check.process_view(request, _no_response, (), {})


def is_async_callable(hook: object) -> bool:
    """Whether calling ``hook`` returns a coroutine: an ``async def`` or async ``__call__``."""
    if asyncio.iscoroutinefunction(hook):
        return True
    # An instance whose class defines ``async def __call__`` (inherited ones included).
    return asyncio.iscoroutinefunction(getattr(type(hook), "__call__", None))  # noqa: B004


async def call_hook(hook: Callable[[HttpRequest], Any], request: HttpRequest) -> Any:
    """Await an async hook, or run a sync one in a worker thread (it may query)."""
    if is_async_callable(hook):
        return await hook(request)
    result = await sync_to_async(hook)(request)
    if asyncio.iscoroutine(result):  # a sync callable returning a coroutine
        return await result
    return result


async def _resolve_user(request: HttpRequest) -> Any:
    """The user ``AuthenticationMiddleware`` attached, resolved without blocking the loop."""
    auser = getattr(request, "auser", None)
    if auser is None:
        return _anonymous()
    return await auser()


def _anonymous() -> Any:
    # Imported late: ``django.contrib.auth.models`` needs the app registry, and importing
    # this package must not.
    from django.contrib.auth.models import AnonymousUser

    return AnonymousUser()


@dataclass(frozen=True, kw_only=True)
class AccessPolicy:
    """Who may call an ``AGUIServer``'s views, and how often.

    ``require_authenticated`` refuses anonymous callers with 401. ``get_user`` replaces the
    session user (for header or token authentication); its result, or ``AnonymousUser`` for
    ``None``, becomes ``request.user``. ``authorize`` runs once the user is known; a falsy
    result is a 403. ``csrf_exempt=False`` enforces Django's CSRF check on unsafe methods.
    ``throttle`` is consulted by the run and upload views only.
    """

    require_authenticated: bool
    get_user: GetUserHook | None
    authorize: AuthorizeHook | None
    csrf_exempt: bool
    throttle: ThrottleHook | None

    async def authenticate(self, request: HttpRequest) -> JsonResponse | None:
        """Set ``request.user`` and return a 401/403 response, or ``None`` when allowed."""
        if self.get_user is not None:
            user = await call_hook(self.get_user, request)
            request.user = _anonymous() if user is None else user
        else:
            request.user = await _resolve_user(request)
        if self.require_authenticated and not request.user.is_authenticated:
            return error_response(401, "Authentication required: log in, then retry.")
        if self.authorize is not None and not await call_hook(self.authorize, request):
            return error_response(403, "You are not allowed to use this agent endpoint.")
        return None

    def csrf_failure(self, request: HttpRequest) -> HttpResponse | None:
        """Return a JSON 403 when CSRF is enforced and ``request`` fails it, else ``None``.

        Synchronous (it may read ``request.POST`` or the session): call it off the event loop.
        Safe methods and exempt servers always pass.
        """
        if self.csrf_exempt or request.method not in _UNSAFE_METHODS:
            return None
        return _csrf_failure(request)

    async def check_throttle(self, request: HttpRequest) -> JsonResponse | None:
        """Return a 429 with ``Retry-After`` when the throttle refuses ``request``."""
        if self.throttle is None:
            return None
        wait = await call_hook(self.throttle, request)
        if wait is None:
            return None
        seconds = max(1, math.ceil(float(wait)))
        return error_response(
            429,
            f"Too many requests: retry in {seconds} second{'s' if seconds != 1 else ''}.",
            Retry_After=str(seconds),
        )


Handler: TypeAlias = Callable[..., Awaitable[HttpResponseBase]]


class AGUIView:
    """One mounted route of an ``AGUIServer``: the access policy, then a handler per method.

    An async callable (Django awaits it). ``agui_server`` points back at the server, so system
    checks can find the stores a project mounts by walking the URL resolver. ``csrf_exempt`` is
    always true for Django's middleware: the policy runs the same CSRF check itself, after
    authentication, when the server enforces it (``agui_csrf_enforced``).

    ``max_body_bytes`` (called per request) caps the body of a JSON route: a declared
    ``Content-Length`` over it is a 413 before anything reads the body. The upload route leaves
    it unset and checks its own cap. A ``DatabaseError`` raised before a response exists is a
    JSON 503 (lock or timeout, with ``Retry-After``) or 500, logged once. Every answer that is not
    a stream and sets no ``Cache-Control`` gets ``private, no-store``: it is one caller's data.
    """

    csrf_exempt = True
    #: Set on the upload route: the file cap ``BodyLimitMiddleware`` enforces for it.
    agui_upload_max_bytes: int | None = None

    def __init__(
        self,
        *,
        server: Any,
        policy: AccessPolicy,
        handlers: Mapping[str, Handler],
        check_csrf: bool = True,
        not_found: str = "Not found.",
        max_body_bytes: Callable[[], int] | None = None,
        too_big: str = "send a smaller body.",
    ) -> None:
        self.agui_server = server
        self.agui_csrf_enforced = not policy.csrf_exempt
        self._policy = policy
        self._handlers = dict(handlers)
        self._check_csrf = check_csrf
        self._not_found = not_found
        self._max_body_bytes = max_body_bytes
        self._too_big = too_big
        self._allow = ", ".join(sorted(self._handlers))
        markcoroutinefunction(self)

    @property
    def allowed_methods(self) -> tuple[str, ...]:
        """The HTTP methods this route answers, sorted."""
        return tuple(sorted(self._handlers))

    @property
    def agui_max_body_bytes(self) -> int | None:
        """The body cap of this JSON route now, or ``None`` (the upload route checks its own)."""
        return None if self._max_body_bytes is None else self._max_body_bytes()

    async def __call__(self, request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        """Authenticate, then dispatch on the method: 401, 403, 405, 413, CSRF 403, or the handler.

        An id in the URL (``thread_id``, ``attachment_id``) outside the id alphabet of
        ``ids.py`` names nothing that can exist: 404, before the handler or a store sees it.
        """
        try:
            response = await self._dispatch(request, **kwargs)
        except DatabaseError as exc:
            response = database_error_response(request, exc)
        if not isinstance(response, StreamingHttpResponse) and not response.has_header(
            "Cache-Control"
        ):
            response["Cache-Control"] = "private, no-store"
        return response

    async def _dispatch(self, request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        refusal = await self._policy.authenticate(request)
        if refusal is not None:
            return refusal
        handler = self._handlers.get(request.method or "")
        if handler is None:
            return error_response(
                405,
                f"The method {request.method!r} is not allowed on this route; use {self._allow}.",
                Allow=self._allow,
            )
        limit = self.agui_max_body_bytes
        declared = declared_length(request)
        if limit is not None and declared is not None and declared > limit:
            return body_too_big_response(limit, self._too_big)
        if self._check_csrf and not self._policy.csrf_exempt and request.method in _UNSAFE_METHODS:
            csrf_refusal = await sync_to_async(self._policy.csrf_failure)(request)
            if csrf_refusal is not None:
                return csrf_refusal
        if not all(is_valid_id(value) for value in kwargs.values()):
            return error_response(404, self._not_found)
        return await handler(request, **kwargs)
