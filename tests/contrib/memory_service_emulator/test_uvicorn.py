"""End to end under a real ASGI server (uvicorn): what a client sees for each fault."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import uvicorn
from django.core.asgi import get_asgi_application

from django_pydantic_agent.contrib.memory_service_emulator import Fault, fault_injector

pytestmark = pytest.mark.e2e

HEADERS = {"Authorization": "Bearer uvicorn", "Content-Type": "application/json"}


@pytest.fixture
def asgi_url(transactional_db: None) -> Iterator[str]:
    config = uvicorn.Config(
        get_asgi_application(), host="127.0.0.1", port=0, log_level="critical", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/api/v2/memory/"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_faults_under_asgi(asgi_url: str) -> None:
    with httpx.Client(base_url=asgi_url, headers=HEADERS, timeout=10) as client:
        assert client.post("new/", json={}).status_code == 201
        with fault_injector.inject(Fault.rate_limited(retry_after=7, times=1)):
            limited = client.get("")
        assert limited.status_code == 429
        assert limited.headers["Retry-After"] == "7"
        # Under ASGI the status line goes out, then the connection closes mid-body.
        with (
            fault_injector.inject(Fault.dropped_connection(times=1)),
            pytest.raises(httpx.RemoteProtocolError, match="without sending complete message"),
        ):
            client.get("")
        assert client.get("").json()["total"] == 1
        bare = client.get(asgi_url.rstrip("/"))
        assert bare.status_code == 404
