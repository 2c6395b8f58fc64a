"""DRMemoryServiceClient over real loopback HTTP: configuration, error mapping, transport faults,
pool ownership and multi-principal isolation on a shared pool."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from django_pydantic_agent.memory_service import (
    DRMemoryBadRequestError,
    DRMemoryConflictError,
    DRMemoryNotFoundError,
    DRMemoryRateLimitError,
    DRMemoryServiceClient,
    DRMemoryServiceError,
    DRMemoryUnavailableError,
    DRMemoryValidationError,
    DRMemoryVersionConflictError,
)
from django_pydantic_agent.memory_service.client import _parse_retry_after
from tests.memory_service.conftest import Reply, ScriptedServer

# Configuration ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_env")
def test_endpoint_and_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATAROBOT_ENDPOINT", "https://example.test/api/v2/")
    monkeypatch.setenv("DATAROBOT_API_TOKEN", "env-token")
    client = DRMemoryServiceClient()
    assert client.base_url == "https://example.test/api/v2/memory"
    assert "example.test" in repr(client)


@pytest.mark.usefixtures("no_env")
async def test_arguments_override_the_environment(
    monkeypatch: pytest.MonkeyPatch, scripted: ScriptedServer
) -> None:
    monkeypatch.setenv("DATAROBOT_ENDPOINT", "https://elsewhere.test/api/v2")
    monkeypatch.setenv("DATAROBOT_API_TOKEN", "env-token")
    async with DRMemoryServiceClient(
        endpoint=scripted.endpoint, api_token="arg-token", base_path="/memory/"
    ) as client:
        assert client.base_url == scripted.endpoint + "/memory"
        await client.request("GET", "")
    assert scripted.requests[0].headers["authorization"] == "Bearer arg-token"
    assert scripted.requests[0].target == "/api/v2/memory/"


@pytest.mark.usefixtures("no_env")
@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"api_token": "t"}, "DATAROBOT_ENDPOINT"),
        ({"endpoint": "///", "api_token": "t"}, "DATAROBOT_ENDPOINT"),
        ({"endpoint": "https://h/api/v2"}, "DATAROBOT_API_TOKEN"),
        ({"endpoint": "ftp://h/api/v2", "api_token": "t"}, "'ftp://h/api/v2'"),
        ({"endpoint": "https://h/api/v2", "api_token": " secret "}, "whitespace"),
        ({"endpoint": "https://h/api/v2", "api_token": "sec\nret"}, "control"),
        ({"endpoint": "https://h/api/v2", "api_token": "t", "timeout": 0}, "timeout=0"),
    ],
)
def test_misconfiguration_fails_at_construction(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        DRMemoryServiceClient(**kwargs)  # type: ignore[arg-type]


async def test_request_sends_identity_and_json_headers(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    response = await scripted_client.request(
        "PATCH", "/sp/", params={"a": "//x/"}, json={"k": 1}, extra_headers={"If-Match": "3"}
    )
    assert response.json() == {}
    seen = scripted.requests[0]
    assert seen.method == "PATCH"
    assert seen.target == "/api/v2/memory/sp/?a=%2F%2Fx%2F"
    assert seen.headers["authorization"] == "Bearer tok-a"
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["accept"] == "application/json"
    assert seen.headers["if-match"] == "3"
    assert seen.json() == {"k": 1}


async def test_get_and_delete_carry_no_body(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    scripted.script(Reply(status=204, body=b""))
    await scripted_client.request("DELETE", "sp/")
    assert scripted.requests[0].body == b""
    assert scripted.requests[0].headers["content-type"] == "application/json"


# Status mapping --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "error", "detail"),
    [
        (Reply.json(400, {"detail": "not a participant"}), DRMemoryBadRequestError, None),
        (Reply.json(404, {"detail": "gone"}), DRMemoryNotFoundError, "gone"),
        (
            Reply.json(409, {"detail": "Session version mismatch: expected 1, current 2"}),
            DRMemoryVersionConflictError,
            None,
        ),
        (Reply.json(409, {"detail": "strategy already executed"}), DRMemoryServiceError, None),
        (
            Reply.json(422, {"detail": "Patch of incorrect version of event 3"}),
            DRMemoryVersionConflictError,
            None,
        ),
        (
            Reply.json(422, {"detail": [{"loc": ["body"], "msg": "String too long"}]}),
            DRMemoryValidationError,
            "String too long",
        ),
        (Reply.json(401, {"message": "bad token"}), DRMemoryServiceError, "bad token"),
        (Reply.json(405, {"detail": ["odd"]}), DRMemoryServiceError, '{"detail": ["odd"]}'),
        (Reply.json(422, {"detail": [{"loc": []}]}), DRMemoryValidationError, None),
        (Reply(status=503, body=b"upstream down"), DRMemoryServiceError, "upstream down"),
        (Reply(status=500, body=b""), DRMemoryServiceError, "Unknown error"),
        (Reply.json(502, ["not", "an", "object"]), DRMemoryServiceError, None),
    ],
)
async def test_error_statuses_map_to_typed_errors(
    scripted: ScriptedServer,
    scripted_client: DRMemoryServiceClient,
    reply: Reply,
    error: type[DRMemoryServiceError],
    detail: str | None,
) -> None:
    scripted.script(reply)
    with pytest.raises(error) as caught:
        await scripted_client.request("GET", "x/")
    assert type(caught.value) is error
    assert caught.value.status_code == reply.status
    if detail is not None:
        assert caught.value.detail == detail
    assert isinstance(caught.value.payload, dict)
    assert str(reply.status) in str(caught.value)
    assert "/api/v2/memory/x/" in str(caught.value)


async def test_dedup_conflict_names_the_existing_resource(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    body = {
        "detail": "exists",
        "errorName": "SessionDeduplicationConflict",
        "existingSessionId": "s-1",
        "existingSessionUrl": "/memory/sp/sessions/s-1/",
    }
    scripted.script(Reply.json(409, body))
    with pytest.raises(DRMemoryConflictError) as caught:
        await scripted_client.request("POST", "sp/sessions/", json={})
    assert caught.value.existing_id == "s-1"
    assert caught.value.location == "/memory/sp/sessions/s-1/"
    assert caught.value.payload == body


async def test_dedup_conflict_location_falls_back_to_the_header(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    scripted.script(
        Reply.json(
            409, {"detail": "x", "existingMemorySpaceId": "m-1"}, ("Location", "/memory/m-1/")
        )
    )
    with pytest.raises(DRMemoryConflictError) as caught:
        await scripted_client.request("POST", "new/", json={})
    assert (caught.value.existing_id, caught.value.location) == ("m-1", "/memory/m-1/")


async def test_dedup_conflict_without_id_or_location(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    scripted.script(
        Reply.json(409, {"detail": "x", "errorName": "MemorySpaceDeduplicationConflict"})
    )
    with pytest.raises(DRMemoryConflictError) as caught:
        await scripted_client.request("POST", "new/", json={})
    assert (caught.value.existing_id, caught.value.location) == (None, None)


async def test_redirects_are_returned_not_followed(scripted: ScriptedServer) -> None:
    scripted.script(Reply(status=302, headers=[("Location", "/elsewhere/")], body=b""))
    async with httpx.AsyncClient(follow_redirects=True) as pool:
        client = DRMemoryServiceClient(endpoint=scripted.endpoint, api_token="t", http_client=pool)
        response = await client.request("GET", "sp")
    assert response.status_code == 302
    assert len(scripted.requests) == 1


# Retry-After -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [("30", 30), (" 30 ", 30), ("0", 0), (None, None), ("-1", None), ("soon", None)],
)
async def test_rate_limit_carries_retry_after(
    scripted: ScriptedServer,
    scripted_client: DRMemoryServiceClient,
    header: str | None,
    expected: int | None,
) -> None:
    headers = [("Retry-After", header)] if header is not None else []
    scripted.script(Reply.json(429, {"detail": "Monthly write quota exceeded"}, *headers))
    with pytest.raises(DRMemoryRateLimitError) as caught:
        await scripted_client.request("POST", "new/", json={})
    assert caught.value.retry_after == expected
    assert caught.value.detail == "Monthly write quota exceeded"
    if expected is None:
        assert "waiting will not help" in str(caught.value)
    else:
        assert f"Retry after {expected} seconds" in str(caught.value)


async def test_rate_limit_http_date_form(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    when = datetime.now(UTC) + timedelta(seconds=120)
    scripted.script(Reply.json(429, {"detail": "q"}, ("Retry-After", format_datetime(when, True))))
    with pytest.raises(DRMemoryRateLimitError) as caught:
        await scripted_client.request("GET", "")
    assert caught.value.retry_after is not None
    assert 115 <= caught.value.retry_after <= 121


NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Mon, 30 Nov 2026 12:00:30 GMT", 30),
        ("Mon, 30 Nov 2026 12:00:29 +0000", 29),
        ("Mon, 30 Nov 2026 12:00:30 -0000", 30),  # a naive date counts as UTC
        ("Mon, 30 Nov 2026 11:00:00 GMT", 0),  # in the past
        ("Mon, 30 Nov 2026 13:00:00 +0100", 0),  # same instant as now
        ("120", 120),
        ("", None),
        ("   ", None),
        ("+30", None),
        ("1_0", None),
        ("1.5", None),
        ("\u0663\u0660", None),  # Arabic-Indic digits
        ("9" * 5000, None),  # longer than int() accepts
        ("Mon, 99 Nov 2026 12:00:30 GMT", None),
        ("Mon, 30 Nov 99999999999 12:00:30 GMT", None),
    ],
)
def test_parse_retry_after(value: str, expected: int | None) -> None:
    assert _parse_retry_after(value, now=NOW) == expected


def test_parse_retry_after_rounds_partial_seconds_up() -> None:
    now = NOW - timedelta(microseconds=500_000)
    assert _parse_retry_after("Mon, 30 Nov 2026 12:00:10 GMT", now=now) == 11


# Transport failures ----------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_connection_refused_is_unavailable() -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}/api/v2"
    async with DRMemoryServiceClient(endpoint=endpoint, api_token="t") as client:
        with pytest.raises(DRMemoryUnavailableError) as caught:
            await client.request("GET", "")
    assert caught.value.status_code is None
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert "unreachable" in str(caught.value)


async def test_timeout_on_owned_pool_is_unavailable(scripted: ScriptedServer) -> None:
    scripted.script(Reply(action="hang"))
    async with DRMemoryServiceClient(
        endpoint=scripted.endpoint, api_token="t", timeout=0.2
    ) as client:
        with pytest.raises(DRMemoryUnavailableError) as caught:
            await client.request("GET", "")
    assert caught.value.status_code is None
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)
    assert "timed out" in str(caught.value)


async def test_timeout_of_injected_pool_applies(scripted: ScriptedServer) -> None:
    scripted.script(Reply(action="hang"))
    async with httpx.AsyncClient(timeout=0.2) as pool:
        client = DRMemoryServiceClient(
            endpoint=scripted.endpoint, api_token="t", http_client=pool, timeout=999
        )
        with pytest.raises(DRMemoryUnavailableError) as caught:
            await client.request("GET", "")
    assert isinstance(caught.value.__cause__, httpx.TimeoutException)


async def test_dropped_connection_is_unavailable(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    scripted.script(Reply(action="drop"))
    with pytest.raises(DRMemoryUnavailableError) as caught:
        await scripted_client.request("GET", "")
    assert isinstance(caught.value.__cause__, httpx.TransportError)
    assert isinstance(caught.value, DRMemoryServiceError)


# Pool ownership --------------------------------------------------------------------------------


async def test_aclose_closes_only_an_owned_pool(scripted: ScriptedServer) -> None:
    async with httpx.AsyncClient() as pool:
        borrowed = DRMemoryServiceClient(
            endpoint=scripted.endpoint, api_token="t", http_client=pool
        )
        async with borrowed:
            await borrowed.request("GET", "")
        assert not pool.is_closed
        await borrowed.request("GET", "")  # still usable after the borrower closed
    owned = DRMemoryServiceClient(endpoint=scripted.endpoint, api_token="t")
    async with owned:
        await owned.request("GET", "")
    with pytest.raises(RuntimeError):
        await owned.request("GET", "")  # httpx refuses a closed client
    assert len(scripted.requests) == 3


# Multi-principal isolation on one pool ---------------------------------------------------------


async def test_principals_on_a_shared_pool_never_share_cookies_or_auth(
    scripted: ScriptedServer,
) -> None:
    scripted.script(
        Reply.json(200, {}, ("Set-Cookie", "sessionid=alice-secret; Path=/")),
        Reply.json(200, {}),
    )
    # A careless pool: default (storing) cookie jar and its own auth. Neither may leak.
    async with httpx.AsyncClient(auth=("pool-user", "pool-pass")) as pool:
        alice = DRMemoryServiceClient(
            endpoint=scripted.endpoint, api_token="alice", http_client=pool
        )
        bob = DRMemoryServiceClient(endpoint=scripted.endpoint, api_token="bob", http_client=pool)
        await alice.request("GET", "")
        await bob.request("GET", "")
        await alice.request("GET", "")
    first, second, third = scripted.requests
    assert second.headers["authorization"] == "Bearer bob"
    assert third.headers["authorization"] == "Bearer alice"
    assert first.headers["authorization"] == "Bearer alice"
    assert all("cookie" not in r.headers for r in scripted.requests)


async def test_owned_pool_stores_no_cookie(scripted: ScriptedServer) -> None:
    scripted.script(Reply.json(200, {}, ("Set-Cookie", "sessionid=x; Path=/")))
    async with DRMemoryServiceClient(endpoint=scripted.endpoint, api_token="t") as client:
        response = await client.request("GET", "")
        assert response.headers["set-cookie"].startswith("sessionid=")
        await client.request("GET", "")
    assert "cookie" not in scripted.requests[1].headers
