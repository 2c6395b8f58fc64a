"""The run endpoint over Django's real ASGI application."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tests.agui.agents import SEEN_USERS
from tests.agui.conftest import (
    CSRF_SECRET,
    asgi_app,
    event_types,
    logged_in,
    run_body,
    sse_events,
)

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

    from django_pydantic_agent.agui import sse

    sse._wsgi_warned.clear()
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


# Hardening: every refusal before streaming is JSON; every stream ends with a terminal event.


async def post_raw(
    http: httpx.AsyncClient, content: bytes, content_type: str = "application/json"
) -> httpx.Response:
    return await http.post("/agent/", content=content, headers={"Content-Type": content_type})


async def test_deeply_nested_json_is_400_not_500(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await post_raw(http, b"[" * 100_000 + b"]" * 100_000)
        nested_state = await post_raw(
            http,
            b'{"threadId": "t", "runId": "r", "messages": [], "state": '
            + b"[" * 3000
            + b"]" * 3000
            + b"}",
        )
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["error"]
    assert nested_state.status_code == 400
    assert nested_state.headers["content-type"] == "application/json"


async def test_a_tool_message_answering_no_call_is_400_before_streaming(alice: Any) -> None:
    body = run_body()
    body["messages"] = [
        {"id": "u1", "role": "user", "content": "hi"},
        {"id": "t1", "role": "tool", "toolCallId": SECRET_IN_BODY, "content": "5"},
    ]
    async with await logged_in(alice) as http:
        response = await http.post("/agent/", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert "messages.1" in error
    assert "toolCallId" in error
    assert SECRET_IN_BODY not in response.text


async def test_a_failure_at_the_start_of_the_stream_is_still_a_valid_run_error(
    alice: Any, caplog: Any, monkeypatch: Any
) -> None:
    from django_pydantic_agent.agui.inner import RedactingAGUIAdapter
    from tests.agui.agents import SECRET_ERROR

    def explode(self: Any, **kwargs: Any) -> Any:
        raise RuntimeError(SECRET_ERROR)

    monkeypatch.setattr(RedactingAGUIAdapter, "run_stream", explode)
    caplog.set_level(logging.ERROR, logger="django_pydantic_agent.agui")
    async with await logged_in(alice) as http:
        response = await http.post("/agent/", json=run_body())
    events = sse_events(response.text)
    assert [e["type"] for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[1]["message"] == "The agent run failed. The error has been logged on the server."
    assert SECRET_ERROR not in response.text
    assert_valid_agui(events)
    [record] = [r for r in caplog.records if r.name == "django_pydantic_agent.agui"]
    assert str(record.exc_info[1]) == SECRET_ERROR  # type: ignore[index]


async def test_a_failure_mid_stream_outside_the_agent_still_ends_with_run_error(
    alice: Any, monkeypatch: Any
) -> None:
    from django_pydantic_agent.agui import inner as inner_module

    async def broken_filter(events: Any) -> Any:
        async for event in events:
            yield event
            if event.type.value == "TEXT_MESSAGE_END":
                raise RuntimeError("a filter broke")

    monkeypatch.setattr(inner_module, "without_reasoning", broken_filter)
    async with await logged_in(alice) as http:
        response = await http.post("/quiet/", json=run_body())
    events = sse_events(response.text)
    assert events[0]["type"] == "RUN_STARTED"
    assert events[-1]["type"] == "RUN_ERROR"
    assert "a filter broke" not in response.text


@pytest.mark.parametrize(
    "thread_id",
    ["a/b", "\x00nul", "a\nb", ".", "..", "x" * 201, "tab\there", "rlo\u202e", "nbsp\xa0"],
)
async def test_unusable_thread_ids_are_400(thread_id: str, alice: Any) -> None:
    body = json.dumps(run_body(thread_id=thread_id)).encode()
    async with await logged_in(alice) as http:
        response = await post_raw(http, body)
    assert response.status_code == 400
    assert "threadId must be a non-empty string" in response.json()["error"]
    assert "'/'" in response.json()["error"]


async def test_unusable_run_ids_are_400(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await post_raw(http, json.dumps(run_body(run_id="r\x00")).encode())
        # pydantic's JSON parser already refuses an unpaired surrogate escape.
        surrogate = await post_raw(http, json.dumps(run_body(thread_id="\ud800")).encode())
        fine = await post_raw(http, json.dumps(run_body(thread_id="ünï 😀 x" * 20)).encode())
    assert surrogate.status_code == 400
    assert response.status_code == 400
    assert "runId must be a non-empty string" in response.json()["error"]
    assert fine.status_code == 200


async def test_an_empty_message_list_is_400(alice: Any) -> None:
    body = run_body()
    body["messages"] = []
    async with await logged_in(alice) as http:
        response = await http.post("/agent/", json=body)
    assert response.status_code == 400
    assert "send at least one message" in response.json()["error"]


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "",
    ],
)
async def test_a_run_must_be_posted_as_json(content_type: str, alice: Any) -> None:
    # A cross-site form or fetch(no-cors) can send these with the session cookie.
    body = json.dumps(run_body()).encode()
    async with await logged_in(alice) as http:
        response = await post_raw(http, body, content_type)
        charset = await post_raw(http, body, "Application/JSON; charset=utf-8")
    assert response.status_code == 415
    assert "application/json" in response.json()["error"]
    assert charset.status_code == 200


async def test_client_file_urls_are_dropped_by_default(caplog: Any) -> None:
    import warnings

    body = run_body()
    body["messages"] = [
        {
            "id": "u1",
            "role": "user",
            "content": [
                {"type": "text", "text": "Describe this"},
                {
                    "type": "image",
                    "source": {
                        "type": "url",
                        "value": "https://169.254.169.254/latest/meta-data/x.png",
                        "mimeType": "image/png",
                    },
                },
            ],
        }
    ]
    transport = httpx.ASGITransport(app=asgi_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydantic-ai warns when it drops the part
            default = await http.post("/urls-default/", json=body)
            allowed = await http.post("/urls-allowed/", json=body)
    answer = "".join(
        e["delta"] for e in sse_events(default.text) if e["type"] == "TEXT_MESSAGE_CONTENT"
    )
    opted_in = "".join(
        e["delta"] for e in sse_events(allowed.text) if e["type"] == "TEXT_MESSAGE_CONTENT"
    )
    assert answer == "parts=str"
    assert opted_in == "parts=str,ImageUrl"


async def test_a_tool_message_answering_another_call_names_its_position(alice: Any) -> None:
    body = run_body()
    body["messages"] = [
        {"id": "u1", "role": "user", "content": "hi"},
        {
            "id": "a1",
            "role": "assistant",
            "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
            ],
        },
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "5"},
        {"id": "t2", "role": "tool", "toolCallId": "c2", "content": "6"},
    ]
    async with await logged_in(alice) as http:
        response = await http.post("/agent/", json=body)
    assert response.status_code == 400
    assert response.json()["error"].startswith("messages.3 is a tool message")


async def test_any_other_unusable_history_is_400(alice: Any, monkeypatch: Any) -> None:
    from pydantic_ai.ui.ag_ui import AGUIAdapter

    def refuse(cls: Any, messages: Any, **kwargs: Any) -> Any:
        raise ValueError(SECRET_IN_BODY)

    monkeypatch.setattr(AGUIAdapter, "load_messages", classmethod(refuse))
    async with await logged_in(alice) as http:
        response = await http.post("/agent/", json=run_body())
    assert response.status_code == 400
    assert "not a usable conversation history" in response.json()["error"]
    assert SECRET_IN_BODY not in response.text
