"""End to end over a real socket: uvicorn serving the run endpoint and the upload wrapper."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui, assert_valid_agui_endpoint

from django_pydantic_agent.agui import SSE_HEARTBEAT, UploadLimitMiddleware
from tests.agui.conftest import asgi_app, run_body, sse_events
from tests.agui.urls import UPLOAD_CAP
from tests.support.servers import serve_asgi

pytestmark = [pytest.mark.e2e, pytest.mark.urls("tests.agui.urls")]


@pytest.fixture
def base_url(transactional_db: None) -> Iterator[str]:
    with serve_asgi(UploadLimitMiddleware(asgi_app())) as url:
        yield url


def test_events_stream_as_they_happen(base_url: str) -> None:
    arrivals: list[tuple[float, str]] = []
    started = time.monotonic()
    with (
        httpx.Client(base_url=base_url, timeout=10) as http,
        http.stream("POST", "/slow/", json=run_body()) as response,
    ):
        assert response.status_code == 200
        for chunk in response.iter_text():
            arrivals.append((time.monotonic() - started, chunk))
    body = "".join(chunk for _, chunk in arrivals)
    first_event = next(t for t, chunk in arrivals if "RUN_STARTED" in chunk)
    last_event = next(t for t, chunk in arrivals if "RUN_FINISHED" in chunk)
    # The model pauses 0.35 s mid-answer: the first event must not wait for the end.
    assert last_event - first_event > 0.25
    assert SSE_HEARTBEAT in body
    assert_valid_agui(sse_events(body))


async def test_endpoint_passes_ag_ui_validate_live(base_url: str) -> None:
    await assert_valid_agui_endpoint(f"{base_url}/open/", timeout_ms=10_000)


def test_oversized_upload_is_refused_before_the_body_is_sent(base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=10) as http:
        response = http.post(
            "/stored/attachments/",
            files={"file": ("big.bin", b"x" * (UPLOAD_CAP + 64 * 1024), "text/plain")},
        )
    assert response.status_code == 413
    # The wrapper answered (the view's own 413 says "The file exceeds"): Django read nothing.
    assert response.json()["error"].startswith(f"Uploads are limited to {UPLOAD_CAP} bytes")


def test_a_200_mb_run_body_is_refused_over_the_socket_without_being_sent(base_url: str) -> None:
    # Declare 200 MB, send only the headers: the 413 arrives without waiting for the body.
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(base_url)
    request = (
        f"POST /stored/ HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {200 * 1024 * 1024}\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(request + b"{")
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert b"Request bodies on this route are limited to" in body
