"""``AGUIView``: one mounted route of an ``AGUIServer``: the access policy, then its handlers.

``Route`` is one row of a server's route table (DRF routers' habit): each handler class states
its rows (``routes()``), and the one table drives both the views the server builds and its
``urlpatterns``.

Every route answers the same way whatever goes wrong before its handler runs: 401 or 403 from
the access policy, then 405 for a method the route does not serve, 413 for a declared body over
the route's cap, the CSRF 403, and 404 for an id outside the id alphabet (``ids.py``). The view
holds the handlers it was given and nothing else of the server's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from asgiref.sync import markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

from django_pydantic_agent.agui.access import UNSAFE_METHODS, AccessPolicy
from django_pydantic_agent.agui.errors import Refusal, StoreKind
from django_pydantic_agent.agui.http import (
    BACKEND_ERRORS,
    backend_error_response,
    body_too_big_response,
    declared_length,
    error_response,
)
from django_pydantic_agent.agui.ids import is_valid_id
from django_pydantic_agent.persistence import StoreError

__all__ = ["ABANDONED_HOOK", "AGUIView", "Handler", "Route"]

logger = logging.getLogger("django_pydantic_agent.agui")

#: A route handler: ``await handler(request, **url_kwargs)`` returns the response.
Handler: TypeAlias = Callable[..., Awaitable[HttpResponseBase]]

#: The attribute of a response naming what to call once its request is over, whether the
#: response was sent or not (the run endpoint sets it under ``on_disconnect="cancel"``: cancel
#: the run, a no-op once it has ended). A client that leaves before the response is sent makes
#: Django drop it unread: in the view, in a middleware, or while its headers go out.
ABANDONED_HOOK = "agui_abandoned"


@dataclass(frozen=True, kw_only=True)
class Route:
    """One route of an ``AGUIServer``: its URL pattern and name, a handler per method, and how
    its view answers before a handler runs.

    ``mounted`` says whether ``urlpatterns`` includes it: the thread routes of a Null store
    exist (a project may mount them itself) but are not mounted. The server reads the route's
    view back as ``<name>_view`` (``run-cancel``: ``run_cancel_view``).
    """

    path: str
    name: str
    handlers: Mapping[str, Handler]
    #: The 404 message of an id outside the id alphabet.
    not_found: str = "Not found."
    #: What the 413 of a declared body over the cap asks the caller to send instead.
    too_big: str = "send a smaller body."
    #: Whether the view runs the CSRF check (the upload route runs its own).
    check_csrf: bool = True
    #: Whether the JSON body cap applies (the upload route checks its own file cap).
    capped: bool = True
    #: The upload route's file cap, for ``BodyLimitMiddleware``.
    upload_max_bytes: int | None = None
    mounted: bool = True
    #: Which store a ``StoreError`` reaching the view refused (named in an anonymous 403).
    store: StoreKind = "conversation"

    @property
    def attribute(self) -> str:
        """The server attribute holding this route's view: ``<name>_view``."""
        return f"{self.name.replace('-', '_')}_view"


def _when_over(response: HttpResponseBase) -> None:
    """Run ``response``'s hook (if any) when the task serving the request ends.

    That task (the server's, or Django 5.2's own) ends once the response was sent, or once
    Django dropped it because the client left: in a middleware after the view returned, or
    while its headers went out. Its frames were then never read, so nothing else would.
    """
    hook = getattr(response, ABANDONED_HOOK, None)
    task = asyncio.current_task()
    if callable(hook) and task is not None:
        task.add_done_callback(lambda _task: hook())


def _abandoned(task: asyncio.Task[HttpResponseBase]) -> None:
    """Done-callback of a write whose client left: log its failure, or run its hook.

    A failure is one ``WARNING`` line: the likeliest is reading a body Django has already
    closed (the client left before the view read it), which is the client's doing.
    """
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        logger.warning("A request whose client went away failed: %s: %s", type(exc).__name__, exc)
        return
    hook = getattr(task.result(), ABANDONED_HOOK, None)
    if callable(hook):
        hook()


async def _carried_out(work: Awaitable[HttpResponseBase]) -> HttpResponseBase:
    """Await ``work`` to its end even if the request is cancelled meanwhile.

    Django's ASGI handler cancels the view when the client disconnects before the response
    starts. A write received in full (a run, a rename, a delete) must then not stop halfway:
    a run claimed but never started would stay ``running``, and a run the client sent would
    be lost. So it goes on in its own task; the cancellation is re-raised to Django.
    """
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.add_done_callback(_abandoned)
        raise


