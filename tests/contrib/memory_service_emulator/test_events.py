"""Events: checklist items 44-68, with raw HTTP requests."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.contrib.memory_service_emulator.conftest import SYS, Api

OTHER_ID = "ffffffffffffffffffffffff"


def _post(api: Api, events_path: str, body: Any) -> Any:
    return api.post(events_path, body)


def _message(
    content: str = "hi", emitter: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "type": "message",
        "body": {"content": content, **extra},
        "emitter": emitter or {"type": "agent"},
    }


def test_create_answers_the_full_event(api: Api, events_path: str) -> None:
    response = _post(api, events_path, _message())
    assert response.status_code == 201
    event = response.json()
    assert isinstance(event["sequenceId"], int)
    assert event["sequenceId"] >= 0
    assert isinstance(event["createdAt"], str)
    assert event["body"] == {"content": "hi"}
    assert event["emitterType"] == "agent"
    assert event["emitterId"] is None
    assert event["eventType"] == "message"


def test_user_event_from_a_participant(api: Api, events_path: str) -> None:
    body = _message("u", {"type": "user", "id": SYS}, score=0.9)
    event = _post(api, events_path, body).json()
    assert event["emitterType"] == "user"
    assert event["emitterId"] == SYS
    assert event["body"]["score"] == 0.9


def test_body_round_trips_exactly(api: Api, events_path: str) -> None:
    body = {
        "content": "\u200b",
        "tags": ["a", "é"],
        "meta": {"nested": [1, 2.0, None, {"x": True}]},
        "when": "2026-01-02T00:00:00Z",
        "ref": "7d1e8c1e-58c7-4a7b-8d44-0e6f3c0b7d35",
        "score": 1.0,
        "count": 1,
        "opt": None,
        "name": "  spaced  ",
    }
    created = _post(api, events_path, {**_message(), "body": body}).json()
    assert created["body"] == body
    listed = api.get(events_path).json()["items"][0]
    assert listed["body"] == body
    assert isinstance(listed["body"]["score"], float)
    assert isinstance(listed["body"]["count"], int)
    assert b'"score":1.0' in api.get(events_path).content.replace(b" ", b"")


def test_sequence_ids_are_per_session_increasing_and_never_reused(
    api: Api, session: dict[str, Any], events_path: str
) -> None:
    first, second, third = (
        _post(api, events_path, _message(str(i))).json()["sequenceId"] for i in range(3)
    )
    assert second == first + 1
    assert third == second + 1
    other = api.session(session["memorySpaceId"])
    other_path = f"{session['memorySpaceId']}/sessions/{other['id']}/events/"
    assert _post(api, other_path, _message()).json()["sequenceId"] == first
    assert api.delete(f"{events_path}{third}/").status_code == 204
    assert _post(api, events_path, _message()).json()["sequenceId"] > third


@pytest.mark.parametrize(
    ("content", "status"),
    [("", 422), ("x" * 100_001, 422), ("x" * 100_000, 201), ("\u200b", 201), (5, 422)],
)
def test_content_limits(api: Api, events_path: str, content: Any, status: int) -> None:
    response = _post(api, events_path, {**_message(), "body": {"content": content}})
    assert response.status_code == status
    if status == 201:
        assert response.json()["body"]["content"] == content


@pytest.mark.parametrize(
    ("emitter", "status"),
    [
        ({"type": "robot"}, 422),
        ({"type": "agent", "id": "xyz"}, 422),
        ({"type": "user", "id": OTHER_ID}, 400),
        ({"type": "user"}, 400),
        ({"type": "agent", "id": SYS}, 201),
        ({"type": "agent", "id": OTHER_ID}, 201),
    ],
)
def test_emitter_rules(api: Api, events_path: str, emitter: dict[str, Any], status: int) -> None:
    response = _post(api, events_path, _message(emitter=emitter))
    assert response.status_code == status
    if status == 400:
        assert isinstance(response.json()["detail"], str)
        assert "participant" in response.json()["detail"]


def test_missing_parts_are_422(api: Api, events_path: str) -> None:
    assert (
        _post(api, events_path, {"type": "message", "emitter": {"type": "agent"}}).status_code
        == 422
    )
    assert _post(api, events_path, {"type": "message", "body": {"content": "x"}}).status_code == 422
    assert _post(api, events_path, {**_message(), "type": "bogus"}).status_code == 422
    assert _post(api, events_path, {**_message(), "body": {"x": 1}}).status_code == 422


def test_event_types_and_filter(api: Api, events_path: str) -> None:
    _post(api, events_path, _message("m"))
    status = _post(api, events_path, {**_message("s"), "type": "status"}).json()
    tool = _post(api, events_path, {**_message("t"), "type": "tool_output"}).json()
    assert status["eventType"] == "status"
    assert tool["eventType"] == "tool_output"
    only = api.get(events_path, query={"eventType": "status"}).json()
    assert [item["sequenceId"] for item in only["items"]] == [status["sequenceId"]]
    assert only["total"] == 1
    assert len(api.get(events_path).json()["items"]) == 3
    assert api.get(events_path, query={"eventType": "bogus"}).status_code == 422


@pytest.fixture
def five(api: Api, events_path: str) -> list[int]:
    return [_post(api, events_path, _message(f"e{i}")).json()["sequenceId"] for i in range(5)]


def _seqs(api: Api, events_path: str, **query: Any) -> list[int]:
    response = api.get(events_path, query=query)
    assert response.status_code == 200, response.content
    return [item["sequenceId"] for item in response.json()["items"]]


def test_paging(api: Api, events_path: str, five: list[int]) -> None:
    assert _seqs(api, events_path, offset=0, limit=2) == five[:2]
    assert _seqs(api, events_path, offset=2, limit=2) == five[2:4]
    assert _seqs(api, events_path, offset=10, limit=2) == []
    assert api.get(events_path, query={"offset": 0, "limit": 2}).json()["total"] == 5


def test_tail(api: Api, events_path: str, five: list[int]) -> None:
    assert _seqs(api, events_path, lastN=2) == five[3:]
    assert _seqs(api, events_path, lastN=10) == five
    status = _post(api, events_path, {**_message("s"), "type": "status"}).json()
    assert _seqs(api, events_path, lastN=2, eventType="message") == five[3:]
    assert _seqs(api, events_path, lastN=1) == [status["sequenceId"]]
    # The sync client may send limit with lastN; limit is ignored.
    assert _seqs(api, events_path, lastN=3, limit=1) == [five[3], five[4], status["sequenceId"]]


@pytest.mark.parametrize(
    "query",
    [
        {"lastN": 2, "offset": 0},
        {"lastN": 0},
        {"lastN": 101},
        {"limit": 0},
        {"limit": 101},
        {"offset": -1},
        {"lastN": "two"},
    ],
)
def test_list_validation(api: Api, events_path: str, query: dict[str, Any]) -> None:
    response = api.get(events_path, query=query)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][0] == "query"


def test_routes_under_missing_parents_are_404(
    api: Api, space: dict[str, Any], session: dict[str, Any], events_path: str
) -> None:
    event = _post(api, events_path, _message()).json()
    seq = event["sequenceId"]
    unknown_session = (
        f"{space['memorySpaceId']}/sessions/00000000-0000-4000-8000-000000000000/events/"
    )
    for path in (unknown_session, "00000000-0000-4000-8000-000000000000/sessions/x/events/"):
        assert api.get(path).status_code == 404
        assert api.post(path, _message()).status_code == 404
        assert api.post(f"{path}batch/", {"events": []}).status_code == 404
        assert api.patch(f"{path}batch/", {"events": []}).status_code == 404
        assert api.patch(f"{path}{seq}/", {"body": {"content": "x"}}).status_code == 404
        assert api.delete(f"{path}{seq}/").status_code == 404
    assert api.delete(f"{space['memorySpaceId']}/").status_code == 204
    assert api.get(events_path).status_code == 404
    assert api.patch(f"{events_path}{seq}/", {"body": {"content": "x"}}).status_code == 404


def _patch(api: Api, events_path: str, event: dict[str, Any], body: Any, token: str | None) -> Any:
    query = None if token is None else {"createdAt": token}
    return api.patch(f"{events_path}{event['sequenceId']}/", body, query=query)


def test_patch_refreshes_the_token(api: Api, events_path: str) -> None:
    event = _post(api, events_path, _message()).json()
    response = _patch(
        api, events_path, event, {"body": {"content": "hi", "score": 0.7}}, event["createdAt"]
    )
    assert response.status_code == 200
    patched = response.json()
    assert patched["sequenceId"] == event["sequenceId"]
    assert patched["body"] == {"content": "hi", "score": 0.7}
    assert patched["createdAt"] != event["createdAt"]
    assert dt.datetime.fromisoformat(patched["createdAt"]) > dt.datetime.fromisoformat(
        event["createdAt"]
    )
    again = _patch(api, events_path, patched, {"body": {"content": "hi2"}}, patched["createdAt"])
    assert again.status_code == 200
    assert again.json()["body"] == {"content": "hi2"}


def test_stale_token_is_422_and_changes_nothing(api: Api, events_path: str) -> None:
    event = _post(api, events_path, _message()).json()
    assert (
        _patch(
            api, events_path, event, {"body": {"content": "new"}}, event["createdAt"]
        ).status_code
        == 200
    )
    stale = _patch(api, events_path, event, {"body": {"content": "stale"}}, event["createdAt"])
    assert stale.status_code == 422
    assert "Patch of incorrect version of event" in stale.json()["detail"]
    assert api.get(events_path).json()["items"][0]["body"] == {"content": "new"}


def test_token_forms(api: Api, events_path: str) -> None:
    event = _post(api, events_path, _message()).json()
    unconditional = _patch(api, events_path, event, {"body": {"content": "a"}}, None).json()
    instant = dt.datetime.fromisoformat(unconditional["createdAt"])
    plus = instant.isoformat()  # "+00:00", as the sync client sends it
    assert "+00:00" in plus
    second = _patch(api, events_path, event, {"body": {"content": "b"}}, plus)
    assert second.status_code == 200
    spaced = dt.datetime.fromisoformat(second.json()["createdAt"]).isoformat().replace("+", " ")
    assert _patch(api, events_path, event, {"body": {"content": "c"}}, spaced).status_code == 200
    garbage = _patch(api, events_path, event, {"body": {"content": "d"}}, "yesterday")
    assert garbage.status_code == 422
    assert garbage.json()["detail"][0]["loc"] == ["query", "createdAt"]


def test_token_without_fraction_and_naive(api: Api, events_path: str) -> None:
    event = _post(api, events_path, _message()).json()
    instant = dt.datetime.fromisoformat(event["createdAt"])
    naive = instant.replace(tzinfo=None).isoformat()
    assert _patch(api, events_path, event, {"type": "status"}, naive).status_code == 200


def test_patch_emitter_rules(api: Api, events_path: str) -> None:
    event = _post(api, events_path, _message(emitter={"type": "user", "id": SYS})).json()
    bad = _patch(api, events_path, event, {"emitter": {"type": "user", "id": OTHER_ID}}, None)
    assert bad.status_code == 400
    to_agent = _patch(api, events_path, event, {"emitter": {"type": "agent", "id": SYS}}, None)
    assert to_agent.status_code == 200
    assert to_agent.json()["emitterType"] == "agent"
    assert to_agent.json()["emitterId"] == SYS
    cleared = _patch(api, events_path, event, {"emitter": {"type": "agent"}}, None).json()
    assert cleared["emitterId"] is None


def test_patch_validation_and_404(api: Api, events_path: str) -> None:
    event = _post(api, events_path, _message()).json()
    assert api.patch(f"{events_path}999/", {"body": {"content": "x"}}).status_code == 404
    assert _patch(api, events_path, event, {"body": {"score": 1}}, None).status_code == 422
    assert _patch(api, events_path, event, {}, None).status_code == 422
    assert _patch(api, events_path, event, {"type": "bogus"}, None).status_code == 422


def test_batch_patch_updates_all_in_place(api: Api, events_path: str) -> None:
    first = _post(api, events_path, _message("hi")).json()
    second = _post(api, events_path, _message("yo")).json()
    body = {
        "events": [
            {
                "sequenceId": first["sequenceId"],
                "createdAt": first["createdAt"],
                "body": {"content": "hi", "score": 0.9},
            },
            {
                "sequenceId": second["sequenceId"],
                "createdAt": second["createdAt"],
                "body": {"content": "edited", "score": 0.0},
                "emitter": {"type": "agent"},
            },
        ]
    }
    response = api.patch(f"{events_path}batch/", body)
    assert response.status_code == 200
    items = {item["sequenceId"]: item for item in response.json()["items"]}
    assert set(items) == {first["sequenceId"], second["sequenceId"]}
    assert items[first["sequenceId"]]["createdAt"] != first["createdAt"]
    assert items[second["sequenceId"]]["body"] == {"content": "edited", "score": 0.0}
    fresh = items[first["sequenceId"]]
    assert (
        _patch(
            api, events_path, fresh, {"body": {"content": "later"}}, fresh["createdAt"]
        ).status_code
        == 200
    )


def test_batch_patch_is_atomic(api: Api, events_path: str) -> None:
    first = _post(api, events_path, _message("a")).json()
    second = _post(api, events_path, _message("b")).json()
    _patch(api, events_path, second, {"body": {"content": "b2"}}, None)
    body = {
        "events": [
            {
                "sequenceId": first["sequenceId"],
                "createdAt": first["createdAt"],
                "body": {"content": "A"},
            },
            {
                "sequenceId": second["sequenceId"],
                "createdAt": second["createdAt"],
                "body": {"content": "B"},
            },
        ]
    }
    stale = api.patch(f"{events_path}batch/", body)
    assert stale.status_code == 422
    assert "Patch of incorrect version of event" in stale.json()["detail"]
    contents = [item["body"]["content"] for item in api.get(events_path).json()["items"]]
    assert contents == ["a", "b2"]
    participant = {
        "events": [
            {"sequenceId": first["sequenceId"], "body": {"content": "A"}},
            {"sequenceId": second["sequenceId"], "emitter": {"type": "user", "id": OTHER_ID}},
        ]
    }
    assert api.patch(f"{events_path}batch/", participant).status_code == 400
    assert [item["body"]["content"] for item in api.get(events_path).json()["items"]] == ["a", "b2"]


@pytest.mark.parametrize(
    "events",
    [
        [{"sequenceId": 1, "body": {"content": "x"}}, {"sequenceId": 1, "body": {"content": "y"}}],
        [{"sequenceId": 1}],
        [{"sequenceId": 1, "body": {"content": "x"}}] * 201,
        [{"body": {"content": "x"}}],
        [{"sequenceId": 1, "createdAt": "garbage", "body": {"content": "x"}}],
    ],
)
def test_batch_patch_validation(api: Api, events_path: str, events: list[dict[str, Any]]) -> None:
    _post(api, events_path, _message())
    assert api.patch(f"{events_path}batch/", {"events": events}).status_code == 422


def test_batch_create_in_order_with_consecutive_ids(api: Api, events_path: str) -> None:
    body = {
        "events": [
            _message("a"),
            _message("b", {"type": "user", "id": SYS}, score=1.0),
        ]
    }
    response = api.post(f"{events_path}batch/", body)
    assert response.status_code == 201
    items = response.json()["items"]
    assert [item["body"]["content"] for item in items] == ["a", "b"]
    assert items[1]["sequenceId"] == items[0]["sequenceId"] + 1
    assert items[1]["body"]["score"] == 1.0
    assert api.post(f"{events_path}batch/", {"events": []}).json() == {"items": []}


def test_batch_create_is_atomic(api: Api, events_path: str) -> None:
    _post(api, events_path, _message())
    bad_content = {"events": [_message("a"), _message("")]}
    assert api.post(f"{events_path}batch/", bad_content).status_code == 422
    bad_user = {"events": [_message("a"), _message("b", {"type": "user", "id": OTHER_ID})]}
    denied = api.post(f"{events_path}batch/", bad_user)
    assert denied.status_code == 400
    assert "events[1]" in denied.json()["detail"]
    too_many = {"events": [_message("x")] * 201}
    assert api.post(f"{events_path}batch/", too_many).status_code == 422
    assert api.get(events_path).json()["total"] == 1


def test_delete_hides_the_event(api: Api, events_path: str) -> None:
    kept = _post(api, events_path, _message("a")).json()
    gone = _post(api, events_path, _message("b")).json()
    path = f"{events_path}{gone['sequenceId']}/"
    response = api.delete(path)
    assert response.status_code == 204
    assert _seqs(api, events_path) == [kept["sequenceId"]]
    assert _seqs(api, events_path, lastN=5) == [kept["sequenceId"]]
    assert api.patch(path, {"body": {"content": "x"}}).status_code == 404
    assert api.delete(path).status_code == 404
    batch = {
        "events": [
            {"sequenceId": kept["sequenceId"], "body": {"content": "changed"}},
            {"sequenceId": gone["sequenceId"], "body": {"content": "x"}},
        ]
    }
    assert api.patch(f"{events_path}batch/", batch).status_code == 404
    assert api.get(events_path).json()["items"][0]["body"] == {"content": "a"}


def test_event_detail_has_no_get(api: Api, events_path: str) -> None:
    event = _post(api, events_path, _message()).json()
    response = api.get(f"{events_path}{event['sequenceId']}/")
    assert response.status_code == 405
    assert response["Allow"] == "DELETE, PATCH"


def test_other_principal_cannot_touch_events(api: Api, other: Api, events_path: str) -> None:
    event = _post(api, events_path, _message("secret")).json()
    path = f"{events_path}{event['sequenceId']}/"
    assert other.get(events_path).status_code == 404
    assert other.post(events_path, _message()).status_code == 404
    assert other.patch(path, {"body": {"content": "pwned"}}).status_code == 404
    assert other.delete(path).status_code == 404
    assert (
        other.patch(
            f"{events_path}batch/",
            {"events": [{"sequenceId": event["sequenceId"], "body": {"content": "x"}}]},
        ).status_code
        == 404
    )
    assert other.post(f"{events_path}batch/", {"events": [_message()]}).status_code == 404
    assert api.get(events_path).json()["items"] == [event]
