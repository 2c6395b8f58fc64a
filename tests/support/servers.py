"""Serve an ASGI app over a real socket for end-to-end tests."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import uvicorn

START_TIMEOUT = 10  # seconds, both to start serving and to stop after the block

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class LiveServer:
    """A uvicorn server running in a thread of this process: its origin and its event loop."""

    url: str
    loop: asyncio.AbstractEventLoop
    server: uvicorn.Server

    def call(self, work: Callable[[], Coroutine[Any, Any, T]], *, timeout: float = 30) -> T:
        """Run ``work()`` on the server's loop (where its requests and their tasks live) and
        return its result; ``TimeoutError`` after ``timeout`` seconds."""
        return asyncio.run_coroutine_threadsafe(work(), self.loop).result(timeout=timeout)


@contextmanager
def serve_asgi_live(
    app: Callable[..., Awaitable[Any]], *, log_level: str = "critical"
) -> Iterator[LiveServer]:
    """Serve ``app`` under uvicorn on a free loopback port for the ``with`` block.

    Yields the ``LiveServer`` (origin ``http://127.0.0.1:<port>``, no trailing slash). The
    server runs in a daemon thread of this process, so it shares the test's settings and
    database; the block's end asks it to exit and joins the thread. uvicorn's own records
    (``uvicorn.error``: "Exception in ASGI application") propagate to the root logger, so
    ``caplog`` sees those at ``log_level`` and above.
    """
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level=log_level, log_config=None, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped before it started serving"
        assert time.monotonic() < deadline, f"uvicorn did not start within {START_TIMEOUT} s"
        time.sleep(0.01)
    listening = server.servers[0]
    port = listening.sockets[0].getsockname()[1]
    try:
        yield LiveServer(url=f"http://127.0.0.1:{port}", loop=listening.get_loop(), server=server)
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT)


@contextmanager
def serve_asgi(app: Callable[..., Awaitable[Any]]) -> Iterator[str]:
    """``serve_asgi_live``, yielding only the origin ``http://127.0.0.1:<port>``."""
    with serve_asgi_live(app) as live:
        yield live.url
