"""Views serving the Memory Service wire contract from the emulator's models.

Each route is a plain sync view built by :func:`_route`, which counts the request, applies any
armed fault, authenticates the bearer token, dispatches on the HTTP method and turns
:class:`~django_pydantic_agent.contrib.memory_service_emulator.protocol.HTTPError` into the
service's JSON error bodies. Views never answer a redirect or a 500 for bad input: every
failure is a JSON object with ``detail``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from django.core.exceptions import TooManyFieldsSent
from django.db import connections, router
from django.http import HttpRequest, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.views.decorators.common import no_append_slash
from django.views.decorators.csrf import csrf_exempt

from django_pydantic_agent.contrib.memory_service_emulator import events, resources
from django_pydantic_agent.contrib.memory_service_emulator.faults import (
    Fault,
    fault_injector,
    request_counter,
)
from django_pydantic_agent.contrib.memory_service_emulator.models import EmulatedSession
from django_pydantic_agent.contrib.memory_service_emulator.protocol import (
    HTTPError,
    Principal,
    authenticate,
    not_found_error,
)

Handler = Callable[..., HttpResponseBase]


# --------------------------------------------------------------------------- faults


def _fault_response(fault: Fault, request: HttpRequest) -> HttpResponseBase:
    if fault.kind == "rate_limit":
        headers = {} if fault.retry_after is None else {"Retry-After": fault.retry_after}
        return HTTPError(
            429,
            {"detail": "Rate limit exceeded (injected fault); retry later."},
            headers,
        ).response()
    if fault.kind == "unavailable":
        return HTTPError(
            503, {"detail": "Service unavailable (injected fault); retry later."}
        ).response()
    return _drop_connection(request)


def _raw_socket(request: HttpRequest) -> socket.socket | None:
    """The client socket behind a WSGI request, when the server exposes it; else ``None``.

    gunicorn publishes it as ``gunicorn.socket``; Django's development and live servers hide it
    under ``wsgi.input`` (LimitedStream -> BufferedReader -> SocketIO -> socket).
    """
    environ: Mapping[str, Any] = getattr(request, "environ", {})
    candidate: Any = environ.get("gunicorn.socket") or environ.get("wsgi.input")
    for _ in range(8):
        if isinstance(candidate, socket.socket):
            return candidate
        inner = None
        for attribute in ("_sock", "raw", "stream", "buffer"):
            inner = getattr(candidate, attribute, None)
            if inner is not None:
                break
        else:
            # Django's LimitedStream keeps only the bound ``read`` of the stream it wraps.
            inner = getattr(getattr(candidate, "_read", None), "__self__", None)
        if inner is None:
            return None
        candidate = inner
    return None  # pragma: no cover - deeper wrappers than any known server


def _drop_connection(request: HttpRequest) -> HttpResponseBase:
    """Close the connection instead of answering.

    With a reachable socket (WSGI servers) it is shut down before a byte is written, so the
    client sees a connection closed without a response. Otherwise (ASGI) the status line goes
    out and the body fails, so the server closes the connection mid-response.
    """
    sock = _raw_socket(request)
    if sock is not None:
        with contextlib.suppress(OSError):  # the peer may already have gone away
            sock.shutdown(socket.SHUT_RDWR)
    message = "connection dropped by the memory service emulator (injected fault)"

    def fail_sync() -> Iterator[bytes]:
        raise ConnectionResetError(message)
        yield b""  # pragma: no cover - makes this a generator

    async def fail_async() -> AsyncIterator[bytes]:
        raise ConnectionResetError(message)
        yield b""  # pragma: no cover - makes this a generator

    content = fail_sync() if hasattr(request, "environ") else fail_async()
    return StreamingHttpResponse(content, status=503, content_type="application/json")


# --------------------------------------------------------------------------- dispatch


_SQLITE_LOCK = threading.Lock()


def _database_guard() -> contextlib.AbstractContextManager[object]:
    """Serialize emulator requests in this process when the database is SQLite.

    SQLite allows one writer at a time and, for shared in-memory databases (the test runner's),
    fails at once with "database table is locked" instead of waiting; a process-wide lock turns
    that into queuing. Other databases rely on row locks and conditional updates instead.
    """
    alias = router.db_for_write(EmulatedSession)
    if connections[alias].vendor == "sqlite":
        return _SQLITE_LOCK
    return contextlib.nullcontext()


def _route(
    name: str, handlers: Mapping[str, Handler], *, requires_auth: bool = True
) -> Callable[..., HttpResponseBase]:
    """Build the view for one route: count, inject faults, authenticate, dispatch by method.

    Views are CSRF-exempt (callers authenticate with a bearer token, never a cookie) and marked
    ``no_append_slash``, so ``CommonMiddleware`` never redirects to them: the service answers a
    path without its trailing slash with 404.
    """
    allowed = ", ".join(sorted(handlers))

    @no_append_slash
    @csrf_exempt
    def view(request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        method = (request.method or "GET").upper()
        request_counter.record(method, name)
        delay, fault = fault_injector.pick(method, name)
        if delay:
            time.sleep(delay)
        if fault is not None and not fault.after_processing:
            if fault.kind == "timeout":
                time.sleep(fault.seconds)
            return _fault_response(fault, request)
        response = _serve(request, handlers, allowed, requires_auth, kwargs)
        if fault is not None:  # the answer is lost after the request was carried out
            response.close()
            if fault.kind == "timeout":
                time.sleep(fault.seconds)
            return _fault_response(fault, request)
        return response

    view.__name__ = view.__qualname__ = name.replace("-", "_")
    return view


def _serve(
    request: HttpRequest,
    handlers: Mapping[str, Handler],
    allowed: str,
    requires_auth: bool,
    kwargs: Mapping[str, Any],
) -> HttpResponseBase:
    """Authenticate, dispatch on the method and turn ``HTTPError`` into its JSON response."""
    method = (request.method or "GET").upper()
    try:
        principal = authenticate(request) if requires_auth else Principal(user_id="")
        handler = handlers.get(method)
        if handler is None:
            raise HTTPError(
                405,
                {"detail": f"Method {method!r} is not allowed here; use one of: {allowed}."},
                {"Allow": allowed},
            )
        with _database_guard():
            return handler(request, principal, **kwargs)
    except TooManyFieldsSent:
        return HTTPError(
            400,
            {
                "detail": "The query string has more parameters than "
                "DATA_UPLOAD_MAX_NUMBER_FIELDS allows; send fewer or raise that setting."
            },
        ).response()
    except HTTPError as exc:
        return exc.response()


def _unknown_route(request: HttpRequest, principal: Principal, **kwargs: Any) -> HttpResponseBase:
    raise not_found_error(
        f"No memory service route matches {request.path!r}; routes end with a slash, "
        "e.g. '.../memory/<space id>/sessions/'."
    )


_ALL_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")

space_list = _route("space-list", {"GET": resources.list_spaces})
space_create = _route("space-create", {"POST": resources.create_space})
space_detail = _route(
    "space-detail",
    {"GET": resources.get_space, "PATCH": resources.patch_space, "DELETE": resources.delete_space},
)
session_list = _route(
    "session-list", {"GET": resources.list_sessions, "POST": resources.create_session}
)
session_detail = _route(
    "session-detail",
    {
        "GET": resources.get_session,
        "PATCH": resources.patch_session,
        "DELETE": resources.delete_session,
    },
)
event_list = _route("event-list", {"GET": events.list_events, "POST": events.create_event})
event_batch = _route("event-batch", {"POST": events.create_events, "PATCH": events.patch_events})
event_detail = _route("event-detail", {"PATCH": events.patch_event, "DELETE": events.delete_event})
not_found = _route("not-found", dict.fromkeys(_ALL_METHODS, _unknown_route), requires_auth=False)
