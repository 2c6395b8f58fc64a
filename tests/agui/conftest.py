"""Fixtures for the AG-UI server tests: a real ASGI app, users, sessions and SSE decoding."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.asgi import get_asgi_application
from django.test import AsyncClient


def run_body(
    *, thread_id: str = "thread-1", run_id: str = "run-1", text: str = "What is 2 + 3?"
) -> dict[str, Any]:
    """A minimal camelCase ``RunAgentInput`` with one user message."""
    return {
        "threadId": thread_id,
        "runId": run_id,
        "state": {},
        "messages": [{"id": f"user-{run_id}", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


def sse_frames(body: str) -> list[tuple[str | None, dict[str, Any]]]:
    """Decode the frames of an SSE body as ``(id or None, event)`` (comments skipped)."""
    frames = []
    for frame in body.split("\n\n"):
        frame_id = None
        for line in frame.split("\n"):
            if line.startswith("id: "):
                frame_id = line.removeprefix("id: ")
            elif line.startswith("data: "):
                frames.append((frame_id, json.loads(line.removeprefix("data: "))))
    return frames


def sse_events(body: str) -> list[dict[str, Any]]:
    """Decode the ``data:`` frames of an SSE body (comments skipped)."""
    return [event for _, event in sse_frames(body)]


def event_types(body: str) -> list[str]:
    return [event["type"] for event in sse_events(body)]


_APP: list[Any] = []


def asgi_app() -> Any:
    """Django's ASGI application, built once.

    ``get_asgi_application()`` re-runs ``django.setup()``, which re-applies ``LOGGING`` and
    would remove pytest's log capture from the root logger if called inside a test.
    """
    if not _APP:
        _APP.append(get_asgi_application())
    return _APP[0]


@pytest.fixture(scope="session", autouse=True)
def _build_asgi_app() -> None:
    asgi_app()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client speaking to Django's real ASGI application."""
    transport = httpx.ASGITransport(app=asgi_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        yield http


@pytest.fixture
async def alice() -> Any:
    return await get_user_model().objects.acreate_user("alice", password="pw-alice")


@pytest.fixture
async def bob() -> Any:
    return await get_user_model().objects.acreate_user("bob", password="pw-bob")


@pytest.fixture
async def carol() -> Any:
    return await get_user_model().objects.acreate_user("carol", password="pw-carol", is_staff=True)


async def session_cookie(user: Any) -> str:
    """A real logged-in session for ``user``; returns the session cookie value."""
    django_client = AsyncClient()
    await django_client.aforce_login(user)
    return str(django_client.cookies[settings.SESSION_COOKIE_NAME].value)


async def logged_in(user: Any) -> httpx.AsyncClient:
    """A fresh httpx client on the ASGI app carrying ``user``'s session cookie."""
    transport = httpx.ASGITransport(app=asgi_app())
    http = httpx.AsyncClient(transport=transport, base_url="http://testserver")
    http.cookies.set(settings.SESSION_COOKIE_NAME, await session_cookie(user))
    return http


#: A valid 32-character CSRF secret: send it as the ``csrftoken`` cookie and ``X-CSRFToken``.
CSRF_SECRET = "abcdefghijklmnopqrstuvwxyzABCDEF"


#: How long ``drive_until_disconnect`` lets the app serve before it calls it a hang.
SERVE_TIMEOUT = 10.0


async def drive_until_disconnect(
    path: str,
    body: dict[str, Any],
    *,
    until: bytes | None = b"TEXT_MESSAGE_CONTENT",
    stall: bool = False,
    app: Any = None,
) -> list[dict[str, Any]]:
    """Serve one POST through the real ASGI app; disconnect once a body chunk contains ``until``
    (``None``: as the response starts, with its headers).

    Returns the ASGI messages the application sent until then: what the client received
    (a server drops what is sent after the socket closed, as uvicorn does). With ``stall``,
    the write that carried ``until`` never completes, as a server's ``send`` waits while the
    socket's buffer is full: Django's cancel then lands inside ``send``, not in the stream.
    ``app`` wraps the ASGI app (default: Django's).

    The app runs in a task of its own: one still serving ``SERVE_TIMEOUT`` seconds after the
    request fails the test (where it waited in the message), and it is cancelled with every
    task the request started (Django 5.2's handler, cancelled, leaves its own two running), so
    a hang is never mistaken for a response and leaves nothing running. An error it raises
    is raised.
    """
    application = app or asgi_app()
    payload = json.dumps(body).encode()
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    inbox.put_nowait({"type": "http.request", "body": payload, "more_body": False})
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return await inbox.get()

    gone = False

    async def send(message: dict[str, Any]) -> None:
        nonlocal gone
        if gone:
            return
        sent.append(message)
        if (
            message["type"] == "http.response.start"
            if until is None
            else message["type"] == "http.response.body" and until in message.get("body", b"")
        ):
            gone = True
            inbox.put_nowait({"type": "http.disconnect"})
            if stall:
                await asyncio.Event().wait()  # the socket never drains: only a cancel ends it

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    before = asyncio.all_tasks()
    serving = asyncio.ensure_future(application(scope, receive, send))
    await asyncio.wait({serving}, timeout=SERVE_TIMEOUT)
    if not serving.done():
        stack = awaiting(serving)
        started = asyncio.all_tasks() - before
        for task in started:
            task.cancel()
        _done, stuck = await asyncio.wait(started, timeout=SERVE_TIMEOUT)
        ignored = f" {len(stuck)} task(s) ignored their cancel too." if stuck else ""
        pytest.fail(
            f"The app was still serving {path} {SERVE_TIMEOUT} s after the request "
            f"(disconnected: {gone}).{ignored} Where it waited:\n{stack}"
        )
    serving.result()
    return sent


def awaiting(task: asyncio.Task[Any]) -> str:
    """Where ``task`` waits: each coroutine it awaits, down to the first async generator."""
    lines = []
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            lines.append(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return "\n".join(lines)


def streamed_events(sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The SSE events among the ASGI messages ``drive_until_disconnect`` recorded."""
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sse_events(body.decode())


def session_id(sent: list[dict[str, Any]]) -> str:
    """The session id the response set (the anonymous session created before streaming)."""
    [start] = [m for m in sent if m["type"] == "http.response.start"]
    cookies: list[str] = [v.decode() for k, v in start["headers"] if k.lower() == b"set-cookie"]
    [session] = [c for c in cookies if c.startswith(f"{settings.SESSION_COOKIE_NAME}=")]
    return session.split(";", 1)[0].split("=", 1)[1]
