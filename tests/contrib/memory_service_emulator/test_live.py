"""The emulator over real transports: the live WSGI server, ASGI, and concurrent clients."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from django.core.asgi import get_asgi_application

from django_pydantic_agent.contrib.memory_service_emulator import Fault, fault_injector
from tests.contrib.memory_service_emulator.conftest import SYS


def _headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }


@pytest.fixture
def endpoint(live_server: Any, transactional_db: None) -> str:
    """What a user would put in DATAROBOT_ENDPOINT."""
    return f"{live_server.url}/api/v2"


@pytest.fixture
def http(endpoint: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{endpoint}/memory/", headers=_headers("a"), timeout=10) as c:
        yield c


def test_round_trip_over_loopback(endpoint: str, http: httpx.Client) -> None:
    # GET and DELETE carry Content-Type too, exactly like the real client.
    assert http.get("").json() == {"items": [], "total": 0}
    bare = httpx.get(f"{endpoint}/memory", headers=_headers("a"))
    assert bare.status_code == 404
    assert not bare.has_redirect_location
    space = http.post("new/", content=b'{"deduplicationKey":"k"}').json()
    sessions = f"{space['memorySpaceId']}/sessions/"
    session = http.post(
        sessions,
        json={"participants": [SYS], "description": "//chat/a/", "lifecycleStrategies": []},
    ).json()
    events = f"{sessions}{session['id']}/events/"
    event = http.post(
        events,
        json={"type": "message", "body": {"content": "hi"}, "emitter": {"type": "user", "id": SYS}},
    ).json()
    # The token travels percent-encoded in the query string and is decoded exactly once.
    patched = http.patch(
        f"{events}{event['sequenceId']}/",
        params={"createdAt": event["createdAt"]},
        json={"body": {"content": "hi", "score": 0.7}},
    )
    assert patched.status_code == 200
    listed = http.get(events, params={"lastN": 1}).json()["items"]
    assert listed == [patched.json()]
    # A description with %, / and _ survives the trip through the query string.
    described = http.patch(f"{sessions}{session['id']}/", json={"description": "//chat/a%25b_c/"})
    assert described.json()["version"] == 2
    found = http.get(sessions, params={"description": "//chat/a%25b_c/"}).json()
    assert [item["id"] for item in found["items"]] == [session["id"]]
    assert http.delete(f"{space['memorySpaceId']}/").status_code == 204


def test_principals_sharing_one_pool_stay_apart(endpoint: str) -> None:
    with httpx.Client(base_url=f"{endpoint}/memory/", timeout=10) as pool:
        mine = pool.post("new/", json={}, headers=_headers("alice")).json()
        assert not pool.cookies  # the emulator never sets an identity cookie
        theirs = pool.get("", headers=_headers("bob")).json()
        assert theirs["items"] == []
        assert pool.get(f"{mine['memorySpaceId']}/", headers=_headers("bob")).status_code == 404
        assert pool.get("", headers=_headers("alice")).json()["total"] == 1


def test_concurrent_event_posts_get_distinct_consecutive_ids(http: httpx.Client) -> None:
    space = http.post("new/", json={}).json()
    session = http.post(f"{space['memorySpaceId']}/sessions/", json={"participants": [SYS]}).json()
    events = f"{space['memorySpaceId']}/sessions/{session['id']}/events/"

    def post(index: int) -> int:
        body = {"type": "message", "body": {"content": str(index)}, "emitter": {"type": "agent"}}
        response = http.post(events, json=body)
        assert response.status_code == 201, response.text
        return int(response.json()["sequenceId"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = sorted(pool.map(post, range(40)))
    assert ids == list(range(ids[0], ids[0] + 40))


def test_concurrent_stale_session_patches_let_exactly_one_win(http: httpx.Client) -> None:
    space = http.post("new/", json={}).json()
    path = f"{space['memorySpaceId']}/sessions/"
    session = http.post(path, json={"participants": [SYS]}).json()
    detail = f"{path}{session['id']}/"

    def patch(index: int) -> int:
        response = http.patch(detail, json={"metadata": {"i": index}}, headers={"If-Match": "1"})
        return response.status_code

    with ThreadPoolExecutor(max_workers=6) as pool:
        statuses = sorted(pool.map(patch, range(6)))
    assert statuses == [200, 409, 409, 409, 409, 409]
    assert http.get(detail).json()["version"] == 2


async def test_served_under_asgi(transactional_db: None) -> None:
    transport = httpx.ASGITransport(app=get_asgi_application())
    async with httpx.AsyncClient(
        transport=transport, base_url="http://emulator/api/v2/memory/", headers=_headers("a")
    ) as client:
        created = await client.post("new/", json={"description": "asgi"})
        assert created.status_code == 201
        listed = await client.get("")
        assert [item["description"] for item in listed.json()["items"]] == ["asgi"]
        # In-process there is no socket: the failure surfaces as the app's exception.
        with (
            fault_injector.inject(Fault.dropped_connection()),
            pytest.raises(ConnectionResetError, match="injected fault"),
        ):
            await client.get("")
