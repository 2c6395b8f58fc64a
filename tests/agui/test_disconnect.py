"""A client that leaves mid-run, on each kind of mount: in process and over a real socket.

Django 5.2's ASGI handler cancels a task of its own when the client disconnects; Django 6's
cancels the handler's body from an ``asyncio.TaskGroup``. On both, and wherever the cancel lands
(in the stream, in the server's ``send`` while a socket buffer is full, or while the headers go
out, when Django drops the response unread), the outcome is the same: a stateless run stops
with its request; a run on an ``on_disconnect="cancel"`` mount is cancelled and keeps what
streamed; a durable run goes on and is stored ``complete``. No task is left running, no async
generator is left for the garbage collector to close, nothing is logged.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import django
import pytest
from asgiref.sync import sync_to_async

import django_pydantic_agent
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.store.models import StoredAgentRun, StoredMessage
from tests.agui import conftest as agui_conftest
from tests.agui.agents import DEPARTURE, FLOOD_DELTA
from tests.agui.conftest import (
    SERVE_TIMEOUT,
    asgi_app,
    drive_until_disconnect,
    run_body,
    streamed_events,
)
from tests.support.servers import LiveServer, serve_asgi_live

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]

#: The model's log when the disconnect stopped it: at its wait, or before it resumed.
STOPPED = (["started", "cancelled", "stopped"], ["started", "stopped"])
USER = ("user", "complete", "Keep me")


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a disconnect leaves, on one kind of mount: the model's log (one of ``model``),
    the run records ``(run_id, status, error)`` and the stored ``(role, status, content)``."""

    model: tuple[list[str], ...]
    runs: list[tuple[str, str, str]]
    messages: list[tuple[str, str, str]]


OUTCOMES = {
    # A Null store: the run is the request's; nothing is stored.
    "stateless": Outcome(model=STOPPED, runs=[], messages=[]),
    # on_disconnect="cancel": the run is cancelled, and what streamed is kept.
    "cancel": Outcome(
        model=STOPPED,
        runs=[("run-1", "interrupted", "")],
        messages=[USER, ("assistant", "interrupted", "Working ")],
    ),
    # The default: the run goes on without its reader, and ends complete.
    "durable": Outcome(
        model=(["started", "went on", "stopped"],),
        runs=[("run-1", "complete", "")],
        messages=[USER, ("assistant", "complete", "Working done.")],
    ),
}


class Departures:
    """Django's ASGI app, telling ``DEPARTURE`` when the server reports the client gone;
    ``served`` is set once it returns, ``errors`` holds what it raised."""

    def __init__(self) -> None:
        self.served = threading.Event()
        self.errors: list[BaseException] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def watched() -> MutableMapping[str, Any]:
            message: MutableMapping[str, Any] = await receive()
            if message["type"] == "http.disconnect":
                DEPARTURE.gone.set()
            return message

        try:
            await asgi_app()(scope, watched, send)
        except BaseException as exc:
            self.errors.append(exc)
            raise
        finally:
            self.served.set()


#: Where the generators carrying a response's frames live: this package and Django.
RESPONSE_CODE = (
    str(Path(django_pydantic_agent.__file__).parent),
    str(Path(django.__file__).parent),
)


def watch_generators(unclosed: list[str]) -> None:
    """From now on, on this thread: note in ``unclosed`` each async generator of this package
    or Django that its owner never closed, which the garbage collector finalises (run
    ``gc.collect()`` before reading it). pydantic-ai's are left out: a cancelled model stream
    leaves some of its own to the collector, whoever cancels it."""
    hooks = sys.get_asyncgen_hooks()

    def finalizer(generator: Any) -> None:
        if generator.ag_code.co_filename.startswith(RESPONSE_CODE):
            unclosed.append(generator.__qualname__)
        if hooks.finalizer is not None:
            hooks.finalizer(generator)

    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)


@contextmanager
def unclosed_generators() -> Iterator[list[str]]:
    """``watch_generators`` for the block: the generators first iterated in it left unclosed."""
    hooks = sys.get_asyncgen_hooks()
    unclosed: list[str] = []
    watch_generators(unclosed)
    try:
        yield unclosed
    finally:
        sys.set_asyncgen_hooks(*hooks)


