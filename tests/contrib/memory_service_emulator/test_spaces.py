"""Memory spaces: checklist items 7-17 and 71, with raw HTTP requests."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from tests.contrib.memory_service_emulator.conftest import Api


def test_create_empty_space_has_identity_and_null_fields(api: Api) -> None:
    response = api.post("new/", {})
    assert response.status_code == 201
    assert response["Content-Type"] == "application/json"
    space = response.json()
    assert uuid.UUID(space["memorySpaceId"])
    assert space["userId"]
    assert uuid.UUID(space["tenantId"])
    created = dt.datetime.fromisoformat(space["createdAt"])
    assert created.tzinfo is not None
    assert space["createdAt"].endswith("Z")
    for key in (
        "description",
        "deduplicationKey",
        "llmModelName",
        "llmBaseUrl",
        "customInstructions",
    ):
        assert space[key] is None


FULL = {
    "description": "d",
    "deduplicationKey": "k1",
    "llmModelName": "m",
    "llmBaseUrl": "http://x",
    "customInstructions": "ci",
}


def test_create_echoes_every_field(api: Api) -> None:
    space = api.space(**FULL)
    assert {key: space[key] for key in FULL} == FULL


def test_duplicate_key_answers_409_with_existing_id_and_url(api: Api) -> None:
    first = api.space(**FULL)
    response = api.post("new/", {**FULL, "description": "other"})
    assert response.status_code == 409
    body = response.json()
    space_id = first["memorySpaceId"]
    assert body["errorName"] == "MemorySpaceDeduplicationConflict"
    assert body["existingMemorySpaceId"] == space_id
    assert body["existingMemorySpaceUrl"] == f"/memory/{space_id}/"
    assert body["deduplicationKey"] == "k1"
    assert "k1" in body["detail"]
    assert response["Location"] == f"/memory/{space_id}/"
    # Adopting: the URL resolves for the same principal.
    assert api.get(f"{space_id}/").json()["description"] == "d"


def test_same_key_for_another_principal_is_a_new_space(api: Api, other: Api) -> None:
    first = api.space(deduplicationKey="k1")
    second = other.space(deduplicationKey="k1")
    assert second["memorySpaceId"] != first["memorySpaceId"]
    assert second["userId"] != first["userId"]


def test_get_returns_create_fields_and_404s(api: Api) -> None:
    space = api.space(**FULL)
    assert api.get(f"{space['memorySpaceId']}/").json() == space
    missing = api.get(f"{uuid.uuid4()}/")
    assert missing.status_code == 404
    assert isinstance(missing.json()["detail"], str)
    malformed = api.get("not-a-uuid/")
    assert malformed.status_code == 404
    assert "not-a-uuid" in malformed.json()["detail"]


def test_list_is_private_and_filters_by_key(api: Api, other: Api) -> None:
    mine = [api.space(deduplicationKey="k1")["memorySpaceId"], api.space()["memorySpaceId"]]
    theirs = other.space()["memorySpaceId"]
    listed = api.get("", query={"offset": 0, "limit": 100}).json()
    ids = [item["memorySpaceId"] for item in listed["items"]]
    assert ids == mine
    assert theirs not in ids
    assert listed["total"] == 2
    by_key = api.get("", query={"deduplicationKey": "k1"}).json()
    assert [item["memorySpaceId"] for item in by_key["items"]] == [mine[0]]
    assert api.get("", query={"deduplicationKey": "nope"}).json() == {"items": [], "total": 0}


def test_list_rejects_bad_paging(api: Api) -> None:
    for query in ({"limit": 0}, {"limit": 101}, {"offset": -1}, {"limit": "x"}):
        response = api.get("", query=query)
        assert response.status_code == 422, query
        detail = response.json()["detail"]
        assert detail[0]["loc"][0] == "query"
        assert detail[0]["msg"]


def test_list_pages_in_creation_order_with_full_total(api: Api) -> None:
    ids = [api.space()["memorySpaceId"] for _ in range(3)]
    page = api.get("", query={"offset": 1, "limit": 1}).json()
    assert [item["memorySpaceId"] for item in page["items"]] == [ids[1]]
    assert page["total"] == 3


def test_patch_updates_only_sent_fields(api: Api) -> None:
    space = api.space(**FULL)
    path = f"{space['memorySpaceId']}/"
    response = api.patch(path, {"description": "new"})
    assert response.status_code == 200
    assert response.json() == {**space, "description": "new"}
    assert api.get(path).json() == {**space, "description": "new"}
    # Explicit nulls clear (the sync client does this); deduplicationKey is not patchable.
    cleared = api.patch(path, {"llmModelName": None, "deduplicationKey": "zzz"}).json()
    assert cleared["llmModelName"] is None
    assert cleared["deduplicationKey"] == "k1"
    # A body with no known field changes nothing.
    assert api.patch(path, {"unknown": 1}).json() == cleared


def test_patch_validates(api: Api) -> None:
    space = api.space()
    path = f"{space['memorySpaceId']}/"
    assert api.patch(path, {"llmBaseUrl": "ftp://x"}).status_code == 422
    assert api.patch(path, {"description": "x" * 1001}).status_code == 422
    assert api.patch(f"{uuid.uuid4()}/", {"description": "x"}).status_code == 404


def test_delete_is_soft_and_frees_the_key(api: Api) -> None:
    space = api.space(deduplicationKey="k1")
    space_id = space["memorySpaceId"]
    response = api.delete(f"{space_id}/")
    assert response.status_code == 204
    assert response.content == b""
    assert api.get(f"{space_id}/").status_code == 404
    assert api.get("").json()["items"] == []
    again = api.space(deduplicationKey="k1")
    assert again["memorySpaceId"] != space_id
    created = api.post(f"{space_id}/sessions/", {"participants": ["0" * 24]})
    assert created.status_code == 404
    assert api.delete(f"{space_id}/").status_code == 404
    assert api.patch(f"{space_id}/", {"description": "x"}).status_code == 404


def test_create_validation_errors_are_fastapi_shaped(api: Api) -> None:
    bad: list[dict[str, Any]] = [
        {"description": "x" * 1001},
        {"deduplicationKey": "k" * 73},
        {"deduplicationKey": ""},
        {"llmModelName": "m" * 201},
        {"llmBaseUrl": "not a url"},
        {"customInstructions": "c" * 10_001},
        {"description": 5},
    ]
    for body in bad:
        response = api.post("new/", body)
        assert response.status_code == 422, body
        error = response.json()["detail"][0]
        assert error["loc"][0] == "body"
        assert error["msg"]
    assert (
        api.post("new/", {"description": "x" * 1000, "deduplicationKey": "k" * 72}).status_code
        == 201
    )


def test_body_must_be_a_json_object(api: Api) -> None:
    assert api.post("new/", raw=b"{not json").status_code == 422
    assert api.post("new/", raw=b"NaN").status_code == 422
    assert api.post("new/", [1, 2]).status_code == 422
    missing = api.post("new/")
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["type"] == "missing"


def test_other_principal_cannot_reach_a_space(api: Api, other: Api) -> None:
    space_id = api.space(description="mine")["memorySpaceId"]
    assert other.get(f"{space_id}/").status_code == 404
    assert other.get("").json()["items"] == []
    assert other.patch(f"{space_id}/", {"description": "stolen"}).status_code == 404
    assert other.delete(f"{space_id}/").status_code == 404
    assert other.post(f"{space_id}/sessions/", {"participants": ["0" * 24]}).status_code == 404
    assert other.get(f"{space_id}/sessions/").status_code == 404
    assert api.get(f"{space_id}/").json()["description"] == "mine"


def test_rows_describe_themselves(api: Api, session: dict[str, Any]) -> None:
    from django_pydantic_agent.contrib.memory_service_emulator.models import (
        EmulatedEvent,
        EmulatedMemorySpace,
        EmulatedSession,
    )

    api.event(session["memorySpaceId"], session["id"])
    space = EmulatedMemorySpace.objects.get()
    row = EmulatedSession.objects.get()
    event = EmulatedEvent.objects.get()
    assert str(space) == f"memory space {session['memorySpaceId']}"
    assert str(row) == f"session {session['id']}"
    assert str(event) == f"event {event.sequence_id} of session {row.pk}"
