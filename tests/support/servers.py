"""Serve an ASGI app over a real socket for end-to-end tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

START_TIMEOUT = 10  # seconds, both to start serving and to stop after the block


@contextmanager
def serve_asgi(app: Callable[..., Awaitable[Any]]) -> Iterator[str]:
    """Serve ``app`` under uvicorn on a free loopback port for the ``with`` block.

    Yields the origin ``http://127.0.0.1:<port>`` (no trailing slash). The server runs in a
    daemon thread of this process, so it shares the test's settings and database; the block's
    end asks it to exit and joins the thread.
    """
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="critical", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        assert thread.is_alive(), "uvicorn stopped before it started serving"
        assert time.monotonic() < deadline, f"uvicorn did not start within {START_TIMEOUT} s"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=START_TIMEOUT)
