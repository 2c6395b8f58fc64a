"""The cross-owner matrix: every route x every store x four identities, over real HTTP.

Owner A (user alice) creates, on each store, a finished thread with a secret in its prompt and
title, a run held open (for reattach and cancel) and an attachment. Then B (user bob) and two
anonymous visitors, each with a real session, try every route on A's ids. A response leaks if
any byte of A's secret appears in it; a "not yours" answer must be byte-identical (status,
headers, body) to the answer for an id that never existed; and A's data must read the same
afterwards, with A's held run still running until A cancels it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.urls import path

from django_pydantic_agent.agui import AGUIServer
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from django_pydantic_agent.memory_service import DRMemoryServiceClient
from django_pydantic_agent.persistence import (
    DjangoSessionConversationStore,
    ScopedConversationStore,
)
from django_pydantic_agent.persistence.memory_service import (
    MemoryServiceAttachmentStore,
    MemoryServiceConversationStore,
)
from tests.agui.conftest import run_body, session_cookie, sse_events
from tests.reliability.stack import HOLD, Served, echo_agent, serve
from tests.support.emulator import no_faults_armed

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

#: Every piece of A's content carries this; no other identity may ever see it.
SECRET = "alice-secret-5c1e"
#: Headers that legitimately differ between two answers (a clock, a session refresh).
_VOLATILE_HEADERS = frozenset({"date", "set-cookie"})

#: Which stores serve anonymous visitors (the others refuse them with the documented status).
STORES = ("session", "default", "scoped", "memory")
SERVES_ANONYMOUS = {"session": True, "default": False, "scoped": True, "memory": True}
IDENTITIES = ("user-b", "anonymous-1", "anonymous-2")


def _servers(client: DRMemoryServiceClient | None) -> dict[str, AGUIServer]:
    common: dict[str, Any] = {
        "require_authenticated": False,
        "csrf_exempt": True,
        "attachment_max_bytes": 4096,
    }
    servers = {
        "session": AGUIServer(
            echo_agent(),
            conversation_store=DjangoSessionConversationStore(),
            attachment_store=DefaultAttachmentStore(allow_anonymous=True),
            namespace="owners-session",
            **common,
        ),
        "default": AGUIServer(
            echo_agent(),
            conversation_store=DefaultConversationStore(),
            attachment_store=DefaultAttachmentStore(),
            namespace="owners-default",
            **common,
        ),
        "scoped": AGUIServer(
            echo_agent(),
            conversation_store=ScopedConversationStore(
                DefaultConversationStore(allow_anonymous=True), scope="owners"
            ),
            attachment_store=DefaultAttachmentStore(allow_anonymous=True),
            namespace="owners-scoped",
            **common,
        ),
    }
    if client is not None:
        space = f"owners-{uuid.uuid4().hex}"
        servers["memory"] = AGUIServer(
            echo_agent(),
            conversation_store=MemoryServiceConversationStore(client, space, allow_anonymous=True),
            attachment_store=MemoryServiceAttachmentStore(client, space, allow_anonymous=True),
            namespace="owners-memory",
            **common,
        )
    return servers


@dataclass
class Owned:
    """A's ids on one store."""

    finished_thread: str
    finished_run: str
    held_thread: str
    held_run: str
    attachment: str


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @classmethod
    def of(cls, response: httpx.Response) -> Answer:
        headers = {
            name.lower(): value
            for name, value in response.headers.items()
            if name.lower() not in _VOLATILE_HEADERS
        }
        return cls(response.status_code, headers, response.content)

    def leaks(self) -> bool:
        return SECRET.encode() in self.body or any(SECRET in v for v in self.headers.values())


@pytest.fixture
async def alice() -> Any:
    return await get_user_model().objects.acreate_user("alice", password="pw-alice")


@pytest.fixture
async def bob() -> Any:
    return await get_user_model().objects.acreate_user("bob", password="pw-bob")


