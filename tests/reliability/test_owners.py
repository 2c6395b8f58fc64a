"""The cross-owner matrix: every route x every store x four identities, over real HTTP.

On each store an owner creates a finished thread with a secret in its prompt and title, a run
held open (for reattach and cancel) and an attachment. The owners are user A on every store and
anonymous visitor 1 on the stores that serve visitors; each of the three other identities
(users A and B, anonymous visitors 1 and 2, each with a real session) tries every route on the
owner's ids. A response leaks if any byte of the owner's secret appears in it; a "not yours"
answer must be byte-identical (status, headers, body) to the answer for an id that never
existed; and the owner's data must read the same afterwards, its held run still running until
the owner cancels it. On the store that refuses visitors, their every request is refused with
the documented status (403 from the store's policy; 404 on the run routes).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.urls import path

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, AttachmentOptions, MountOptions
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

#: Every piece of an owner's content carries its secret; no other identity may ever see it.
SECRETS = {"user-a": "alice-secret-5c1e", "anonymous-1": "visitor-secret-9b2d"}
#: Headers that legitimately differ between two answers (a clock, a session refresh).
_VOLATILE_HEADERS = frozenset({"date", "set-cookie"})

#: Which stores serve anonymous visitors (the others refuse them with the documented status).
STORES = ("session", "default", "scoped", "memory")
SERVES_ANONYMOUS = {"session": True, "default": False, "scoped": True, "memory": True}
IDENTITIES = ("user-a", "user-b", "anonymous-1", "anonymous-2")


def _servers(client: DRMemoryServiceClient | None) -> dict[str, AGUIServer]:
    common: dict[str, Any] = {
        "access": AccessPolicy(require_authenticated=False, csrf_exempt=True),
        "attachments": AttachmentOptions(max_bytes=4096),
    }
    servers = {
        "session": AGUIServer(
            echo_agent(),
            conversation_store=DjangoSessionConversationStore(),
            attachment_store=DefaultAttachmentStore(allow_anonymous=True),
            mount=MountOptions(namespace="owners-session"),
            **common,
        ),
        "default": AGUIServer(
            echo_agent(),
            conversation_store=DefaultConversationStore(),
            attachment_store=DefaultAttachmentStore(),
            mount=MountOptions(namespace="owners-default"),
            **common,
        ),
        "scoped": AGUIServer(
            echo_agent(),
            conversation_store=ScopedConversationStore(
                DefaultConversationStore(allow_anonymous=True), scope="owners"
            ),
            attachment_store=DefaultAttachmentStore(allow_anonymous=True),
            mount=MountOptions(namespace="owners-scoped"),
            **common,
        ),
    }
    if client is not None:
        space = f"owners-{uuid.uuid4().hex}"
        servers["memory"] = AGUIServer(
            echo_agent(),
            conversation_store=MemoryServiceConversationStore(client, space, allow_anonymous=True),
            attachment_store=MemoryServiceAttachmentStore(client, space, allow_anonymous=True),
            mount=MountOptions(namespace="owners-memory"),
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

    def leaks(self, secret: str) -> bool:
        return secret.encode() in self.body or any(secret in v for v in self.headers.values())


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


async def _hold(http: httpx.AsyncClient, store: str, thread: str, run: str, secret: str) -> None:
    """Start a run that waits until cancelled; read until its first text, then hang up."""
    body = run_body(thread_id=thread, run_id=run, text=f"{HOLD} {secret}")
    seen = ""
    async with http.stream("POST", f"/{store}/", json=body) as response:
        assert response.status_code == 200
        async for chunk in response.aiter_text():
            seen += chunk
            if "TEXT_MESSAGE_CONTENT" in seen:
                break


async def _create(http: httpx.AsyncClient, store: str, owner: str) -> Owned:
    secret = SECRETS[owner]
    owned = Owned(
        finished_thread=f"{store}-{owner}-notes",
        finished_run=f"run-{owner}-notes",
        held_thread=f"{store}-{owner}-live",
        held_run=f"run-{owner}-live",
        attachment="",
    )
    body = run_body(
        thread_id=owned.finished_thread, run_id=owned.finished_run, text=f"plans {secret}"
    )
    done = await _run(http, store, body)
    assert sse_events(done.text)[-1]["type"] == "RUN_FINISHED", done.text
    renamed = await http.patch(
        f"/{store}/threads/{owned.finished_thread}/", json={"title": f"Title {secret}"}
    )
    assert renamed.status_code == 200, renamed.text
    upload = await http.post(
        f"/{store}/attachments/",
        files={"file": (f"{secret}.txt", f"bytes of {secret}".encode(), "text/plain")},
    )
    assert upload.status_code == 201, upload.text
    owned.attachment = upload.json()["id"]
    await _hold(http, store, owned.held_thread, owned.held_run, secret)
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
        # The secret's words as a search, and every archived thread: a stranger's own only.
        Probe("thread search", "GET", f"{threads}/?q=secret", None),
        Probe("thread list archived", "GET", f"{threads}/?archived=all", None),
        Probe(
            "thread archive",
            "PATCH",
            f"{threads}/{owned.finished_thread}/",
            f"{threads}/{nope}/",
            {"archived": True},
        ),
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
    "thread search": (200, 403),
    "thread list archived": (200, 403),
    "thread archive": (404, 403),
    "thread get": (404, 403),
    "thread get live": (404, 403),
    "thread rename": (404, 403),
    "thread delete": (204, 403),
    "attachment get": (404, 403),
    "attachment delete": (204, 403),
    "attachment upload": (201, 403),
    "run on the owner's thread": (200, 403),
    "run as the owner's live run": (200, 403),
}


#: The probes that list threads: none of the owner's may be among the rows.
_LISTINGS = ("thread list", "thread search", "thread list archived")


@dataclass
class Tally:
    requests: int = 0
    cells: int = 0
    leaks: int = 0
    mismatches: int = 0
    problems: list[str] = field(default_factory=list)


async def _attack(
    owner: str, clients: dict[str, httpx.AsyncClient], stores: list[str], tally: Tally
) -> None:
    """``owner`` creates data on ``stores``; every other identity tries every route on it."""
    secret = SECRETS[owner]
    mine = clients[owner]
    owned = {store: await _create(mine, store, owner) for store in stores}
    before = {store: await _snapshot(mine, store, owned[store]) for store in stores}
    # The probes can see a leak: the owner itself reads its secret on every store.
    for store in stores:
        assert secret in json.dumps(before[store][1])
        assert secret.encode() in before[store][3]

    def judge(store: str, identity: str, route: str, answer: Answer) -> None:
        tally.cells += 1
        served_here = SERVES_ANONYMOUS[store] or identity.startswith("user-")
        expected = _EXPECTED[route][0 if served_here else 1]
        if answer.leaks(secret):
            tally.leaks += 1
            tally.problems.append(f"LEAK {owner}'s data on {store} to {identity}: {route}")
        if answer.status != expected:
            tally.problems.append(
                f"{store} {identity} on {owner}'s ids, {route}: {answer.status}, expected "
                f"{expected}: {answer.body[:200]!r}"
            )

    for store in stores:
        ids = owned[store]
        for identity, http in clients.items():
            if identity == owner:
                continue
            for probe in _probes(store, ids):
                answer = await _send(http, probe.method, probe.url, probe.json)
                tally.requests += 1
                judge(store, identity, probe.route, answer)
                if probe.route in _LISTINGS and answer.status == 200:
                    listed = {row["threadId"] for row in json.loads(answer.body)["threads"]}
                    if {ids.finished_thread, ids.held_thread} & listed:
                        tally.leaks += 1
                        tally.problems.append(f"LEAK {store} {identity} lists {owner}'s thread")
                if probe.missing_url is not None:
                    missing = await _send(http, probe.method, probe.missing_url, probe.json)
                    tally.requests += 1
                    if missing != answer:
                        tally.mismatches += 1
                        tally.problems.append(
                            f"{store} {identity} {probe.route}: not-yours {answer} != "
                            f"missing {missing}"
                        )
            # Writes naming the owner's ids: an upload, runs on its thread and its run id.
            upload = Answer.of(
                await http.post(
                    f"/{store}/attachments/",
                    files={"file": ("theirs.txt", b"their own bytes", "text/plain")},
                )
            )
            judge(store, identity, "attachment upload", upload)
            if upload.status == 201 and json.loads(upload.body)["id"] == ids.attachment:
                tally.leaks += 1
                tally.problems.append(f"LEAK {store} {identity} got {owner}'s attachment id")
            for route, thread, run in (
                ("run on the owner's thread", ids.finished_thread, f"run-{identity}-on-{owner}"),
                ("run as the owner's live run", ids.held_thread, ids.held_run),
            ):
                body = run_body(thread_id=thread, run_id=run, text=f"hello from {identity}")
                answer = Answer.of(await _run(http, store, body))
                judge(store, identity, route, answer)
                if answer.status == 200:
                    events = sse_events(answer.body.decode())
                    if events[-1]["type"] != "RUN_FINISHED":
                        tally.problems.append(f"{store} {identity} {route}: {events[-1]}")
            tally.requests += 3

    after = {store: await _snapshot(mine, store, owned[store]) for store in stores}
    for store in stores:
        if after[store] != before[store]:
            tally.problems.append(f"{owner}'s data on {store} changed: {after[store]}")
    # The held runs were never stopped by a stranger: the owner cancels them now.
    for store in stores:
        thread, run = owned[store].held_thread, owned[store].held_run
        cancelled = await mine.post(f"/{store}/runs/{thread}/{run}/cancel/")
        assert cancelled.status_code == 202, (store, cancelled.text)
        tail = await mine.get(f"/{store}/runs/{thread}/{run}/")
        assert sse_events(tail.text)[-1]["type"] == "RUN_FINISHED"


async def test_no_identity_reaches_another_owners_threads_runs_or_files(
    stack: tuple[Served, dict[str, AGUIServer]], alice: Any, bob: Any
) -> None:
    served, _ = stack
    clients = {
        "user-a": await _client(served, alice),
        "user-b": await _client(served, bob),
        "anonymous-1": await _client(served),
        "anonymous-2": await _client(served),
    }
    tally = Tally()
    try:
        for name in ("anonymous-1", "anonymous-2"):  # a real session of their own
            own = await clients[name].post(
                "/session/attachments/",
                files={"file": ("mine.txt", name.encode(), "text/plain")},
            )
            assert own.status_code == 201
        sessions = {clients[name].cookies.get(settings.SESSION_COOKIE_NAME) for name in clients}
        assert len(sessions) == 4
        await _attack("user-a", clients, list(STORES), tally)
        await _attack("anonymous-1", clients, [s for s in STORES if SERVES_ANONYMOUS[s]], tally)
    finally:
        for http in clients.values():
            await http.aclose()
    print(
        f"FIGURE cross-owner matrix: {len(STORES)} stores x {len(IDENTITIES)} identities x "
        f"{len(_EXPECTED)} routes; owners user-a (4 stores) and anonymous-1 (the 3 stores "
        f"serving visitors), each probed by the 3 others: {tally.cells} cells, "
        f"{tally.requests} requests; leaks={tally.leaks}; "
        f"not-yours-404 != missing-404: {tally.mismatches}"
    )
    assert tally.problems == []
