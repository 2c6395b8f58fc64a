"""Hostile clients on the AI SDK's routes: other owners, forged or malformed bodies, oversized
bodies, and cross-site requests. Each is refused as the AG-UI routes refuse it, and a refusal
for someone else's thread reads exactly like one for a thread that never existed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from django.core.cache import cache

from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage
from tests.agui.agents import GATE
from tests.agui.conftest import CSRF_SECRET, asgi_app
from tests.vercel_ai.conftest import chat_body, chunks, logged_in, text_of, user_message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.vercel_ai.urls")]

SECRET = "alice-secret-41f0"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    cache.clear()
    GATE.reset()


def visitor() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=asgi_app()), base_url="http://testserver"
    )


async def answer(
    http: httpx.AsyncClient, method: str, url: str, **kwargs: Any
) -> tuple[int, bytes]:
    response = await http.request(method, url, **kwargs)
    return response.status_code, response.content


@pytest.mark.parametrize("prefix", ["g", "anon"])
async def test_no_owner_reaches_another_owners_thread(alice: Any, bob: Any, prefix: str) -> None:
    """The owner keeps a finished thread and a running one; the others try every route."""
    owner_client = await logged_in(alice) if prefix == "g" else visitor()
    async with owner_client as owner, await logged_in(bob) as other, visitor() as anonymous:
        GATE.released.set()
        done = chat_body("t-done", user_message(f"plans {SECRET}"))
        await owner.post(f"/{prefix}/api/chat", json=done)
        strangers = [other]
        if prefix == "anon":  # a visitor with a session of their own
            await anonymous.post("/anon/api/chat", json=chat_body("t-mine", user_message("hi")))
            strangers.append(anonymous)
        GATE.reset()
        live = asyncio.ensure_future(
            owner.post(f"/{prefix}/api/chat", json=chat_body("t-live", user_message(SECRET)))
        )
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        for stranger in strangers:
            for route, method in (("", "GET"), ("/stream", "GET"), ("/stop", "POST")):
                for thread in ("t-done", "t-live"):
                    theirs = await answer(stranger, method, f"/{prefix}/api/chat/{thread}{route}")
                    missing = await answer(stranger, method, f"/{prefix}/api/chat/nope{route}")
                    assert theirs == missing, (route, thread)
                    assert SECRET.encode() not in theirs[1]
        still = (await owner.get(f"/{prefix}/agent/threads/t-live/")).json()
        GATE.released.set()
        await live
        for stranger in strangers:
            # Posting on the owner's thread id starts the stranger's own thread.
            own = await stranger.post(
                f"/{prefix}/api/chat", json=chat_body("t-done", user_message("mine", "u-x"))
            )
            assert own.status_code == 200
            assert SECRET not in own.text
            assert text_of(chunks(own.text)) == "Working done."
        shown = (await owner.get(f"/{prefix}/api/chat/t-done")).json()

    assert still["activeRun"] is not None  # nobody else could stop it
    assert [m["role"] for m in shown] == ["user", "assistant"]
    assert SECRET in shown[0]["parts"][0]["text"]


async def test_a_visitor_without_a_session_owns_nothing(client: Any) -> None:
    read = await client.get("/anon/api/chat/t-1")
    stream = await client.get("/anon/api/chat/t-1/stream")
    stop = await client.post("/anon/api/chat/t-1/stop")

    assert read.status_code == 404
    assert stream.status_code == 204
    assert (stop.status_code, stop.json()["cancelled"]) == (200, False)
    assert "sessionid" not in client.cookies


def posting(message: str, extra: str = "") -> bytes:
    """A body whose one message is the raw JSON ``message`` (``extra``: more raw keys)."""
    return f'{{"id": "t", "messages": [{message}]{extra}}}'.encode()


USER = '{"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]}'


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"[]", "not an object"),
        (b'"text"', "not an object"),
        (b'{"id": "t", "messages": ' + b"[" * 200 + b"]" * 200 + b"}", "nested too deeply"),
        (posting('{"id": 1, "role": "user", "parts": []}'), "messages.0.id"),
        (posting('{"id": "u", "role": "user", "parts": "x"}'), "messages.0.parts"),
        (posting('{"id": "u", "role": "user", "parts": [{"type": "nope"}]}'), "parts.0"),
        (posting(USER.replace("hi", "\\ud800")), "surrogate"),
        (posting(USER, ', "state": NaN'), "NaN"),
        (b'{"id": "t\\u0000", "messages": []}', "id (the chat id)"),
        (posting(USER.replace('"user"', '"assistant"')), "assistant message"),
        (posting(USER, ', "tools": [{"name": "add", "description": "x"}]'), "agent's own tools"),
    ],
)
async def test_malformed_bodies_are_a_400_naming_the_problem(
    alice: Any, body: bytes, problem: str
) -> None:
    async with await logged_in(alice) as http:
        response = await http.post(
            "/s/api/chat", content=body, headers={"content-type": "application/json"}
        )

    assert response.status_code == 400, response.text
    assert problem in response.json()["error"]
    assert not await StoredConversation.objects.aexists()


async def test_oversized_bodies_are_refused_before_they_are_read(alice: Any) -> None:
    big = json.dumps(chat_body("t-big", user_message("x" * 5000))).encode()

    async def chunked() -> Any:
        for start in range(0, len(big), 1000):
            yield big[start : start + 1000]

    async with await logged_in(alice) as http:
        declared = await http.post(
            "/tiny/api/chat", content=big, headers={"content-type": "application/json"}
        )
        streamed = await http.post(
            "/tiny/api/chat", content=chunked(), headers={"content-type": "application/json"}
        )
        stop = await http.post(
            "/tiny/api/chat/t-big/stop", content=big, headers={"content-type": "application/json"}
        )

    for response in (declared, streamed, stop):
        assert response.status_code == 413, response.text
        assert "2000 bytes" in response.json()["error"]
    assert not await StoredMessage.objects.aexists()


async def test_cross_site_requests_are_refused_where_cookies_authenticate(alice: Any) -> None:
    async with await logged_in(alice) as http:
        no_token = await http.post("/csrf/api/chat", json=chat_body("t-csrf"))
        stop = await http.post("/csrf/api/chat/t-csrf/stop")
        read = await http.get("/csrf/api/chat/t-csrf")
        http.cookies.set("csrftoken", CSRF_SECRET)
        with_token = await http.post(
            "/csrf/api/chat", json=chat_body("t-csrf"), headers={"X-CSRFToken": CSRF_SECRET}
        )

    assert no_token.status_code == 403
    assert "CSRF" in no_token.json()["error"]
    assert stop.status_code == 403
    assert read.status_code == 404  # a read needs no token: the thread does not exist yet
    assert with_token.status_code == 200
    assert text_of(chunks(with_token.text)) == "The sum is 5."