@pytest.fixture
async def stack() -> AsyncIterator[tuple[Served, dict[str, AGUIServer]]]:
    with no_faults_armed():
        async with serve() as served, httpx.AsyncClient(timeout=30) as pool:
            client = DRMemoryServiceClient(
                endpoint=f"{served.origin}/api/v2", api_token="token-owners", http_client=pool
            )
            servers = _servers(client)
            served.mount(path(f"{name}/", server.urls) for name, server in servers.items())
            yield served, servers
            await RunCoordinator.wait_for_all_runs()


async def _client(served: Served, user: Any = None) -> httpx.AsyncClient:
    http = httpx.AsyncClient(base_url=served.origin, timeout=30)
    if user is not None:
        http.cookies.set(settings.SESSION_COOKIE_NAME, await session_cookie(user))
    return http


async def _run(http: httpx.AsyncClient, store: str, body: dict[str, Any]) -> httpx.Response:
    return await http.post(f"/{store}/", json=body)


async def _hold(http: httpx.AsyncClient, store: str, thread: str, run: str) -> None:
    """Start a run that waits until cancelled; read until its first text, then hang up."""
    body = run_body(thread_id=thread, run_id=run, text=f"{HOLD} {SECRET}")
    seen = ""
    async with http.stream("POST", f"/{store}/", json=body) as response:
        assert response.status_code == 200
        async for chunk in response.aiter_text():
            seen += chunk
            if "TEXT_MESSAGE_CONTENT" in seen:
                break


async def _create(http: httpx.AsyncClient, store: str) -> Owned:
    owned = Owned(
        finished_thread=f"{store}-notes",
        finished_run="run-notes",
        held_thread=f"{store}-live",
        held_run="run-live",
        attachment="",
    )
    body = run_body(
        thread_id=owned.finished_thread, run_id=owned.finished_run, text=f"plans {SECRET}"
    )
    done = await _run(http, store, body)
    assert sse_events(done.text)[-1]["type"] == "RUN_FINISHED", done.text
    renamed = await http.patch(
        f"/{store}/threads/{owned.finished_thread}/", json={"title": f"Title {SECRET}"}
    )
    assert renamed.status_code == 200, renamed.text
    upload = await http.post(
        f"/{store}/attachments/",
        files={"file": (f"{SECRET}.txt", f"bytes of {SECRET}".encode(), "text/plain")},
    )
    assert upload.status_code == 201, upload.text
    owned.attachment = upload.json()["id"]
    await _hold(http, store, owned.held_thread, owned.held_run)
    return owned


async def _snapshot(http: httpx.AsyncClient, store: str, owned: Owned) -> list[Any]:
    """What A reads of its own data (the held thread grows, so only its existence counts)."""
    listed = (await http.get(f"/{store}/threads/")).json()
    thread = (await http.get(f"/{store}/threads/{owned.finished_thread}/")).json()
    attachment = await http.get(f"/{store}/attachments/{owned.attachment}/")
    held = (await http.get(f"/{store}/threads/{owned.held_thread}/")).json()
    return [
        sorted((row["threadId"], row["title"]) for row in listed["threads"]),
        thread,
        attachment.status_code,
        attachment.content,
        held["activeRun"]["runId"] if held.get("activeRun") else None,
    ]


@dataclass(frozen=True)
class Probe:
    """One request on A's ids, and the same request on ids that never existed."""

    route: str
    method: str
    url: str
    missing_url: str | None
    json: Any = None