class AGUIView:
    """One mounted route of an ``AGUIServer``: the access policy, then a handler per method.

    An async callable (Django awaits it). ``agui_server`` is set by the server that mounts the
    view (``None`` until then), so system checks can find the stores a project mounts by walking
    the URL resolver; the view itself never reads it. ``csrf_exempt`` is
    always true for Django's middleware: the policy runs the same CSRF check itself, after
    authentication, when the server enforces it (``agui_csrf_enforced``).

    ``max_body_bytes`` (called per request) caps the body of a JSON route: a declared
    ``Content-Length`` over it is a 413 before anything reads the body. The upload route leaves
    it unset and checks its own cap. A ``DatabaseError`` raised before a response exists is a
    JSON 503 (lock or timeout, with ``Retry-After``) or 500, logged once; so is a Memory Service
    error (503 for an outage, timeout or rate limit). Every answer that is not
    a stream and sets no ``Cache-Control`` gets ``private, no-store``: it is one caller's data.
    ``on_request()``, when given, is called first on every request, before authentication
    (the server starts its run sweeper with it); it must be cheap and must not raise.
    """

    csrf_exempt = True
    #: Set on the upload route: the file cap ``BodyLimitMiddleware`` enforces for it.
    agui_upload_max_bytes: int | None = None
    #: The ``AGUIServer`` that mounted this view (for system checks and pages), or ``None``.
    agui_server: Any = None

    def __init__(
        self,
        *,
        policy: AccessPolicy,
        handlers: Mapping[str, Handler],
        check_csrf: bool = True,
        not_found: str = "Not found.",
        max_body_bytes: Callable[[], int] | None = None,
        too_big: str = "send a smaller body.",
        on_request: Callable[[], object] | None = None,
        upload_max_bytes: int | None = None,
        store: StoreKind = "conversation",
    ) -> None:
        self.agui_csrf_enforced = policy.csrf_exempt is False
        self._store: StoreKind = store
        if upload_max_bytes is not None:
            self.agui_upload_max_bytes = upload_max_bytes
        self._policy = policy
        self._handlers = dict(handlers)
        self._check_csrf = check_csrf
        self._not_found = not_found
        self._max_body_bytes = max_body_bytes
        self._too_big = too_big
        self._on_request = on_request
        self._allow = ", ".join(sorted(self._handlers))
        markcoroutinefunction(self)

    @classmethod
    def for_route(
        cls,
        route: Route,
        *,
        policy: AccessPolicy,
        body_limit: Callable[[], int],
        on_request: Callable[[], object] | None = None,
    ) -> AGUIView:
        """The view serving ``route`` under ``policy``, capped by ``body_limit`` when the route
        is ``capped``."""
        return cls(
            policy=policy,
            handlers=route.handlers,
            check_csrf=route.check_csrf,
            not_found=route.not_found,
            max_body_bytes=body_limit if route.capped else None,
            too_big=route.too_big,
            on_request=on_request,
            upload_max_bytes=route.upload_max_bytes,
            store=route.store,
        )

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
        if self._on_request is not None:
            self._on_request()
        if request.method not in UNSAFE_METHODS:
            return await self._respond(request, **kwargs)
        response = await _carried_out(self._respond(request, **kwargs))
        # Under WSGI, the task ends as the view returns, before the response is read.
        if getattr(request, "scope", None) is not None:
            _when_over(response)
        return response

    async def _respond(self, request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        # The one map from what a handler raises to what the client is answered.
        try:
            response = await self._dispatch(request, **kwargs)
        except Refusal as refusal:
            response = refusal.response()
        except StoreError as exc:
            response = Refusal.of_store(exc, store=self._store).response()
        except BACKEND_ERRORS as exc:
            response = backend_error_response(request, exc)
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
        if (
            self._check_csrf
            and self._policy.csrf_exempt is False
            and request.method in UNSAFE_METHODS
        ):
            csrf_refusal = await sync_to_async(self._policy.csrf_failure)(request)
            if csrf_refusal is not None:
                return csrf_refusal
        if not all(is_valid_id(value) for value in kwargs.values()):
            return error_response(404, self._not_found)
        return await handler(request, **kwargs)
