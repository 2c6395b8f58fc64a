"""The access policy every AG-UI view applies: authentication, authorization, CSRF, throttling.

One ``AccessPolicy`` is built per ``AGUIServer`` and shared by all of its views (``views.py``),
so every route answers the same way. The order is fixed and load-bearing: identify the caller
(401), authorize them (403), and only then look at the HTTP method (405). A route that answered
405 to a stranger would tell them which optional routes are mounted. CSRF is checked after
authentication with Django's own ``CsrfViewMiddleware`` logic, so a failure is a JSON 403 like
every other refusal.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware

from django_pydantic_agent.agui.http import error_response
from django_pydantic_agent.agui.options import check_callable, check_flag

__all__ = [
    "UNSAFE_METHODS",
    "AccessPolicy",
    "AuthorizeHook",
    "GetUserHook",
    "ThrottleHook",
    "call_hook",
    "error_response",
    "is_async_callable",
]

#: ``get_user(request)``: returns the acting user (or ``None`` for "nobody"); sync or async.
GetUserHook: TypeAlias = Callable[[HttpRequest], Any]
#: ``authorize(request) -> bool``: ``False`` refuses with 403; sync or async.
AuthorizeHook: TypeAlias = Callable[[HttpRequest], "bool | Awaitable[bool]"]
#: ``throttle(request) -> None | float``: ``None`` allows, a number of seconds refuses with
#: 429 and that ``Retry-After``; sync or async.
ThrottleHook: TypeAlias = Callable[[HttpRequest], "float | Awaitable[float | None] | None"]

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


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
    """Who may call an ``AGUIServer``'s views, and how often (``AGUIServer(access=...)``).

    ``require_authenticated`` refuses anonymous callers with 401. ``get_user`` replaces the
    session user (for header or token authentication); its result, or ``AnonymousUser`` for
    ``None``, becomes ``request.user``. ``authorize`` runs once the user is known; a falsy
    result is a 403. ``csrf_exempt=False`` enforces Django's CSRF check on unsafe methods;
    ``None`` (unstated) exempts, and the server warns when it authenticates with cookies.
    ``throttle`` is consulted by the run and upload views only. A hook that is not callable is
    a ``TypeError``.
    """

    require_authenticated: bool = True
    get_user: GetUserHook | None = None
    authorize: AuthorizeHook | None = None
    csrf_exempt: bool | None = None
    throttle: ThrottleHook | None = None

    def __post_init__(self) -> None:
        check_flag("require_authenticated", self.require_authenticated)
        for name in ("get_user", "authorize", "throttle"):
            check_callable(name, getattr(self, name))
        if self.csrf_exempt is not None and not isinstance(self.csrf_exempt, bool):
            raise TypeError(
                f"csrf_exempt={self.csrf_exempt!r} must be True, False or None (unstated)."
            )

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
        Safe methods and exempt servers (``csrf_exempt`` ``True`` or unstated) always pass.
        """
        if self.csrf_exempt is not False or request.method not in UNSAFE_METHODS:
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
