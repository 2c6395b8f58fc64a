"""The run endpoint over Django's real ASGI application."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tests.agui.agents import SEEN_USERS
from tests.agui.conftest import CSRF_SECRET, event_types, logged_in, run_body, sse_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


async def test_streams_reasoning_tool_call_and_text(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await http.post(
            "/agent/", json=run_body(), headers={"Accept": "text/event-stream"}
        )
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    assert response.headers["content-encoding"] == "identity"
    types = event_types(response.text)
    assert types[0] == "RUN_STARTED"
    assert types[-1] == "RUN_FINISHED"
    for expected in (
        "REASONING_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ):
        assert expected in types
    assert types.index("REASONING_START") < types.index("TOOL_CALL_START")
    events = sse_events(response.text)
    assert events[0]["threadId"] == "thread-1"
    assert events[0]["runId"] == "run-1"
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert result["content"] == "5"
    answer = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert answer == "The sum is 5."
    assert_valid_agui(events)
    # The tool saw the authenticated user through the default deps.
    assert SEEN_USERS[-1] == "alice"


async def test_anonymous_post_is_401_json(client: httpx.AsyncClient) -> None:
    response = await client.post("/agent/", json=run_body())
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/json"
    assert "Authentication required" in response.json()["error"]


async def test_method_is_checked_only_after_authentication(
    client: httpx.AsyncClient, alice: Any
) -> None:
    # A stranger cannot tell which methods (or routes) exist.
    assert (await client.get("/agent/")).status_code == 401
    async with await logged_in(alice) as http:
        response = await http.get("/agent/")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert "'GET' is not allowed" in response.json()["error"]


async def test_open_endpoint_serves_anonymous_callers(client: httpx.AsyncClient) -> None:
    response = await client.post("/open/", json=run_body())
    assert response.status_code == 200
    assert (
        "".join(
            e["delta"] for e in sse_events(response.text) if e["type"] == "TEXT_MESSAGE_CONTENT"
        )
        == "Hello there."
    )


@pytest.mark.parametrize("prefix", ["/staff/", "/async-staff/"])
async def test_authorize_hook_refuses_with_403(prefix: str, alice: Any, carol: Any) -> None:
    async with await logged_in(alice) as http:
        refused = await http.post(prefix, json=run_body())
    assert refused.status_code == 403
    assert refused.json() == {"error": "You are not allowed to use this agent endpoint."}
    async with await logged_in(carol) as http:
        allowed = await http.post(prefix, json=run_body())
    assert allowed.status_code == 200
    assert event_types(allowed.text)[-1] == "RUN_FINISHED"


async def test_get_user_hook_authenticates_by_header(client: httpx.AsyncClient, alice: Any) -> None:
    assert (await client.post("/token/", json=run_body())).status_code == 401
    wrong = await client.post(
        "/token/", json=run_body(), headers={"Authorization": "Bearer mallory"}
    )
    assert wrong.status_code == 401
    response = await client.post(
        "/token/", json=run_body(), headers={"Authorization": "Bearer alice"}
    )
    assert response.status_code == 200
    assert_valid_agui(sse_events(response.text))
    assert SEEN_USERS[-1] == "alice"


async def test_csrf_enforced_refuses_a_post_without_token(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await http.post("/csrf/", json=run_body())
    assert response.status_code == 403
    assert response.json()["error"].startswith("CSRF verification failed")


async def test_csrf_enforced_refuses_a_wrong_token(alice: Any) -> None:
    async with await logged_in(alice) as http:
        http.cookies.set("csrftoken", CSRF_SECRET)
        response = await http.post("/csrf/", json=run_body(), headers={"X-CSRFToken": "x" * 32})
    assert response.status_code == 403


async def test_csrf_enforced_accepts_the_token(alice: Any) -> None:
    async with await logged_in(alice) as http:
        http.cookies.set("csrftoken", CSRF_SECRET)
        response = await http.post("/csrf/", json=run_body(), headers={"X-CSRFToken": CSRF_SECRET})
    assert response.status_code == 200
    assert event_types(response.text)[-1] == "RUN_FINISHED"


async def test_csrf_is_checked_after_authentication(client: httpx.AsyncClient) -> None:
    response = await client.post("/csrf/", json=run_body())
    assert response.status_code == 401


async def test_csrf_enforced_with_django_test_client(alice: Any) -> None:
    from django.test import AsyncClient

    django_client = AsyncClient(enforce_csrf_checks=True)
    await django_client.aforce_login(alice)
    response = await django_client.post("/csrf/", run_body(), content_type="application/json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]


async def test_csrf_exempt_server_accepts_a_post_without_token(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await http.post("/agent/", json=run_body())
    assert response.status_code == 200


SECRET_IN_BODY = "s3cr3t-payload-value"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b'["threadId"]', "JSON list, not an object"),
        (
            b'{"runId": "r", "messages": [], "note": "' + SECRET_IN_BODY.encode() + b'"}',
            "threadId (missing)",
        ),
        (
            b'{"threadId": "t", "runId": "r", "messages": "' + SECRET_IN_BODY.encode() + b'"}',
            "messages (list_type)",
        ),
        (b'{"threadId": "", "runId": "r", "messages": []}', "threadId must be a non-empty"),
        (b'{"threadId": "t", "messages": []}', "runId (missing)"),
    ],
)
async def test_invalid_body_is_400_naming_the_problem_without_echo(
    content: bytes, expected: str, alice: Any
) -> None:
    async with await logged_in(alice) as http:
        response = await http.post(
            "/agent/", content=content, headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert expected in error
    assert SECRET_IN_BODY not in response.text


async def test_body_over_django_limit_is_413(alice: Any, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 200
    async with await logged_in(alice) as http:
        response = await http.post("/agent/", json=run_body(text="x" * 500))
    assert response.status_code == 413
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in response.json()["error"]


@pytest.mark.parametrize("prefix", ["/throttled/", "/async-throttled/"])
async def test_throttle_refusal_is_429_with_retry_after(prefix: str, alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await http.post(prefix, json=run_body())
    assert response.status_code == 429
    assert response.headers["retry-after"] == "8"
    assert response.json() == {"error": "Too many requests: retry in 8 seconds."}


@pytest.mark.django_db
def test_wsgi_still_answers_but_warns_once_that_it_buffers(caplog: Any) -> None:
    import warnings

    from django.test import Client

    from django_pydantic_agent.agui import run as run_module

    run_module._wsgi_warned.clear()
    caplog.set_level(logging.WARNING, logger="django_pydantic_agent.agui")
    http = Client()
    with warnings.catch_warnings():
        # Django itself warns that it must buffer an async iterator under WSGI.
        warnings.simplefilter("ignore")
        responses = [http.post("/open/", run_body(), content_type="application/json") for _ in "ab"]
        bodies = [b"".join(r).decode() for r in responses]
    assert all(event_types(body)[-1] == "RUN_FINISHED" for body in bodies)
    warned = [r for r in caplog.records if "served over WSGI" in r.getMessage()]
    assert len(warned) == 1
