"""``UploadLimitMiddleware``: refuse oversized uploads before Django's ASGI handler reads them.

Django's ``ASGIHandler`` reads the *whole* request body into a temporary file before any
middleware or view runs, so under ASGI an upload handler can only stop the multipart parser;
the bytes have already been received and spooled. This ASGI wrapper sits in front of Django:
for a ``POST`` to an ``AGUIServer`` upload route it refuses a ``Content-Length`` over the cap
at once, and cuts off a chunked body as soon as it passes the cap, answering ``413`` either way.

It runs before authentication (there is no user yet), so the only thing it tells a stranger is
that an upload route exists at a path they already sent an oversized body to.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.urls import Resolver404, resolve

from django_pydantic_agent.agui.attachments import MULTIPART_OVERHEAD_BYTES, UPLOAD_LIMIT_SCOPE_KEY

__all__ = ["UploadLimitMiddleware"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _upload_limit(scope: Scope) -> int | None:
    """The file limit (``attachment_max_bytes``) of the AG-UI upload route ``scope`` targets,
    or ``None`` if it is not one."""
    if scope["type"] != "http" or scope.get("method") != "POST":
        return None
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root) :]
    try:
        match = resolve(path or "/")
    except Resolver404:
        return None
    cap = getattr(match.func, "agui_upload_max_bytes", None)
    return None if cap is None else int(cap)


def _size(limit: int) -> str:
    """``limit`` in the largest binary unit it reaches, for people: ``"5 MiB"``, ``"1.5 KiB"``."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if limit >= factor:
            return f"{limit / factor:.1f}".removesuffix(".0") + f" {unit}"
    return f"{limit} bytes"


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _send_413(send: Send, limit: int) -> None:
    """Answer 413 naming the configured file ``limit`` (not the cap with its envelope allowance)."""
    limit_text = f"{limit} bytes ({_size(limit)})" if limit >= 1 << 10 else _size(limit)
    body = json.dumps(
        {"error": f"Uploads are limited to {limit_text}; this request is larger."}
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


class UploadLimitMiddleware:
    """Wrap a Django ASGI application so AG-UI uploads over their cap are never read.

    ``application = UploadLimitMiddleware(get_asgi_application())``. The cap of each upload
    route is its server's ``attachment_max_bytes`` plus ``MULTIPART_OVERHEAD_BYTES``; the route
    is found with Django's URL resolver (``ROOT_URLCONF``). Every other request passes through
    untouched.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve ``scope``, refusing an oversized upload with a JSON 413."""
        if scope["type"] == "http":
            scope = {**scope, UPLOAD_LIMIT_SCOPE_KEY: True}
        limit = _upload_limit(scope)
        if limit is None:
            await self.app(scope, receive, send)
            return
        # The multipart envelope (boundaries, part headers) rides on top of the file itself.
        cap = limit + MULTIPART_OVERHEAD_BYTES
        declared = _declared_length(scope)
        if declared is not None and declared > cap:
            await _send_413(send, limit)
            return
        received = 0
        refused = False

        async def limited_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    refused = True
                    await _send_413(send, limit)
                    # Django sees a disconnect and serves nothing; the 413 is already out.
                    return {"type": "http.disconnect"}
            return message

        await self.app(scope, limited_receive, send)