def _probes(store: str, owned: Owned) -> list[Probe]:
    nope = f"never-{uuid.uuid4().hex[:8]}"
    missing_attachment = uuid.uuid4().hex
    runs = f"/{store}/runs"
    threads = f"/{store}/threads"
    attachments = f"/{store}/attachments"
    return [
        Probe(
            "reattach live",
            "GET",
            f"{runs}/{owned.held_thread}/{owned.held_run}/",
            f"{runs}/{nope}/{nope}/",
        ),
        Probe(
            "reattach finished",
            "GET",
            f"{runs}/{owned.finished_thread}/{owned.finished_run}/?after=1",
            f"{runs}/{nope}/{nope}/?after=1",
        ),
        Probe(
            "cancel",
            "POST",
            f"{runs}/{owned.held_thread}/{owned.held_run}/cancel/",
            f"{runs}/{nope}/{nope}/cancel/",
        ),
        Probe("thread list", "GET", f"{threads}/", None),
        Probe("thread get", "GET", f"{threads}/{owned.finished_thread}/", f"{threads}/{nope}/"),
        Probe("thread get live", "GET", f"{threads}/{owned.held_thread}/", f"{threads}/{nope}/"),
        Probe(
            "thread rename",
            "PATCH",
            f"{threads}/{owned.finished_thread}/",
            f"{threads}/{nope}/",
            {"title": "taken over"},
        ),
        Probe(
            "thread delete", "DELETE", f"{threads}/{owned.finished_thread}/", f"{threads}/{nope}/"
        ),
        Probe(
            "attachment get",
            "GET",
            f"{attachments}/{owned.attachment}/",
            f"{attachments}/{missing_attachment}/",
        ),
        Probe(
            "attachment delete",
            "DELETE",
            f"{attachments}/{owned.attachment}/",
            f"{attachments}/{missing_attachment}/",
        ),
    ]


async def _send(http: httpx.AsyncClient, method: str, url: str, body: Any) -> Answer:
    return Answer.of(await http.request(method, url, json=body))


#: What a stranger gets on each route: from a store that serves them, and from one that
#: refuses anonymous visitors (403 from the store's policy; the run routes answer 404, as
#: for any run that is not the caller's).
_EXPECTED = {
    "reattach live": (404, 404),
    "reattach finished": (404, 404),
    "cancel": (404, 404),
    "thread list": (200, 403),
    "thread get": (404, 403),
    "thread get live": (404, 403),
    "thread rename": (404, 403),
    "thread delete": (204, 403),
    "attachment get": (404, 403),
    "attachment delete": (204, 403),
    "attachment upload": (201, 403),
    "run on A's thread": (200, 403),
    "run as A's live run": (200, 403),
}