def stored() -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """``(run records, messages)`` as ``Outcome`` holds them; a flood's deltas left out."""
    runs = list(StoredAgentRun.objects.order_by("pk").values_list("run_id", "status", "error"))
    rows = StoredMessage.objects.order_by("conversation", "position")
    messages = [
        (role, status, content.replace(FLOOD_DELTA, ""))
        for role, status, content in rows.values_list("role", "status", "content")
    ]
    return runs, messages


def complaints(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The records of a warning or worse, or carrying a traceback (captured from ``INFO``)."""
    return [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING or r.exc_info
    ]


# -- in process: Django's ASGI app, driven by hand ---------------------------------------------


@pytest.mark.parametrize("stall", [False, True], ids=["cancelled-in-the-stream", "in-send"])
@pytest.mark.parametrize("kind", list(OUTCOMES))
async def test_a_client_leaving_mid_stream(
    kind: str, stall: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    DEPARTURE.reset()
    expected = OUTCOMES[kind]
    with unclosed_generators() as unclosed:
        sent = await drive_until_disconnect(
            f"/departing-{kind}/", run_body(text="Keep me"), stall=stall, app=Departures()
        )
        if kind == "stateless":
            # The run is the request's: it has stopped by the time the response has ended.
            assert DEPARTURE.log in expected.model
        # A run the disconnect failed to cancel would wait 30 s: bounded, it fails instead.
        await asyncio.wait_for(RunCoordinator.wait_for_all_runs(), timeout=5)
        await RunCoordinator.aclose_all()
        gc.collect()
    assert sent[0]["status"] == 200
    events = streamed_events(sent)
    assert "TEXT_MESSAGE_CONTENT" in [e["type"] for e in events]
    assert "RUN_FINISHED" not in [e["type"] for e in events]
    assert DEPARTURE.log in expected.model
    assert await sync_to_async(stored)() == (expected.runs, expected.messages)
    assert unclosed == [], unclosed
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert complaints(caplog) == []


#: What a run left when Django dropped its response unread: the stored messages may be none
#: (cancelled before its first step), the user's, or those and what streamed meanwhile.
UNREAD_MESSAGES = ([], [USER], [USER, ("assistant", "interrupted", "Working ")])


@pytest.mark.parametrize("kind", list(OUTCOMES))
async def test_a_client_leaving_as_the_headers_go_out(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The cancel lands while the headers are sent: Django drops the response, whose frames
    nobody reads. A stateless run never starts; a run on a cancel mount is cancelled all the
    same; a durable run completes."""
    caplog.set_level(logging.INFO)
    DEPARTURE.reset()
    with unclosed_generators() as unclosed:
        sent = await drive_until_disconnect(
            f"/departing-{kind}/",
            run_body(text="Keep me"),
            until=None,
            stall=True,
            app=Departures(),
        )
        await asyncio.wait_for(RunCoordinator.wait_for_all_runs(), timeout=5)
        await RunCoordinator.aclose_all()
        gc.collect()
    assert [m["type"] for m in sent] == ["http.response.start"]
    runs, messages = await sync_to_async(stored)()
    if kind == "stateless":
        assert (DEPARTURE.log, runs, messages) == ([], [], [])
    elif kind == "cancel":
        assert DEPARTURE.log in ([], *STOPPED)
        assert runs == [("run-1", "interrupted", "")]
        assert messages in UNREAD_MESSAGES
    else:
        assert DEPARTURE.log in OUTCOMES["durable"].model
        assert (runs, messages) == (OUTCOMES["durable"].runs, OUTCOMES["durable"].messages)
    assert unclosed == [], unclosed
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert complaints(caplog) == []


# -- the driver itself: a hang fails the test, and leaves nothing running ----------------------


async def test_an_app_that_never_ends_fails_the_test_and_leaves_no_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agui_conftest, "SERVE_TIMEOUT", 0.2)

    async def deaf(scope: Any, receive: Any, send: Any) -> None:
        # A task of its own, as Django 5.2's handler has, which its cancellation leaves behind.
        listening = asyncio.ensure_future(receive())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"TEXT_MESSAGE_CONTENT"})
        await asyncio.Event().wait()  # ignores the disconnect: only a cancel ends it
        await listening  # pragma: no cover

    with pytest.raises(pytest.fail.Exception, match=r"still serving /deaf/ 0.2 s") as failure:
        await drive_until_disconnect("/deaf/", run_body(), app=deaf)
    assert "in deaf" in str(failure.value)  # where it waited
    assert asyncio.all_tasks() == {asyncio.current_task()}


