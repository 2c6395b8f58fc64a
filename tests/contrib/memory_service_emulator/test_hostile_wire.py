"""Hostile query strings, numbers and headers answer a JSON 4xx on every database, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import QueryDict
from django.test import RequestFactory, override_settings

from django_pydantic_agent.contrib.memory_service_emulator import protocol
from tests.contrib.memory_service_emulator.conftest import SYS, Api


def _assert_422(response: Any, loc: list[Any], kind: str) -> dict[str, Any]:
    assert response.status_code == 422, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["detail"][0]
    assert error["loc"] == loc
    assert error["type"] == kind
    assert error["msg"]
    return dict(error)


# --------------------------------------------------------------------------- query strings


@pytest.mark.parametrize("name", ["description", "deduplicationKey"])
def test_nul_in_session_filters_is_422(api: Api, space: dict[str, Any], name: str) -> None:
    space_id = space["memorySpaceId"]
    api.session(space_id, description="//chat/zz/", deduplicationKey="zz")
    response = api.get(f"{space_id}/sessions/", query={name: "\x00ab", "offset": 0, "limit": 100})
    error = _assert_422(response, ["query", name], "string_type")
    assert "NUL" in error["msg"]
    assert error["input"] == "\x00ab"


def test_nul_in_participants_filter_is_422(api: Api, space: dict[str, Any]) -> None:
    response = api.get(f"{space['memorySpaceId']}/sessions/", query={"participants": "\x00" * 24})
    _assert_422(response, ["query", "participants"], "string_type")


def test_nul_in_space_dedup_filter_is_422(api: Api, space: dict[str, Any]) -> None:
    response = api.get("", query={"deduplicationKey": "\x00"})
    _assert_422(response, ["query", "deduplicationKey"], "string_type")
    # A key without NUL still filters exactly.
    assert api.get("", query={"deduplicationKey": "k\u00e9"}).json() == {"items": [], "total": 0}


@pytest.mark.parametrize("name", ["eventType", "createdAt"])
def test_nul_in_event_queries_is_422(
    api: Api, session: dict[str, Any], events_path: str, name: str
) -> None:
    seq = api.event(session["memorySpaceId"], session["id"])["sequenceId"]
    path = events_path if name == "eventType" else f"{events_path}{seq}/"
    method = api.get if name == "eventType" else api.patch
    kwargs: dict[str, Any] = {} if name == "eventType" else {"body": {"type": "status"}}
    response = method(path, query={name: "\x00"}, **kwargs)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", name]


def test_lone_surrogate_in_a_query_filter_is_422() -> None:
    # Percent-decoding never yields a lone surrogate; the check runs on whatever Django decoded.
    request = RequestFactory().get("/")
    query = QueryDict(mutable=True)
    query["description"] = "ab\ud800"
    request.GET = query  # type: ignore[assignment]
    with pytest.raises(protocol.HTTPError) as raised:
        protocol.query_text(request, "description")
    assert raised.value.status == 422
    assert raised.value.payload["detail"][0]["loc"] == ["query", "description"]
    assert raised.value.payload["detail"][0]["type"] == "string_unicode"


def test_overlong_description_filter_matches_nothing(api: Api, space: dict[str, Any]) -> None:
    # SQLite refuses LIKE patterns over 50 000 bytes ("pattern too complex"); no stored
    # description is longer than 1000 characters, so a longer needle is simply no match.
    space_id = space["memorySpaceId"]
    longest = "//" + "x" * 997 + "/"
    created = api.session(space_id, description=longest)
    path = f"{space_id}/sessions/"
    found = api.get(path, query={"description": longest.upper()}).json()
    assert [item["id"] for item in found["items"]] == [created["id"]]
    for needle in (longest + "y", "%" * 60_000):
        assert api.get(path, query={"description": needle}).json() == {"items": [], "total": 0}


def test_too_many_query_fields_is_a_json_400(api: Api, space: dict[str, Any]) -> None:
    path = f"{space['memorySpaceId']}/sessions/"
    with override_settings(DATA_UPLOAD_MAX_NUMBER_FIELDS=5):
        response = api.get(path, query={"participants": [SYS] * 6})
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in response.json()["detail"]


def test_huge_and_odd_page_params(api: Api, session: dict[str, Any], events_path: str) -> None:
    space_id = session["memorySpaceId"]
    api.event(space_id, session["id"])
    for path in ("", f"{space_id}/sessions/", events_path):
        # Beyond the digit limit of int(): still a 422, not a 500.
        _assert_422(api.get(path, query={"offset": "9" * 5000}), ["query", "offset"], "int_parsing")
        _assert_422(api.get(path, query={"limit": "9" * 5000}), ["query", "limit"], "int_parsing")
        _assert_422(api.get(path, query={"limit": 2**70}), ["query", "limit"], "less_than_equal")
        _assert_422(api.get(path, query={"offset": "1\x00"}), ["query", "offset"], "int_parsing")
    _assert_422(api.get(events_path, query={"lastN": 2**70}), ["query", "lastN"], "less_than_equal")


# --------------------------------------------------------------------------- JSON numbers


@pytest.mark.parametrize("number", [b"1e400", b"-1e400", b"1E999", b"123e456789"])
def test_numbers_overflowing_to_infinity_are_json_invalid(
    api: Api, space: dict[str, Any], events_path: str, number: bytes
) -> None:
    raw = (
        b'{"type":"message","body":{"content":"ok","n":' + number + b'},"emitter":{"type":"agent"}}'
    )
    error = _assert_422(api.post(events_path, raw=raw), ["body"], "json_invalid")
    assert "finite" in error["msg"]
    sessions = f"{space['memorySpaceId']}/sessions/"
    metadata = b'{"participants":["' + SYS.encode() + b'"],"metadata":{"x":[' + number + b"]}}"
    _assert_422(api.post(sessions, raw=metadata), ["body"], "json_invalid")
    assert api.get(events_path).json()["total"] == 0


def test_extreme_finite_numbers_round_trip(api: Api, events_path: str) -> None:
    big = 10**4000  # within Python's int digit limit; jsonb and SQLite JSON both store it
    body = {"content": "ok", "big": big, "tiny": 5e-324, "max": 1.5e308, "neg": -(2**64)}
    created = api.post(events_path, {"type": "message", "body": body, "emitter": {"type": "agent"}})
    assert created.status_code == 201, created.content
    stored = api.get(events_path).json()["items"][0]["body"]
    assert stored["big"] == big
    assert stored["neg"] == -(2**64)
    assert stored["tiny"] == pytest.approx(5e-324)
    assert stored["max"] == pytest.approx(1.5e308)


def test_ints_beyond_the_digit_limit_are_json_invalid(api: Api, events_path: str) -> None:
    raw = (
        b'{"type":"message","body":{"content":"ok","n":'
        + b"9" * 5000
        + b'},"emitter":{"type":"agent"}}'
    )
    _assert_422(api.post(events_path, raw=raw), ["body"], "json_invalid")


# --------------------------------------------------------------------------- empty patches


def test_empty_space_patch_is_422(api: Api, space: dict[str, Any]) -> None:
    path = f"{space['memorySpaceId']}/"
    error = _assert_422(api.patch(path, {}), ["body"], "value_error")
    assert "description" in error["msg"]
    assert api.get(path).json() == space


def test_empty_session_patch_is_200_and_keeps_the_version(
    api: Api, space: dict[str, Any], session: dict[str, Any]
) -> None:
    # Spec 4.9: "A body with no known field: 200, version unchanged."
    path = f"{space['memorySpaceId']}/sessions/{session['id']}/"
    response = api.patch(path, {}, headers={"If-Match": "1"})
    assert response.status_code == 200
    assert response.json() == session


def test_empty_event_patches_are_422(api: Api, session: dict[str, Any], events_path: str) -> None:
    seq = api.event(session["memorySpaceId"], session["id"])["sequenceId"]
    assert api.patch(f"{events_path}{seq}/", {}).status_code == 422
    batch = {"events": [{"sequenceId": seq}]}
    assert api.patch(f"{events_path}batch/", batch).status_code == 422


# --------------------------------------------------------------------------- headers and tokens


def test_huge_if_match_is_422_or_409(
    api: Api, space: dict[str, Any], session: dict[str, Any]
) -> None:
    path = f"{space['memorySpaceId']}/sessions/{session['id']}/"
    response = api.patch(path, {"metadata": {}}, headers={"If-Match": "9" * 5000})
    _assert_422(response, ["header", "If-Match"], "value_error")
    mismatch = api.patch(path, {"metadata": {}}, headers={"If-Match": str(2**70)})
    assert mismatch.status_code == 409
    assert "Session version mismatch" in mismatch.json()["detail"]
    assert api.get(path).json()["version"] == 1


@pytest.mark.parametrize("token", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59.999999-01:00"])
def test_tokens_outside_the_utc_range_are_422(
    api: Api, session: dict[str, Any], events_path: str, token: str
) -> None:
    seq = api.event(session["memorySpaceId"], session["id"])["sequenceId"]
    single = api.patch(f"{events_path}{seq}/", {"type": "status"}, query={"createdAt": token})
    _assert_422(single, ["query", "createdAt"], "datetime_parsing")
    batch = {"events": [{"sequenceId": seq, "createdAt": token, "type": "status"}]}
    _assert_422(
        api.patch(f"{events_path}batch/", batch),
        ["body", "events", 0, "createdAt"],
        "datetime_parsing",
    )
    assert api.get(events_path).json()["items"][0]["eventType"] == "message"