async def test_no_identity_reaches_another_owners_threads_runs_or_files(
    stack: tuple[Served, dict[str, AGUIServer]], alice: Any, bob: Any
) -> None:
    served, _ = stack
    owner = await _client(served, alice)
    others = {
        "user-b": await _client(served, bob),
        "anonymous-1": await _client(served),
        "anonymous-2": await _client(served),
    }
    try:
        for name in ("anonymous-1", "anonymous-2"):  # a real session of their own
            own = await others[name].post(
                "/session/attachments/",
                files={"file": ("mine.txt", name.encode(), "text/plain")},
            )
            assert own.status_code == 201
        assert others["anonymous-1"].cookies.get(settings.SESSION_COOKIE_NAME) != others[
            "anonymous-2"
        ].cookies.get(settings.SESSION_COOKIE_NAME)
        owned = {store: await _create(owner, store) for store in STORES}
        before = {store: await _snapshot(owner, store, owned[store]) for store in STORES}
        # The probes can see a leak: A itself reads its secret on every store.
        for store in STORES:
            assert SECRET in json.dumps(before[store][1])
            assert SECRET.encode() in before[store][3]

        requests = leaks = mismatches = 0
        problems: list[str] = []
        for store in STORES:
            for identity in IDENTITIES:
                http = others[identity]
                served_here = SERVES_ANONYMOUS[store] or identity == "user-b"
                for probe in _probes(store, owned[store]):
                    answer = await _send(http, probe.method, probe.url, probe.json)
                    requests += 1
                    expected = _EXPECTED[probe.route][0 if served_here else 1]
                    if answer.leaks():
                        leaks += 1
                        problems.append(f"LEAK {store} {identity} {probe.route}")
                    if answer.status != expected:
                        problems.append(
                            f"{store} {identity} {probe.route}: {answer.status}, expected "
                            f"{expected}: {answer.body[:200]!r}"
                        )
                    if probe.route == "thread list" and answer.status == 200:
                        ids = [row["threadId"] for row in json.loads(answer.body)["threads"]]
                        if {owned[store].finished_thread, owned[store].held_thread} & set(ids):
                            leaks += 1
                            problems.append(f"LEAK {store} {identity} list shows A's thread")
                    if probe.missing_url is not None:
                        missing = await _send(http, probe.method, probe.missing_url, probe.json)
                        requests += 1
                        if missing != answer:
                            mismatches += 1
                            problems.append(
                                f"{store} {identity} {probe.route}: not-yours {answer} "
                                f"!= missing {missing}"
                            )
                # Writes that name A's ids: an upload, and runs on A's thread and run ids.
                upload = Answer.of(
                    await http.post(
                        f"/{store}/attachments/",
                        files={"file": ("theirs.txt", b"their own bytes", "text/plain")},
                    )
                )
                posted = [
                    (
                        "run on A's thread",
                        Answer.of(
                            await _run(
                                http,
                                store,
                                run_body(
                                    thread_id=owned[store].finished_thread,
                                    run_id=f"run-{identity}",
                                    text=f"hello from {identity}",
                                ),
                            )
                        ),
                    ),
                    (
                        "run as A's live run",
                        Answer.of(
                            await _run(
                                http,
                                store,
                                run_body(
                                    thread_id=owned[store].held_thread,
                                    run_id=owned[store].held_run,
                                    text=f"hi from {identity}",
                                ),
                            )
                        ),
                    ),
                ]
                requests += 3
                for route, answer in [("attachment upload", upload), *posted]:
                    expected = _EXPECTED[route][0 if served_here else 1]
                    if answer.leaks():
                        leaks += 1
                        problems.append(f"LEAK {store} {identity} {route}")
                    if answer.status != expected:
                        problems.append(
                            f"{store} {identity} {route}: {answer.status}, expected {expected}"
                        )
                if (
                    upload.status == 201
                    and json.loads(upload.body)["id"] == owned[store].attachment
                ):
                    leaks += 1
                    problems.append(f"LEAK {store} {identity} upload reused A's attachment id")
                for route, answer in posted:
                    if answer.status == 200:
                        events = sse_events(answer.body.decode())
                        if events[-1]["type"] != "RUN_FINISHED":
                            problems.append(f"{store} {identity} {route}: {events[-1]}")

        after = {store: await _snapshot(owner, store, owned[store]) for store in STORES}
        changed = [store for store in STORES if after[store] != before[store]]
        cells = len(STORES) * len(IDENTITIES) * (len(_probes("x", owned["session"])) + 3)
        print(
            f"FIGURE cross-owner matrix: {len(STORES)} stores x {len(IDENTITIES)} identities x "
            f"{cells // (len(STORES) * len(IDENTITIES))} routes = {cells} cells, "
            f"{requests} requests; leaks={leaks}; not-yours!=missing={mismatches}; "
            f"A's data changed on {len(changed)} stores"
        )
        assert problems == []
        assert changed == []
        # A's held runs were never stopped by a stranger: A cancels them now.
        for store in STORES:
            thread, run = owned[store].held_thread, owned[store].held_run
            cancelled = await owner.post(f"/{store}/runs/{thread}/{run}/cancel/")
            assert cancelled.status_code == 202, (store, cancelled.text)
            tail = await owner.get(f"/{store}/runs/{thread}/{run}/")
            assert sse_events(tail.text)[-1]["type"] == "RUN_FINISHED"
    finally:
        for http in [owner, *others.values()]:
            await http.aclose()
