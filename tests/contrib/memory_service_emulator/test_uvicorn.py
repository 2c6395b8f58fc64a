"""End to end under a real ASGI server (uvicorn): what a client sees for each fault."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from django.core.asgi import get_asgi_application

from django_pydantic_agent.contrib.memory_service_emulator import Fault, fault_injector
from tests.support.servers import serve_asgi

pytestmark = pytest.mark.e2e

HEADERS = {"Authorization": "Bearer uvicorn", "Content-Type": "application/json"}


@pytest.fixture
def asgi_url(transactional_db: None) -> Iterator[str]:
    with serve_asgi(get_asgi_application()) as url:
        yield f"{url}/api/v2/memory/"


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
