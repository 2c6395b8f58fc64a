"""Sessions: checklist items 18-43, with raw HTTP requests."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.test import override_settings

from tests.contrib.memory_service_emulator.conftest import DEFAULT_STRATEGIES, SYS, Api

CREATE = {
    "participants": [SYS],
    "deduplicationKey": "c1",
    "description": "//chat/acme/billing/",
    "metadata": {"title": "T"},
    "lifecycleStrategies": DEFAULT_STRATEGIES,
}


def _sessions(space: dict[str, Any]) -> str:
    return f"{space['memorySpaceId']}/sessions/"


def test_create_echoes_the_request(api: Api, space: dict[str, Any]) -> None:
    response = api.post(_sessions(space), CREATE)
    assert response.status_code == 201
    body = response.json()
    assert uuid.UUID(body["id"])
    assert body["version"] == 1
    assert body["createdAt"].endswith("Z")
    assert body["participants"] == [SYS]
    assert body["lifecycleStrategies"] == DEFAULT_STRATEGIES
    assert body["metadata"] == {"title": "T"}
    assert body["description"] == "//chat/acme/billing/"
    assert body["deduplicationKey"] == "c1"
    assert body["memorySpaceId"] == space["memorySpaceId"]


def test_duplicate_key_in_a_space_answers_409(api: Api, space: dict[str, Any]) -> None:
    first = api.post(_sessions(space), CREATE).json()
    response = api.post(_sessions(space), {**CREATE, "metadata": {"title": "other"}})
    assert response.status_code == 409
    body = response.json()
    url = f"/memory/{space['memorySpaceId']}/sessions/{first['id']}/"
    assert body["errorName"] == "SessionDeduplicationConflict"
    assert body["existingSessionId"] == first["id"]
    assert body["existingSessionUrl"] == url
    assert response["Location"] == url
    adopted = api.get(f"{_sessions(space)}{first['id']}/").json()
    assert adopted["metadata"] == {"title": "T"}
    assert adopted["description"] == "//chat/acme/billing/"


def test_same_key_in_another_space_is_a_new_session(api: Api, space: dict[str, Any]) -> None:
    first = api.post(_sessions(space), CREATE).json()
    other_space = api.space()
    second = api.post(_sessions(other_space), CREATE)
    assert second.status_code == 201
    assert second.json()["id"] != first["id"]


def test_get_by_id_and_404s(api: Api, space: dict[str, Any]) -> None:
    created = api.post(_sessions(space), CREATE).json()
    assert api.get(f"{_sessions(space)}{created['id']}/").json() == created
    assert api.get(f"{_sessions(space)}{uuid.uuid4()}/").status_code == 404
    assert api.get(f"{_sessions(space)}nope/").status_code == 404
    other_space = api.space()
    assert api.get(f"{_sessions(other_space)}{created['id']}/").status_code == 404


def test_dedup_lookup_by_list(api: Api, space: dict[str, Any]) -> None:
    created = api.post(_sessions(space), CREATE).json()
    found = api.get(
        _sessions(space), query={"deduplicationKey": "c1", "offset": 0, "limit": 100}
    ).json()
    assert [item["id"] for item in found["items"]] == [created["id"]]
    assert found["items"][0]["deduplicationKey"] == "c1"
    missing = api.get(_sessions(space), query={"deduplicationKey": "missing"}).json()
    assert missing == {"items": [], "total": 0}


def test_empty_strategies_get_the_server_default(api: Api, space: dict[str, Any]) -> None:
    for strategies in ([], None):
        body = {**CREATE, "deduplicationKey": None, "lifecycleStrategies": strategies}
        created = api.post(_sessions(space), body).json()
        assert created["lifecycleStrategies"] == [
            {"type": "soft_delete", "trigger": {"ttl": 15552000}}
        ]


def test_custom_strategies_are_stored_verbatim(api: Api, space: dict[str, Any]) -> None:
    strategies = [
        {"type": "soft_delete", "trigger": {"ttl": 2592000}},
        {
            "type": "extract_memories",
            "trigger": {"eventCount": 10},
            "opts": {"softDelete": False, "agentId": None, "metadata": {"a": 1.0}},
        },
    ]
    created = api.session(space["memorySpaceId"], lifecycleStrategies=strategies)
    assert created["lifecycleStrategies"] == strategies
    fetched = api.get(f"{_sessions(space)}{created['id']}/").json()
    assert fetched["lifecycleStrategies"] == strategies
    assert isinstance(fetched["lifecycleStrategies"][1]["opts"]["metadata"]["a"], float)


SOFT = {"type": "soft_delete", "trigger": {"ttl": 60}}


@pytest.mark.parametrize(
    "change",
    [
        {"lifecycleStrategies": [SOFT] * 6},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {"ttl": 0}}]},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {"ttl": 63072001}}]},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {"ttl": 1, "idle": 1}}]},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {}}]},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {"ttl": "5"}}]},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {"never": False}}]},
        {"lifecycleStrategies": [{"type": "bogus", "trigger": {"ttl": 1}}]},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {"never": True}}]},
        {"lifecycleStrategies": [{**SOFT, "opts": {"softDelete": True}}]},
        {"participants": []},
        {"participants": ["xyz"]},
        {"participants": [SYS, "aabbccddeeff001122334455"]},
        {"participants": None},
        {"metadata": "str"},
        {"description": "x" * 1001},
        {"deduplicationKey": ""},
        {"deduplicationKey": "k" * 73},
    ],
)
def test_create_validation(api: Api, space: dict[str, Any], change: dict[str, Any]) -> None:
    response = api.post(_sessions(space), {**CREATE, **change})
    assert response.status_code == 422
    error = response.json()["detail"][0]
    assert error["loc"][0] == "body"
    assert isinstance(error["msg"], str)


def test_never_trigger_behind_the_gate(api: Api, space: dict[str, Any]) -> None:
    never = [{"type": "soft_delete", "trigger": {"never": True}}]
    refused = api.post(_sessions(space), {**CREATE, "lifecycleStrategies": never})
    assert "ALLOW_NEVER_TRIGGER" in refused.json()["detail"][0]["msg"]
    with override_settings(MEMORY_SERVICE_EMULATOR={"ALLOW_NEVER_TRIGGER": True}):
        created = api.post(_sessions(space), {**CREATE, "lifecycleStrategies": never})
    assert created.status_code == 201
    path = f"{_sessions(space)}{created.json()['id']}/"
    # With the gate off again, a type that already stores `never` may keep it.
    kept = api.patch(path, {"lifecycleStrategies": never})
    assert kept.status_code == 200
    assert kept.json()["version"] == 2
    extraction = [{"type": "extract_memories", "trigger": {"never": True}}]
    assert api.patch(path, {"lifecycleStrategies": extraction}).status_code == 422


def test_participant_is_echoed_verbatim(api: Api, space: dict[str, Any]) -> None:
    created = api.session(space["memorySpaceId"], participants=["AABBccddeeff001122334455"])
    assert created["participants"] == ["AABBccddeeff001122334455"]


def _seed_filter_sessions(api: Api, space: dict[str, Any]) -> dict[str, str]:
    descriptions = {
        "billing": "//chat/acme/billing/",
        "support": "//chat/acme/support/",
        "corp": "//chat/acmecorp/x/",
        "chatx": "//chatx/q/",
        "loc": "//loc/",
        "escaped": "//chat/ac%25me/x/",
        "ax25": "//chat/ax25/x/",
        "underscore": "//chat/a_c/x/",
        "abc": "//chat/abc/x/",
    }
    return {
        name: api.session(space["memorySpaceId"], description=text)["id"]
        for name, text in descriptions.items()
    }


def _ids(api: Api, space: dict[str, Any], **query: Any) -> list[str]:
    response = api.get(_sessions(space), query={"offset": 0, "limit": 100, **query})
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()["items"]]


def test_description_filter_is_a_literal_case_insensitive_substring(
    api: Api, space: dict[str, Any]
) -> None:
    ids = _seed_filter_sessions(api, space)
    chat = _ids(api, space, description="//chat/")
    assert ids["chatx"] not in chat
    assert ids["loc"] not in chat
    assert len(chat) == 7
    assert _ids(api, space, description="//chat/acme/") == [ids["billing"], ids["support"]]
    assert _ids(api, space, description="//chat/ACME/") == [ids["billing"], ids["support"]]
    assert _ids(api, space, description="//chat/acme/billing/") == [ids["billing"]]
    # % and _ are literal, never wildcards.
    assert _ids(api, space, description="//chat/ac%25me/") == [ids["escaped"]]
    assert _ids(api, space, description="//chat/a%25/") == []
    assert _ids(api, space, description="//chat/a_c/") == [ids["underscore"]]
    assert _ids(api, space, description="//loc/") == [ids["loc"]]


def test_participant_filter(api: Api, space: dict[str, Any]) -> None:
    user = "aabbccddeeff001122334455"
    mine = api.session(space["memorySpaceId"], participants=[user], description="//chat/acme/")
    api.session(space["memorySpaceId"], description="//chat/acme/")
    api.session(space["memorySpaceId"], participants=[user], description="//chat/other/")
    assert _ids(api, space, description="//chat/acme/", participants=user) == [mine["id"]]
    bad = api.get(_sessions(space), query={"participants": "not-an-oid"})
    assert bad.status_code == 400
    assert "not-an-oid" in bad.json()["detail"]


def test_short_description_filter_is_422(api: Api, space: dict[str, Any]) -> None:
    response = api.get(_sessions(space), query={"description": "ab"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "description"]


def test_unknown_query_parameters_are_ignored(api: Api, session: dict[str, Any]) -> None:
    space_id = session["memorySpaceId"]
    assert _ids(api, {"memorySpaceId": space_id}, whatever="x") == [session["id"]]


def test_pagination_over_250_sessions(api: Api, space: dict[str, Any]) -> None:
    created = [api.session(space["memorySpaceId"])["id"] for _ in range(250)]
    seen: list[str] = []
    for offset, expected in ((0, 100), (100, 100), (200, 50)):
        page = api.get(
            _sessions(space), query={"description": "//chat/", "offset": offset, "limit": 100}
        ).json()
        assert len(page["items"]) == expected
        assert page["total"] == 250
        seen += [item["id"] for item in page["items"]]
    assert seen == created


def test_other_spaces_and_deleted_sessions_are_not_listed(api: Api, space: dict[str, Any]) -> None:
    kept = api.session(space["memorySpaceId"])["id"]
    gone = api.session(space["memorySpaceId"])["id"]
    api.session(api.space()["memorySpaceId"])
    assert api.delete(f"{_sessions(space)}{gone}/").status_code == 204
    assert _ids(api, space, description="//chat/") == [kept]


def test_patch_with_if_match_bumps_the_version(api: Api, space: dict[str, Any]) -> None:
    created = api.post(_sessions(space), CREATE).json()
    path = f"{_sessions(space)}{created['id']}/"
    response = api.patch(path, {"metadata": {"title": "T2"}}, headers={"If-Match": "1"})
    assert response.status_code == 200
    assert response.json()["version"] == 2
    assert response.json()["metadata"] == {"title": "T2"}
    described = api.patch(
        path, {"description": "//chat/acme/support/"}, headers={"If-Match": "2"}
    ).json()
    assert described["version"] == 3
    assert described["lifecycleStrategies"] == DEFAULT_STRATEGIES
    assert _ids(api, space, description="//chat/acme/support/") == [created["id"]]
    assert api.get(path).json() == described


def test_stale_if_match_is_409_and_changes_nothing(api: Api, space: dict[str, Any]) -> None:
    created = api.post(_sessions(space), CREATE).json()
    path = f"{_sessions(space)}{created['id']}/"
    assert (
        api.patch(path, {"metadata": {"title": "x"}}, headers={"If-Match": "1"}).status_code == 200
    )
    stale = api.patch(path, {"metadata": {"title": "y"}}, headers={"If-Match": "1"})
    assert stale.status_code == 409
    detail = stale.json()["detail"]
    assert "Session version mismatch" in detail
    assert "expected 1, current 2" in detail
    assert "errorName" not in stale.json()
    assert api.get(path).json()["metadata"] == {"title": "x"}


def test_if_match_forms(api: Api, session: dict[str, Any]) -> None:
    path = f"{session['memorySpaceId']}/sessions/{session['id']}/"
    assert api.patch(path, {"metadata": {}}, headers={"If-Match": '"1"'}).json()["version"] == 2
    assert api.patch(path, {"metadata": {}}, headers={"If-Match": 'W/"2"'}).json()["version"] == 3
    assert api.patch(path, {"metadata": {}}).json()["version"] == 4
    assert api.patch(path, {"metadata": {}}, headers={"If-Match": "*"}).json()["version"] == 5
    bad = api.patch(path, {"metadata": {}}, headers={"If-Match": "abc"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["header", "If-Match"]


def test_strategies_patch_always_bumps_the_version(api: Api, session: dict[str, Any]) -> None:
    path = f"{session['memorySpaceId']}/sessions/{session['id']}/"
    idle = [{"type": "soft_delete", "trigger": {"idle": 100}}]
    first = api.patch(path, {"lifecycleStrategies": idle}, headers={"If-Match": "1"}).json()
    assert first["version"] == 2
    assert first["lifecycleStrategies"] == idle
    again = api.patch(path, {"lifecycleStrategies": idle}, headers={"If-Match": "2"}).json()
    assert again["version"] == 3
    for bad in ([], None, [SOFT] * 6):
        assert api.patch(path, {"lifecycleStrategies": bad}).status_code == 422
    assert api.get(path).json()["lifecycleStrategies"] == idle


def test_patch_without_known_fields_keeps_the_version(api: Api, session: dict[str, Any]) -> None:
    path = f"{session['memorySpaceId']}/sessions/{session['id']}/"
    same = api.patch(path, {"participants": ["aabbccddeeff001122334455"], "x": 1})
    assert same.status_code == 200
    assert same.json()["version"] == 1
    assert same.json()["participants"] == [SYS]
    cleared = api.patch(path, {"metadata": None, "description": None}).json()
    assert cleared["metadata"] is None
    assert cleared["description"] is None
    assert cleared["version"] == 2


def test_event_writes_never_bump_the_session_version(
    api: Api, session: dict[str, Any], events_path: str
) -> None:
    event = api.event(session["memorySpaceId"], session["id"])
    seq = event["sequenceId"]
    api.patch(f"{events_path}{seq}/", {"body": {"content": "x"}})
    api.post(f"{events_path}batch/", {"events": []})
    api.delete(f"{events_path}{seq}/")
    path = f"{session['memorySpaceId']}/sessions/{session['id']}/"
    response = api.patch(path, {"metadata": {"title": "t"}}, headers={"If-Match": "1"})
    assert response.status_code == 200
    assert response.json()["version"] == 2


def test_delete_frees_the_key_and_hides_events(api: Api, space: dict[str, Any]) -> None:
    created = api.post(_sessions(space), CREATE).json()
    path = f"{_sessions(space)}{created['id']}/"
    response = api.delete(path)
    assert response.status_code == 204
    assert api.get(path).status_code == 404
    assert _ids(api, space, deduplicationKey="c1") == []
    again = api.post(_sessions(space), CREATE)
    assert again.status_code == 201
    assert again.json()["id"] != created["id"]
    assert api.get(f"{path}events/").status_code == 404
    assert api.delete(path).status_code == 404
    assert api.patch(path, {"metadata": {}}).status_code == 404


def test_other_principal_cannot_touch_sessions(
    api: Api, other: Api, session: dict[str, Any]
) -> None:
    path = f"{session['memorySpaceId']}/sessions/{session['id']}/"
    assert other.get(path).status_code == 404
    assert other.patch(path, {"metadata": {"x": 1}}).status_code == 404
    assert other.delete(path).status_code == 404
    # Even in the attacker's own space, the victim's session id does not resolve.
    own = other.space()["memorySpaceId"]
    assert other.get(f"{own}/sessions/{session['id']}/").status_code == 404
    assert api.get(path).json()["version"] == 1
