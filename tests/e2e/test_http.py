"""(d) The endpoint's answers to strangers and to the wrong method, over real HTTP."""

from __future__ import annotations

import httpx
import pytest

from tests.example_project.support import RunningServer, parse_sse, run_input

pytestmark = pytest.mark.e2e


def test_unauthenticated_post_is_401_json(example_server: RunningServer) -> None:
    response = httpx.post(f"{example_server.url}/agent/", json=run_input("hi"))

    assert response.status_code == 401
    assert response.headers["content-type"] == "application/json"
    assert "error" in response.json()


def test_unauthenticated_get_is_401_before_the_method_is_looked_at(
    example_server: RunningServer,
) -> None:
    response = httpx.get(f"{example_server.url}/agent/")

    assert response.status_code == 401
    assert "error" in response.json()


def test_authenticated_get_is_405(demo_client: httpx.Client) -> None:
    response = demo_client.get("/agent/")

    assert response.status_code == 405
    assert "error" in response.json()
    assert "POST" in response.headers.get("allow", "POST")


def test_authenticated_post_without_csrf_token_is_403(demo_client: httpx.Client) -> None:
    response = demo_client.post("/agent/", json=run_input("hi"))

    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]


def test_invalid_body_is_400_json(demo_client: httpx.Client) -> None:
    response = demo_client.post(
        "/agent/",
        content=b'{"threadId": 1}',
        headers={
            "Content-Type": "application/json",
            "X-CSRFToken": demo_client.cookies["csrftoken"],
        },
    )

    assert response.status_code == 400
    assert "error" in response.json()


def test_stream_headers(demo_client: httpx.Client) -> None:
    with demo_client.stream(
        "POST",
        "/agent/",
        json=run_input("What is 1 + 1?", thread_id="headers", run_id="headers-1"),
        headers={"X-CSRFToken": demo_client.cookies["csrftoken"]},
    ) as response:
        body = response.read()

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    frames = [frame for frame in body.split(b"\n\n") if frame and not frame.startswith(b":")]
    assert frames[0].startswith(b"id: headers-1:1\ndata: "), "every frame names its run and seq"
    assert all(frame.startswith(b"id: headers-1:") for frame in frames)
    assert b"\n\n: ping\n\n" in body, "the e2e server sends heartbeats between words"
    events = parse_sse(body.decode())
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_FINISHED"
