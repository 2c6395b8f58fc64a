"""Fuzzing: Hypothesis drives the input of every route, and the server never fails on it.

Run bodies (JSON-ish values, wrong types, NaN, NUL, unpaired surrogates, long strings, forged
assistant and tool turns, bad ``resume``), ids in URLs, titles, uploads (names, types, sizes
around the cap), ``after=`` cursors, ``Last-Event-ID`` and ``?limit=``. For every example: no
5xx; every error is a JSON ``{"error": "..."}`` with a sentence; a stream ends with
``RUN_FINISHED`` or ``RUN_ERROR``; and nothing is logged at ``ERROR`` or with a traceback.
Each route has a fixed ``max_examples``, derandomized, so a run is reproducible and bounded.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.urls import path
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, AttachmentOptions, MountOptions
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from django_pydantic_agent.persistence import DjangoSessionConversationStore
from tests.agui.conftest import asgi_app, run_body, session_cookie, sse_events

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

# Built at collection: building it inside a test would detach pytest's log capture.
asgi_app()

UPLOAD_CAP = 2048
#: Examples per route; the figures in docs/reliability.md come from these counts.
EXAMPLES = {
    "run": 500,
    "ids": 300,
    "title": 150,
    "upload": 200,
    "cursor": 150,
    "listing": 200,
    "archive": 100,
}
TALLY: Counter[str] = Counter()
STATUSES: Counter[int] = Counter()
FAILURES: Counter[str] = Counter()


def _fuzz(route: str) -> Any:
    return hypothesis_settings(
        max_examples=EXAMPLES[route],
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


async def _answer(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    yield "Fine, "
    yield "thanks."


SERVERS = {
    "default": AGUIServer(
        Agent(FunctionModel(stream_function=_answer)),
        conversation_store=DefaultConversationStore(),
        attachment_store=DefaultAttachmentStore(),
        attachments=AttachmentOptions(
            max_bytes=UPLOAD_CAP, allowed_types=("text/plain", "image/*")
        ),
        access=AccessPolicy(csrf_exempt=True),
        mount=MountOptions(namespace="fuzz-default"),
    ),
    "session": AGUIServer(
        Agent(FunctionModel(stream_function=_answer)),
        conversation_store=DjangoSessionConversationStore(),
        access=AccessPolicy(csrf_exempt=True),
        mount=MountOptions(namespace="fuzz-session"),
    ),
}
urlpatterns = [path(f"{name}/", server.urls) for name, server in SERVERS.items()]

# -- strategies -------------------------------------------------------------------------

#: Any code point, unpaired surrogates and NUL included.
hostile_char = st.characters(exclude_categories=())
hostile_text = st.text(hostile_char, max_size=40) | st.sampled_from(
    ["", "\x00", "\ud800", "a\udfffb", "\u202e", "..", ".", "/", "%2F", "x" * 3000, "é" * 300]
)
ids = hostile_text | st.uuids().map(str) | st.sampled_from(["thread-1", "run-1", "0"])
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | hostile_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=12,
)
roles = (
    st.sampled_from(["user", "assistant", "tool", "system", "developer", "reasoning", "activity"])
    | hostile_text
)
parts = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "binary", "image", "audio", "document", "file"]) | ids},
    optional={
        "text": hostile_text,
        "mimeType": hostile_text,
        "data": hostile_text,
        "url": st.sampled_from(["https://example.com/a.png", "file:///etc/passwd", "data:,x"])
        | hostile_text,
        "source": json_values,
    },
)
tool_calls = st.fixed_dictionaries(
    {
        "id": ids,
        "type": st.just("function") | hostile_text,
        "function": st.fixed_dictionaries({"name": ids, "arguments": hostile_text}) | json_values,
    }
)
messages = st.fixed_dictionaries(
    {"id": ids, "role": roles},
    optional={
        "content": hostile_text | st.lists(parts, max_size=3) | json_values,
        "toolCalls": st.lists(tool_calls, max_size=2) | json_values,
        "toolCallId": ids,
        "name": hostile_text,
        "error": hostile_text,
        "encryptedValue": hostile_text,
    },
)
run_bodies = st.fixed_dictionaries(
    {"threadId": ids, "runId": ids, "messages": st.lists(messages, max_size=4)},
    optional={
        "state": json_values,
        "tools": st.lists(
            st.fixed_dictionaries(
                {"name": ids, "description": hostile_text, "parameters": json_values}
            ),
            max_size=2,
        )
        | json_values,
        "context": st.lists(json_values, max_size=2),
        "forwardedProps": json_values,
        "parentRunId": ids,
        "resume": json_values
        | st.lists(
            st.fixed_dictionaries(
                {"interruptId": ids, "status": st.sampled_from(["resolved", "cancelled"]) | ids},
                optional={"payload": json_values},
            ),
            max_size=2,
        ),
    },
)
# A user turn, then forged or odd turns: assistant and tool messages the server never streamed.
forged_turns = st.fixed_dictionaries(
    {
        "id": ids,
        "role": st.sampled_from(["assistant", "tool", "reasoning", "user", "system"]),
        "content": hostile_text,
    },
    optional={"toolCallId": ids, "toolCalls": st.lists(tool_calls, max_size=2)},
)
plausible_bodies = st.builds(
    lambda thread, run, text, rest, resume: {
        **run_body(thread_id=thread, run_id=run, text=text),
        "messages": [{"id": f"user-{run}", "role": "user", "content": text}, *rest],
        **({} if resume is None else {"resume": resume}),
    },
    st.uuids().map(str) | st.sampled_from(["thread-1", "thread-2"]),
    st.uuids().map(str),
    hostile_text,
    st.lists(forged_turns, max_size=3),
    st.none() | json_values,
)
# A valid body with one field replaced by anything.
mutated_bodies = st.builds(
    lambda field, value: {**run_body(), field: value},
    st.sampled_from(["threadId", "runId", "messages", "state", "tools", "context", "resume"]),
    json_values,
)


def _encode(body: Any) -> bytes:
    """``body`` as JSON text; unpaired surrogates become ``\\udXXX`` escapes, as JS sends them."""
    if isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def _segment(value: str) -> str:
    """``value`` as one URL path segment, percent-encoded (surrogates as their raw bytes)."""
    return urllib.parse.quote(value, safe="", errors="surrogatepass")


# -- checks -------------------------------------------------------------------------------


def _check(route: str, response: httpx.Response, caplog: pytest.LogCaptureFixture) -> None:
    """The house rules for one answer; counts the example and any failure."""
    TALLY[route] += 1
    STATUSES[response.status_code] += 1
    try:
        assert response.status_code < 500, (response.status_code, response.text[:300])
        if response.status_code >= 400 and response.request.method != "HEAD":
            assert response.headers["content-type"] == "application/json", response.text[:200]
            error = response.json()["error"]
            assert isinstance(error, str), error
            assert len(error.split()) >= 3, error
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            events = sse_events(response.text)
            assert events, response.text[:200]
            assert events[-1]["type"] in ("RUN_FINISHED", "RUN_ERROR"), events[-1]
        logged = [
            f"{r.name} {r.levelname} {r.getMessage()[:200]}"
            for r in caplog.records
            if r.levelno >= logging.ERROR or r.exc_info
        ]
        assert logged == [], logged
    except AssertionError:
        FAILURES[route] += 1
        raise
    finally:
        caplog.clear()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    user = await get_user_model().objects.acreate_user("fuzzer", password="pw-fuzzer")
    transport = httpx.ASGITransport(app=asgi_app())
    with override_settings(ROOT_URLCONF=__name__):
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            client.cookies.set(settings.SESSION_COOKIE_NAME, await session_cookie(user))
            yield client
            await RunCoordinator.wait_for_all_runs()


@pytest.fixture
def quiet_caplog(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING)
    return caplog


async def _post_run(http: httpx.AsyncClient, store: str, body: bytes) -> httpx.Response:
    response = await http.post(
        f"/{store}/", content=body, headers={"Content-Type": "application/json"}
    )
    await RunCoordinator.wait_for_all_runs()
    return response


# -- the routes ---------------------------------------------------------------------------


@_fuzz("run")
@given(
    store=st.sampled_from(sorted(SERVERS)),
    body=plausible_bodies | run_bodies | mutated_bodies | json_values | st.binary(max_size=64),
)
@example(store="default", body=b"[" * 5000 + b"]" * 5000)
@example(store="default", body=b'{"threadId": "' + b"x" * 3_000_000 + b'"}')
@example(store="default", body={**run_body(), "messages": [{"id": "u", "role": "user"}]})
@example(
    store="default",
    body={
        **run_body(thread_id="forged"),
        "messages": [
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": "a1", "role": "assistant", "content": "I was never said."},
            {"id": "t1", "role": "tool", "toolCallId": "never-issued", "content": "42"},
        ],
    },
)
@example(
    store="session", body={**run_body(), "resume": [{"interruptId": "x", "status": "resolved"}]}
)
async def test_run_bodies(
    http: httpx.AsyncClient, quiet_caplog: pytest.LogCaptureFixture, store: str, body: Any
) -> None:
    _check("run", await _post_run(http, store, _encode(body)), quiet_caplog)


@_fuzz("ids")
@given(
    route=st.sampled_from(["thread", "reattach", "cancel", "attachment"]),
    method=st.sampled_from(["GET", "POST", "PATCH", "DELETE", "PUT"]),
    first=ids,
    second=ids,
)
async def test_ids_in_urls(
    http: httpx.AsyncClient,
    quiet_caplog: pytest.LogCaptureFixture,
    route: str,
    method: str,
    first: str,
    second: str,
) -> None:
    a, b = _segment(first), _segment(second)
    url = {
        "thread": f"/default/threads/{a}/",
        "reattach": f"/default/runs/{a}/{b}/",
        "cancel": f"/default/runs/{a}/{b}/cancel/",
        "attachment": f"/default/attachments/{a}/",
    }[route]
    kwargs: dict[str, Any] = {}
    if method in ("POST", "PATCH", "PUT"):
        kwargs["json"] = {"title": "Renamed"}
    response = await http.request(method, url, **kwargs)
    if response.status_code == 404 and "json" not in response.headers.get("content-type", ""):
        # Django's own 404: an id that decodes to a path no route matches ("a/b", "", "..").
        TALLY["ids (outside the routes)"] += 1
        assert "/" in first + second or not (first and second) or {first, second} & {".", ".."}
        return
    _check("ids", response, quiet_caplog)


@_fuzz("title")
@given(body=st.fixed_dictionaries({"title": json_values | hostile_text}) | json_values)
@example(body={"title": "  Plans \n for \t Monday  "})
@example(body={"title": "x" * 201})
async def test_titles(
    http: httpx.AsyncClient, quiet_caplog: pytest.LogCaptureFixture, body: Any
) -> None:
    if TALLY["title"] == 0:
        created = await _post_run(http, "default", _encode(run_body(thread_id="titled")))
        assert created.status_code == 200
    response = await http.patch(
        "/default/threads/titled/",
        content=_encode(body),
        headers={"Content-Type": "application/json"},
    )
    _check("title", response, quiet_caplog)
    if response.status_code == 200:
        title = response.json()["title"]
        assert title == " ".join(body["title"].split())


def _multipart(field: str, name: str, content_type: str, data: bytes) -> tuple[bytes, str]:
    """A multipart body written by hand, so names and types go out exactly as drawn."""
    boundary = "fuzzboundary7d3a"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; '
        f'filename="{name}"\r\nContent-Type: {content_type}\r\n\r\n'
    ).encode("utf-8", "surrogatepass")
    body = head + data + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


@_fuzz("upload")
@given(
    field=st.just("file") | hostile_text,
    name=hostile_text,
    content_type=st.sampled_from(["text/plain", "image/png", "application/pdf", "TEXT/PLAIN"])
    | hostile_text,
    size=st.integers(min_value=0, max_value=2 * UPLOAD_CAP),
)
@example(field="file", name="notes.txt", content_type="text/plain", size=UPLOAD_CAP)
@example(field="file", name='"; x=\udc80\r\n.txt', content_type="image/png", size=1)
@example(field="file", name="ok.txt", content_type="text/plain", size=UPLOAD_CAP + 1)
async def test_uploads(
    http: httpx.AsyncClient,
    quiet_caplog: pytest.LogCaptureFixture,
    field: str,
    name: str,
    content_type: str,
    size: int,
) -> None:
    body, declared = _multipart(field, name, content_type, b"x" * size)
    response = await http.post(
        "/default/attachments/", content=body, headers={"Content-Type": declared}
    )
    _check("upload", response, quiet_caplog)
    if response.status_code == 201:
        assert response.json()["size"] == size <= UPLOAD_CAP


cursor_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30)


@_fuzz("cursor")
@given(
    after=st.none() | cursor_text | st.integers(-5, 10**20).map(str),
    last_event_id=st.none() | cursor_text | st.integers(0, 50).map(lambda n: f"run-1:{n}"),
    limit=st.none() | cursor_text | st.integers(-5, 10**6).map(str),
)
@example(after="3", last_event_id=None, limit=None)
async def test_cursors(
    http: httpx.AsyncClient,
    quiet_caplog: pytest.LogCaptureFixture,
    after: str | None,
    last_event_id: str | None,
    limit: str | None,
) -> None:
    if TALLY["cursor"] == 0:
        created = await _post_run(http, "default", _encode(run_body(thread_id="cursor")))
        assert created.status_code == 200
    params = {} if after is None else {"after": after}
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    response = await http.get("/default/runs/cursor/run-1/", params=params, headers=headers)
    _check("cursor", response, quiet_caplog)
    listed = await http.get("/default/threads/", params={} if limit is None else {"limit": limit})
    _check("cursor", listed, quiet_caplog)


listing_values = (
    st.none()
    | hostile_text
    | st.sampled_from(
        ["0", "1", "all", "true", "2026-12-01T09:30:00Z", "2026-12-01", "9999-99-99T99:99", "-1"]
    )
)


@_fuzz("listing")
@given(
    q=listing_values,
    archived=listing_values,
    updated_after=listing_values,
    updated_before=listing_values,
    cursor=listing_values | st.sampled_from(["TAMPER", "OTHER-FILTERS"]),
    limit=listing_values,
)
@example(q="plans", archived="all", updated_after=None, updated_before=None, cursor=None, limit="1")
@example(
    q=None, archived=None, updated_after=None, updated_before=None, cursor="TAMPER", limit=None
)
@example(
    q="fine",
    archived=None,
    updated_after=None,
    updated_before=None,
    cursor="OTHER-FILTERS",
    limit="1",
)
async def test_listing_parameters(
    http: httpx.AsyncClient,
    quiet_caplog: pytest.LogCaptureFixture,
    q: str | None,
    archived: str | None,
    updated_after: str | None,
    updated_before: str | None,
    cursor: str | None,
    limit: str | None,
) -> None:
    if TALLY["listing"] == 0:
        for thread in ("listed-1", "listed-2"):
            created = await _post_run(http, "default", _encode(run_body(thread_id=thread)))
            assert created.status_code == 200
    tampered = cursor == "TAMPER"
    if cursor in ("TAMPER", "OTHER-FILTERS"):
        # A real cursor, altered by one character or sent with other filters.
        first = await http.get("/default/threads/", params={"limit": "1"})
        real = first.json()["nextCursor"]
        assert real
        cursor = real[:-1] + ("A" if real[-1] != "A" else "B") if cursor == "TAMPER" else real
    drawn = {
        "q": q,
        "archived": archived,
        "updated_after": updated_after,
        "updated_before": updated_before,
        "cursor": cursor,
        "limit": limit,
    }
    params = {key: value for key, value in drawn.items() if value is not None}
    query = urllib.parse.urlencode(
        {k: v.encode("utf-8", "surrogatepass") for k, v in params.items()}
    )
    for store in ("default", "session"):
        response = await http.get(f"/{store}/threads/?{query}")
        _check("listing", response, quiet_caplog)
        assert not tampered or response.status_code == 400
        if response.status_code == 200:
            body = response.json()
            assert set(body) == {"threads", "nextCursor"}


@_fuzz("archive")
@given(body=st.fixed_dictionaries({"archived": json_values}) | json_values)
@example(body={"archived": True})
@example(body={"archived": "true"})
@example(body={"archived": False, "title": ""})
async def test_archive_bodies(
    http: httpx.AsyncClient, quiet_caplog: pytest.LogCaptureFixture, body: Any
) -> None:
    if TALLY["archive"] == 0:
        created = await _post_run(http, "default", _encode(run_body(thread_id="shelved")))
        assert created.status_code == 200
    response = await http.patch(
        "/default/threads/shelved/",
        content=_encode(body),
        headers={"Content-Type": "application/json"},
    )
    _check("archive", response, quiet_caplog)
    if response.status_code == 200:
        assert response.json()["archived"] is body["archived"]


def test_figure() -> None:
    """Print what the fuzzing tests above ran (they run first, in file order)."""
    runs = ", ".join(f"{route}={TALLY[route]}" for route in sorted(TALLY))
    print(
        f"FIGURE fuzzing: {sum(TALLY.values())} requests from Hypothesis examples ({runs}); "
        f"statuses {dict(sorted(STATUSES.items()))}; failures={sum(FAILURES.values())}"
    )
    assert sum(FAILURES.values()) == 0
