"""``BodyLimitMiddleware``: refuse oversized request bodies before Django's ASGI handler reads them.

Django's ``ASGIHandler`` reads the *whole* request body into a temporary file before any
middleware or view runs, so under ASGI a view can only refuse a body that has already been
received and spooled. This ASGI wrapper sits in front of Django. For a request to an
``AGUIServer`` route (any method) it looks up that route's cap: the upload route's
``AttachmentOptions.max_bytes`` plus the multipart envelope, every other route the server's
JSON body cap (``MountOptions.max_body_bytes``, by default ``DATA_UPLOAD_MAX_MEMORY_SIZE``).
Requests to other routes get the wrapper's own ``max_body_bytes``, if set. A ``Content-Length``
over the cap is refused at once, and a chunked body is cut off as soon as it passes the cap,
answering ``413`` either way.
``UploadLimitMiddleware`` is the same class under its first name.

It runs before authentication (there is no user yet), so the only thing it tells a stranger is
that a route exists at a path they already sent an oversized body to.

It also answers the ASGI ``lifespan`` protocol, which Django's handler does not speak
(``drain.lifespan``): the mounts' sweepers start with the process, and a shutdown (``SIGTERM``)
drains the worker's runs. ``lifespan=False`` passes lifespan scopes to the wrapped application.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.urls import Resolver404, resolve

from django_pydantic_agent.agui.attachments import MULTIPART_OVERHEAD_BYTES, UPLOAD_LIMIT_SCOPE_KEY
from django_pydantic_agent.agui.drain import lifespan as answer_lifespan
from django_pydantic_agent.agui.http import describe_size

__all__ = ["BodyLimitMiddleware", "UploadLimitMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _resolved_view(scope: Scope) -> Any:
    """The view ``scope``'s path resolves to in ``ROOT_URLCONF``, or ``None``."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    try:
        return resolve(path or "/").func
    except Resolver404:
        return None


def _route_limit(scope: Scope, default: int | None) -> tuple[int, bool] | None:
    """``(cap, is_upload)`` for the request ``scope``: the body bytes its route accepts.

    An AG-UI upload route's cap is its file limit, whatever the method (the envelope allowance
    is added by the caller); any view declaring ``agui_max_body_bytes`` (every other AG-UI
    route) has that cap; anything else gets ``default``. ``None`` when the request is uncapped.
    """
    view = _resolved_view(scope)
    upload = getattr(view, "agui_upload_max_bytes", None)
    if upload is not None:
        return int(upload), True
    cap = getattr(view, "agui_max_body_bytes", None)
    if cap is None:
        cap = default
    return None if cap is None else (int(cap), False)


def _is_agui_write(scope: Scope) -> bool:
    """Whether ``scope`` is a ``POST``/``PUT``/``PATCH``/``DELETE`` to an ``AGUIServer`` route."""
    if scope.get("method") not in {"POST", "PUT", "PATCH", "DELETE"}:
        return False
    return getattr(_resolved_view(scope), "agui_server", None) is not None


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _send_413(send: Send, limit: int, *, upload: bool = True) -> None:
    """Answer 413 naming the configured ``limit`` (for uploads: not the envelope allowance)."""
    limit_text = describe_size(limit)
    what = "Uploads are" if upload else "Request bodies on this route are"
    body = json.dumps(
        {"error": f"{what} limited to {limit_text}; this request is larger."}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimitMiddleware:
    """Wrap a Django ASGI application so request bodies over their route's cap are never read.

    ``application = BodyLimitMiddleware(get_asgi_application())``. Each route's cap is looked
    up with Django's URL resolver (``ROOT_URLCONF``): an AG-UI upload route takes its server's
    ``AttachmentOptions.max_bytes`` plus ``MULTIPART_OVERHEAD_BYTES``, and any view with an
    ``agui_max_body_bytes`` attribute (every other AG-UI route, and any view of yours you give
    one) takes that many bytes. ``max_body_bytes`` caps every other request; the default
    ``None`` passes them through untouched. A refusal is a JSON 413 with ``Connection: close``.

    A write to an AG-UI route (a run, a cancel, a rename, a delete, an upload) whose client
    leaves after sending it in full is carried out: Django's handler hears of the disconnect
    only once the answer has started, so it cannot cancel the view halfway (a run sent and
    then abandoned is started, and kept, or cancelled under ``on_disconnect="cancel"``).

    With ``lifespan`` (the default) it answers ``lifespan`` scopes itself: at start-up every
    mount's sweeper starts, and at shutdown every mount drains (``agui.drain``). Pass
    ``lifespan=False`` when the wrapped application answers them (and drains itself).
    """

    def __init__(
        self, app: ASGIApp, *, max_body_bytes: int | None = None, lifespan: bool = True
    ) -> None:
        if max_body_bytes is not None and (
            isinstance(max_body_bytes, bool)
            or not isinstance(max_body_bytes, int)
            or max_body_bytes < 0
        ):
            raise ValueError(
                f"max_body_bytes={max_body_bytes!r} is not a byte count; pass a non-negative "
                "integer, or None to cap only the AG-UI routes."
            )
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.lifespan = lifespan

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope``, refusing an oversized body with a JSON 413."""
        if scope["type"] == "lifespan" and self.lifespan:
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope = {**scope, UPLOAD_LIMIT_SCOPE_KEY: True}
        route = _route_limit(scope, self.max_body_bytes)
        if route is None:
            await self.app(scope, receive, send)
            return
        limit, upload = route
        # The multipart envelope (boundaries, part headers) rides on top of the file itself.
        cap = limit + MULTIPART_OVERHEAD_BYTES if upload else limit
        declared = _declared_length(scope)
        if declared is not None and declared > cap:
            await _send_413(send, limit, upload=upload)
            return
        received = 0
        refused = False
        whole = False  # the body has been received in full
        hold = _is_agui_write(scope)
        answered = asyncio.Event()

        async def limited_receive() -> Message:
            nonlocal received, refused, whole
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    refused = True
                    await _send_413(send, limit, upload=upload)
                    # Django sees a disconnect and serves nothing; the 413 is already out.
                    return {"type": "http.disconnect"}
                whole = not message.get("more_body", False)
            elif message["type"] == "http.disconnect" and hold and whole:
                # The client sent a whole write, then left. Django would cancel the view
                # before it answers (a run never started); it learns once the answer starts.
                await answered.wait()
            return message

        async def answering_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                answered.set()
            await send(message)

        await self.app(scope, limited_receive, answering_send)


#: The first name of ``BodyLimitMiddleware``, from when it capped only uploads.
UploadLimitMiddleware = BodyLimitMiddleware
