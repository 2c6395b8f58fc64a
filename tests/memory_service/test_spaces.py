"""Transport, auth and memory spaces against the emulator (wire spec §15 items 1-17, 69-72)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest

from django_pydantic_agent.memory_service import (
    DRMemoryNotFoundError,
    DRMemoryServiceClient,
    DRMemoryServiceError,
    DRMemorySpace,
    DRMemoryValidationError,
)
from tests.memory_service.conftest import Wire, body_of
from tests.memory_service.orm import ChatSession

pytestmark = pytest.mark.django_db(transaction=True)


async def test_base_url_and_every_request_path_end_in_a_slash(wire: Wire) -> None:
    client = wire.client()
    assert client.base_url == wire.endpoint + "/memory"
    space = await DRMemorySpace.post(client)
    await DRMemorySpace.list(client)
    await DRMemorySpace.get(client, space.id)
    await space.patch(description="d")
    await space.delete()
    assert len(wire.sent) == 5
    for request in wire.sent:
        assert request.url.path.startswith("/api/v2/memory/")
        assert request.url.path.endswith("/")


@pytest.mark.urls("tests.memory_service.urls")
async def test_no_trailing_slash_is_404_not_a_redirect(wire: Wire) -> None:
    response = await wire.raw("GET", "", follow_redirects=False)
    assert response.status_code == 200
    bare = await wire.pool.get(wire.endpoint + "/memory", headers={"Authorization": "Bearer t"})
    assert bare.status_code == 404
    space = await DRMemorySpace.post(wire.client())
    no_slash = await wire.raw("GET", space.id)
    assert no_slash.status_code == 404


async def test_missing_or_invalid_identity_is_401(wire: Wire, settings: Any) -> None:
    response = await wire.raw("GET", "", token=None)
    assert response.status_code == 401
    assert isinstance(response.json(), dict)
    settings.MEMORY_SERVICE_EMULATOR = {"TOKENS": ["token-a"]}
    intruder = DRMemoryServiceClient(
        endpoint=wire.endpoint, api_token="intruder", http_client=wire.pool
    )
    with pytest.raises(DRMemoryServiceError) as caught:
        await DRMemorySpace.list(intruder)
    assert type(caught.value) is DRMemoryServiceError
    assert caught.value.status_code == 401
    assert await DRMemorySpace.list(wire.client("token-a")) == []


async def test_successes_are_json_objects_and_delete_is_204(wire: Wire) -> None:
    created = await wire.raw("POST", "new/", json={})
    assert created.status_code in (200, 201)
    assert created.headers["content-type"] == "application/json"
    assert isinstance(created.json(), dict)
    listed = await wire.raw("GET", "")
    assert listed.headers["content-type"] == "application/json"
    assert isinstance(listed.json(), dict)
    deleted = await wire.raw("DELETE", f"{created.json()['memorySpaceId']}/")
    assert deleted.status_code == 204


async def test_writes_need_no_csrf_token_or_cookie(wire: Wire) -> None:
    created = await wire.raw("POST", "new/", json={"description": "x"})
    sp = created.json()["memorySpaceId"]
    assert (await wire.raw("PATCH", f"{sp}/", json={"description": "y"})).status_code == 200
    assert (await wire.raw("DELETE", f"{sp}/")).status_code == 204
    assert all("cookie" not in r.headers for r in wire.sent)


async def test_post_empty_space(wire: Wire) -> None:
    space = await DRMemorySpace.post(wire.client())
    assert body_of(wire.last("POST")) == {}
    assert uuid.UUID(space.id)
    assert space.user_id
    assert space.tenant_id
    assert datetime.fromisoformat(space.created_at)
    assert space.description is None
    assert space.deduplication_key is None
    assert space.llm_model_name is None
    assert space.llm_base_url is None
    assert space.custom_instructions is None


SPACE_VALUES = {
    "description": "d",
    "deduplication_key": "k1",
    "llm_model_name": "m",
    "llm_base_url": "http://x",
    "custom_instructions": "ci",
}


async def test_post_echoes_values_and_adopts_on_dedup_conflict(wire: Wire) -> None:
    client = wire.client()
    first = await DRMemorySpace.post(client, **SPACE_VALUES)
    assert body_of(wire.last("POST")) == {
        "description": "d",
        "deduplicationKey": "k1",
        "llmModelName": "m",
        "llmBaseUrl": "http://x",
        "customInstructions": "ci",
    }
    for attr, value in SPACE_VALUES.items():
        assert getattr(first, attr) == value
    raw = await wire.raw("POST", "new/", json={"deduplicationKey": "k1"})
    assert raw.status_code == 409
    assert raw.json()["errorName"] == "MemorySpaceDeduplicationConflict"
    assert raw.json()["existingMemorySpaceId"] == first.id
    assert raw.json()["existingMemorySpaceUrl"] == f"/memory/{first.id}/"
    assert raw.headers["Location"].endswith(f"/memory/{first.id}/")
    wire.clear()
    adopted = await DRMemorySpace.post(client, **SPACE_VALUES)
    assert adopted.id == first.id
    assert [r.method for r in wire.sent] == ["POST", "GET"]
    other = await DRMemorySpace.post(wire.client("token-b"), deduplication_key="k1")
    assert other.id != first.id


async def test_get_list_and_not_found(wire: Wire) -> None:
    client = wire.client()
    created = await DRMemorySpace.post(client, **SPACE_VALUES)
    fetched = await DRMemorySpace.get(client, created.id)
    assert vars(fetched) == vars(created) | {"_client": client}
    assert fetched.created_at == created.created_at
    for missing in (str(uuid.uuid4()), "not-a-uuid"):
        with pytest.raises(DRMemoryNotFoundError) as caught:
            await DRMemorySpace.get(client, missing)
        assert caught.value.status_code == 404
    mine = await DRMemorySpace.post(client)
    await DRMemorySpace.post(wire.client("token-b"))
    listed = await DRMemorySpace.list(client)
    assert {s.id for s in listed} == {created.id, mine.id}
    keyed = await DRMemorySpace.list(client, deduplication_key="k1")
    assert [s.id for s in keyed] == [created.id]
    assert await DRMemorySpace.list(client, deduplication_key="nope") == []
    assert wire.last().url.params["deduplicationKey"] == "nope"


@pytest.mark.parametrize(("offset", "limit"), [(0, 0), (0, 101), (-1, 10)])
async def test_list_bounds_are_validated(wire: Wire, offset: int, limit: int) -> None:
    with pytest.raises(DRMemoryValidationError) as caught:
        await DRMemorySpace.list(wire.client(), offset=offset, limit=limit)
    assert caught.value.status_code == 422
    assert caught.value.detail


async def test_list_pages_in_a_stable_order(wire: Wire) -> None:
    client = wire.client()
    ids = [(await DRMemorySpace.post(client, description=str(i))).id for i in range(3)]
    page = await DRMemorySpace.list(client, offset=1, limit=1)
    assert [s.id for s in page] == [ids[1]]
    raw = await wire.raw("GET", "", params={"offset": 1, "limit": 1})
    assert raw.json()["total"] == 3


async def test_patch_changes_only_the_given_fields(wire: Wire) -> None:
    client = wire.client()
    space = await DRMemorySpace.post(client, **SPACE_VALUES)
    await space.patch(description="new")
    assert body_of(wire.last("PATCH")) == {"description": "new"}
    assert space.description == "new"
    fetched = await DRMemorySpace.get(client, space.id)
    assert fetched.description == "new"
    assert fetched.llm_model_name == "m"
    assert fetched.custom_instructions == "ci"
    await space.patch(llm_model_name="m2", llm_base_url="https://y", custom_instructions="c2")
    assert (space.llm_model_name, space.llm_base_url, space.custom_instructions) == (
        "m2",
        "https://y",
        "c2",
    )
    wire.clear()
    with pytest.raises(ValueError, match="no field to change"):
        await space.patch()
    assert wire.sent == []


async def test_delete_frees_the_key_and_hides_everything_below(wire: Wire) -> None:
    client = wire.client()
    space = await DRMemorySpace.post(client, deduplication_key="gone")
    await space.delete()
    with pytest.raises(DRMemoryNotFoundError):
        await DRMemorySpace.get(client, space.id)
    assert space.id not in {s.id for s in await DRMemorySpace.list(client)}
    again = await DRMemorySpace.post(client, deduplication_key="gone")
    assert again.id != space.id
    assert wire.last("POST").url.path.endswith("/new/")
    with pytest.raises(DRMemoryNotFoundError):
        await ChatSession.post(space, tenant="a", topic="b", chat_id="c")
    with pytest.raises(DRMemoryNotFoundError):
        await space.delete()


@pytest.mark.parametrize(
    "values",
    [
        {"description": "x" * 1001},
        {"deduplication_key": "k" * 73},
        {"deduplication_key": ""},
    ],
)
async def test_post_rejects_out_of_range_values(wire: Wire, values: dict[str, str]) -> None:
    with pytest.raises(DRMemoryValidationError) as caught:
        await DRMemorySpace.post(wire.client(), **values)
    assert caught.value.status_code == 422
    assert isinstance(caught.value.payload["detail"], list)
    assert caught.value.detail == caught.value.payload["detail"][0]["msg"]


async def test_principals_are_isolated(wire: Wire) -> None:
    alice, bob = wire.client("alice"), wire.client("bob")
    space = await DRMemorySpace.post(alice, deduplication_key="private")
    with pytest.raises(DRMemoryNotFoundError):
        await DRMemorySpace.get(bob, space.id)
    assert await DRMemorySpace.list(bob) == []
    as_bob = DRMemorySpace(bob, {"memorySpaceId": space.id})
    with pytest.raises(DRMemoryNotFoundError):
        await ChatSession.post(as_bob, tenant="t", topic="x", chat_id="c")
    bob_space = await DRMemorySpace.post(bob, deduplication_key="private")
    assert bob_space.id != space.id
    assert [s.id for s in await DRMemorySpace.list(alice)] == [space.id]
    responses = [r for r in wire.sent if r.headers.get("cookie")]
    assert responses == []


async def test_a_response_without_a_space_id_is_an_error(wire: Wire) -> None:
    with pytest.raises(DRMemoryServiceError, match="memorySpaceId") as caught:
        DRMemorySpace(wire.client(), {"userId": "u"})
    assert caught.value.status_code is None


async def test_every_error_body_carries_a_detail(wire: Wire) -> None:
    client = wire.client()
    space = await DRMemorySpace.post(client)
    s = await ChatSession.post(space, tenant="t", topic="x", chat_id="dup")
    sessions = f"{space.id}/sessions/"
    responses = [
        await wire.raw("GET", "", token=None),
        await wire.raw("GET", f"{uuid.uuid4()}/"),
        await wire.raw("GET", f"{space.id}/sessions"),
        await wire.raw("PUT", f"{space.id}/", json={}),
        await wire.raw("POST", "new/", json={"description": 5}),
        await wire.raw(
            "POST",
            sessions,
            json={"participants": ["0" * 24], "description": "//x/", "deduplicationKey": "dup"},
        ),
        await wire.raw(
            "PATCH", f"{sessions}{s.id}/", json={"metadata": {}}, headers={"If-Match": "9"}
        ),
        await wire.raw("GET", sessions, params={"participants": "nope", "description": "//x/"}),
    ]
    assert [r.status_code for r in responses] == [401, 404, 404, 405, 422, 409, 409, 400]
    for response in responses:
        body = response.json()
        assert isinstance(body, dict)
        detail = body["detail"]
        assert (isinstance(detail, str) and detail) or detail[0]["msg"]
    dedup = responses[5]
    assert dedup.headers["Location"].endswith(f"/memory/{space.id}/sessions/{s.id}/")
    with pytest.raises(DRMemoryServiceError) as caught:
        await client.request("PUT", f"{space.id}/", json={})
    assert type(caught.value) is DRMemoryServiceError
    assert caught.value.status_code == 405