# -- over a real socket: uvicorn, and a client that closes its socket mid-stream ---------------

#: The flood of a client that stops reading: past the socket buffers of a 4 KiB receive window.
FLOOD_BYTES = 8 * 1024 * 1024


async def _tasks() -> set[asyncio.Task[Any]]:
    me = asyncio.current_task()
    return {task for task in asyncio.all_tasks() if task is not me}


async def _settled() -> set[asyncio.Task[Any]]:
    """On the server's loop: the tasks left once its runs have ended and its sweepers closed."""
    await asyncio.wait_for(RunCoordinator.wait_for_all_runs(), timeout=5)
    await RunCoordinator.aclose_all()
    gc.collect()
    for _ in range(3):
        await asyncio.sleep(0)
    return await _tasks()


def _wait_until(condition: Callable[[], bool], failure: str) -> None:
    deadline = time.monotonic() + SERVE_TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.005)


def _writes_backed_up(live: LiveServer) -> bool:
    """Whether uvicorn has paused writing to a connection (its transport buffer is full)."""

    async def paused() -> bool:
        connections = live.server.server_state.connections
        return any(getattr(c, "flow", None) and c.flow.write_paused for c in connections)

    return live.call(paused)


def post_and_leave(live: LiveServer, path: str, body: dict[str, Any], *, backed_up: bool) -> bytes:
    """POST ``body`` over a socket, read until the first text delta, and close the socket;
    with ``backed_up``, stop reading first and close once the server's writes have backed up.
    Returns what was read."""
    url = urlsplit(live.url)
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    with socket.socket() as sock:
        # A small receive window: once the client stops reading, the server's writes back up.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(SERVE_TIMEOUT)
        sock.connect((url.hostname, url.port))
        sock.sendall(head + payload)
        received = b""
        while b"TEXT_MESSAGE_CONTENT" not in received:
            chunk = sock.recv(4096)
            assert chunk, f"The server ended the response first: {received!r}"
            received += chunk
        if backed_up:
            _wait_until(lambda: _writes_backed_up(live), "uvicorn's writes never backed up.")
    return received


@pytest.mark.e2e
@pytest.mark.parametrize("backed_up", [False, True], ids=["reading", "backed-up"])
@pytest.mark.parametrize("kind", list(OUTCOMES))
def test_a_client_closing_its_socket_mid_stream(
    kind: str, backed_up: bool, caplog: pytest.LogCaptureFixture, transactional_db: None
) -> None:
    caplog.set_level(logging.INFO)
    DEPARTURE.reset(flood_bytes=FLOOD_BYTES if backed_up else 0)
    expected = OUTCOMES[kind]
    app = Departures()
    unclosed: list[str] = []

    async def watch() -> None:
        watch_generators(unclosed)

    with serve_asgi_live(app, log_level="warning") as live:
        live.call(watch)  # on the server's thread
        before = live.call(_tasks)
        received = post_and_leave(
            live, f"/departing-{kind}/", run_body(text="Keep me"), backed_up=backed_up
        )
        assert app.served.wait(SERVE_TIMEOUT), f"uvicorn still serves {kind} after the close."
        left = live.call(_settled)
    assert app.errors == []
    assert received.startswith(b"HTTP/1.1 200 ")
    assert b'"type":"RUN_STARTED"' in received
    assert DEPARTURE.log in expected.model
    assert stored() == (expected.runs, expected.messages)
    assert left == before, f"Left running: {sorted(repr(t.get_coro()) for t in left - before)}"
    assert unclosed == [], unclosed
    assert complaints(caplog) == []
