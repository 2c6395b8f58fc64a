"""The example's ASGI application: ``UploadLimitMiddleware`` in front of Django.

Called in-process with hand-made ASGI messages, so each test sees exactly how much of the body
the application asked for before it answered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from django.urls import resolve

from django_pydantic_agent.agui import UploadLimitMiddleware
from django_pydantic_agent.agui.attachments import MULTIPART_OVERHEAD_BYTES
from tests.example_project.support import EXAMPLE_ATTACHMENT_MAX_BYTES

pytestmark = pytest.mark.usefixtures("example_urls")

Message = dict[str, Any]
UPLOAD_PATH = "/agent/attachments/"
CAP = EXAMPLE_ATTACHMENT_MAX_BYTES + MULTIPART_OVERHEAD_BYTES


def _application() -> Callable[..., Awaitable[None]]:
    from example_project.asgi import application

    return application


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> Message:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


class _Body:
    """An ASGI ``receive`` handing out ``chunks`` one at a time, counting what was read.

    After the last chunk it waits, like a client that is still connected.
    """

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.read = 0

    async def __call__(self) -> Message:
        if self.read < len(self.chunks):
            chunk = self.chunks[self.read]
            self.read += 1
            return {
                "type": "http.request",
                "body": chunk,
                "more_body": self.read < len(self.chunks),
            }
        # The client stays connected: Django listens for a disconnect while it responds.
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def _call(scope: Message, body: _Body) -> list[Message]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await _application()(scope, body, send)
    return sent


def test_the_application_is_wrapped_and_the_cap_is_the_servers() -> None:
    from example_project.asgi import LifespanShutdown

    application = _application()
    assert isinstance(application, LifespanShutdown)
    assert isinstance(application.app, UploadLimitMiddleware)
    server = resolve(UPLOAD_PATH).func.agui_server  # type: ignore[attr-defined]
    assert server.attachments.max_bytes == EXAMPLE_ATTACHMENT_MAX_BYTES
    assert server.attachments.allowed_types == (
        "text/*",
        "image/*",
        "application/pdf",
        "application/json",
    )


async def test_a_declared_oversize_upload_is_refused_before_the_body_is_read() -> None:
    body = _Body([b"x" * 1024] * 10)
    scope = _scope(
        UPLOAD_PATH,
        [
            (b"content-type", b"multipart/form-data; boundary=b"),
            (b"content-length", str(CAP + 1).encode()),
        ],
    )

    sent = await _call(scope, body)

    assert sent[0]["status"] == 413
    assert body.read == 0, "Django never saw a byte of the body"
    # The error names the limit the example configured, not the multipart allowance on top.
    error = json.loads(sent[1]["body"])["error"]
    assert f"limited to {EXAMPLE_ATTACHMENT_MAX_BYTES} bytes" in error
    assert str(CAP) not in error


async def test_a_chunked_oversize_upload_is_cut_off_at_the_cap() -> None:
    chunk = b"x" * (256 * 1024)
    body = _Body([chunk] * (CAP // len(chunk) + 8))
    scope = _scope(UPLOAD_PATH, [(b"content-type", b"multipart/form-data; boundary=b")])

    sent = await _call(scope, body)

    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [413]
    assert body.read == CAP // len(chunk) + 1, "reading stopped at the first chunk past the cap"


async def test_other_requests_pass_through_to_django() -> None:
    body = _Body([b"{}"])
    scope = _scope("/agent/", [(b"content-type", b"application/json"), (b"content-length", b"2")])

    sent = await _call(scope, body)

    # Django's own answer: the run endpoint wants a login first.
    assert sent[0]["status"] == 401


async def test_lifespan_shutdown_closes_the_memory_service_client() -> None:
    """Under ``uvicorn --lifespan on`` the process's Memory Service client is closed at exit."""
    from chat import stores
    from django.test import override_settings

    with override_settings(AGENT_MEMORY_SERVICE_ENDPOINT="", AGENT_MEMORY_SERVICE_TOKEN=""):
        stores.memory_service_client()
    pool = stores._pool
    assert pool is not None
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[Message] = []

    async def receive() -> Message:
        return next(messages)

    async def send(message: Message) -> None:
        sent.append(message)

    await _application()({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)

    assert sent == [
        {"type": "lifespan.startup.complete"},
        {"type": "lifespan.shutdown.complete"},
    ]
    assert pool.is_closed
    assert stores._client is None


@pytest.mark.django_db(transaction=True)
async def test_lifespan_starts_the_run_sweeper_and_stops_it_at_shutdown() -> None:
    from django.core.cache import cache
    from example_project.urls import server

    cache.clear()  # no sweep lease left by another test
    coordinator = server.coordinator
    assert coordinator is not None
    running: list[bool] = []
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

    async def receive() -> Message:
        message = next(messages)
        if message["type"] == "lifespan.shutdown":
            task = coordinator._sweeper
            running.append(task is not None and not task.done())
            sweeper.append(task)
        return message

    sweeper: list[Any] = []
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await _application()({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)

    assert running == [True]
    assert sweeper[0].cancelled()
    assert coordinator._sweeper is None
    assert sent[-1] == {"type": "lifespan.shutdown.complete"}
