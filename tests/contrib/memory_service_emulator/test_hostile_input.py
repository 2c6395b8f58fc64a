"""Hostile or odd input answers a JSON 4xx, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from tests.contrib.memory_service_emulator.conftest import Api

HUGE = str(10**30)


def _event_raw(extra: bytes) -> bytes:
    return (
        b'{"type":"message","emitter":{"type":"agent"},"body":{"content":"x","d":' + extra + b"}}"
    )


def test_huge_offsets_give_empty_pages(api: Api, session: dict[str, Any], events_path: str) -> None:
    space_id = session["memorySpaceId"]
    api.event(space_id, session["id"])
    for path in ("", f"{space_id}/sessions/", events_path):
        response = api.get(path, query={"offset": HUGE, "limit": 1})
        assert response.status_code == 200, path
        assert response.json()["items"] == []
        assert response.json()["total"] >= 1


def test_huge_sequence_ids_are_404_or_422(api: Api, events_path: str) -> None:
    assert api.delete(f"{events_path}{HUGE}/").status_code == 404
    assert api.patch(f"{events_path}{HUGE}/", {"body": {"content": "x"}}).status_code == 404
    batch = {"events": [{"sequenceId": 10**30, "body": {"content": "x"}}]}
    assert api.patch(f"{events_path}batch/", batch).status_code == 422


def test_deeply_nested_json_is_422(api: Api, events_path: str) -> None:
    for depth in (70, 5000):
        response = api.post(events_path, raw=_event_raw(b"[" * depth + b"]" * depth))
        assert response.status_code == 422, depth
        assert response.json()["detail"][0]["type"] == "json_invalid"
    fine = api.post(events_path, raw=_event_raw(b"[" * 50 + b"]" * 50))
    assert fine.status_code == 201


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe", b'{"description": "\\ud800"}', b"[]", b"null", b'"text"', b"Infinity"],
)
def test_undecodable_or_non_object_bodies_are_422(api: Api, raw: bytes) -> None:
    response = api.post("new/", raw=raw)
    assert response.status_code == 422
    assert isinstance(response.json()["detail"], list)


def test_lone_surrogates_are_422_on_every_database(api: Api, events_path: str) -> None:
    for raw in (_event_raw(b'"\\ud800"'), _event_raw(b'{"\\udfff": 1}')):
        response = api.post(events_path, raw=raw)
        assert response.status_code == 422
        assert "surrogate" in response.json()["detail"][0]["msg"]
    paired = api.post(events_path, raw=_event_raw(b'"\\ud83d\\ude00"'))
    assert paired.json()["body"]["d"] == "\U0001f600"


@pytest.mark.parametrize("value", [True, 1.5, "1", None])
def test_non_integer_sequence_ids_in_batches_are_422(
    api: Api, events_path: str, value: Any
) -> None:
    batch = {"events": [{"sequenceId": value, "body": {"content": "x"}}]}
    assert api.patch(f"{events_path}batch/", batch).status_code == 422


def test_token_setting_must_be_a_list(api: Api) -> None:
    with (
        override_settings(MEMORY_SERVICE_EMULATOR={"TOKENS": "token-a"}),
        pytest.raises(ImproperlyConfigured, match="wrap it in a list"),
    ):
        api.get("")


@pytest.mark.parametrize(
    "raw",
    [
        _event_raw(b'"a\\u0000b"'),
        _event_raw(b'{"k\\u0000": 1}'),
    ],
)
def test_nul_characters_are_422_on_every_database(api: Api, events_path: str, raw: bytes) -> None:
    response = api.post(events_path, raw=raw)
    assert response.status_code == 422
    assert "NUL" in response.json()["detail"][0]["msg"]
    assert api.post("new/", raw=b'{"description": "x\\u0000"}').status_code == 422
