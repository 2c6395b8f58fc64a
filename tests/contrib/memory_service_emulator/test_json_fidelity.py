"""Bodies, metadata and strategies round-trip byte for byte on every database (spec 9, item 46).

PostgreSQL's ``jsonb`` would turn ``1e16`` into ``10000000000000000``, ``1.0`` into ``1``,
``-0.0`` into ``0.0`` and reorder keys; the emulator stores the JSON text instead.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import serializers
from django.core.exceptions import ValidationError
from django.test import Client

from django_pydantic_agent.contrib.memory_service_emulator.models import (
    EmulatedEvent,
    EmulatedSession,
    JSONTextField,
)
from tests.contrib.memory_service_emulator.conftest import SYS, Api

# Every value jsonb would normalise: exponent floats, integral floats, negative zero, big ints,
# key order (jsonb sorts by length, then bytes), nesting, unicode and nulls.
TRICKY: dict[str, Any] = {
    "zz": 1e16,
    "a": 1.0,
    "neg_zero": -0.0,
    "tiny": 5e-324,
    "big": 2**70,
    "huge": -(10**40),
    "pi": 3.141592653589793,
    "nested": {"z": [1, 1.0, [2.5e-8, {"y": None, "b": True}]], "a": {}},
    "text": "caf\u00e9 \u200b \U0001f600  spaced ",
    "none": None,
}


def _text(value: Any) -> str:
    """The canonical text of a JSON value: what must come back, byte for byte."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _raw(response: Any) -> Any:
    """The response parsed with key order and the int/float distinction kept."""
    return json.loads(response.content)


def test_event_body_round_trips(api: Api, events_path: str) -> None:
    body = {"content": "hi", **TRICKY}
    created = api.post(events_path, {"type": "message", "body": body, "emitter": {"type": "agent"}})
    assert created.status_code == 201, created.content
    assert _text(_raw(created)["body"]) == _text(body)
    seq = _raw(created)["sequenceId"]

    listed = _raw(api.get(events_path))["items"]
    assert [_text(item["body"]) for item in listed] == [_text(body)]
    assert _text(EmulatedEvent.objects.get().body) == _text(body)

    patched_body = {"content": "again", "n": [1e16, 1.0, -0.0], **TRICKY}
    patched = api.patch(f"{events_path}{seq}/", {"body": patched_body})
    assert patched.status_code == 200, patched.content
    assert _text(_raw(patched)["body"]) == _text(patched_body)
    assert _text(_raw(api.get(events_path))["items"][0]["body"]) == _text(patched_body)


def test_event_batches_round_trip(api: Api, events_path: str) -> None:
    bodies = [{"content": str(i), "i": i, "f": float(i), **TRICKY} for i in range(3)]
    created = api.post(
        f"{events_path}batch/",
        {"events": [{"type": "message", "body": b, "emitter": {"type": "agent"}} for b in bodies]},
    )
    assert created.status_code == 201, created.content
    assert [_text(item["body"]) for item in _raw(created)["items"]] == [_text(b) for b in bodies]

    seqs = [item["sequenceId"] for item in _raw(created)["items"]]
    new_bodies = [{"content": "p", "x": 1e16 + i, "y": {"k": 1.0}} for i in range(3)]
    patched = api.patch(
        f"{events_path}batch/",
        {"events": [{"sequenceId": s, "body": b} for s, b in zip(seqs, new_bodies, strict=True)]},
    )
    assert patched.status_code == 200, patched.content
    assert [_text(item["body"]) for item in _raw(patched)["items"]] == [
        _text(b) for b in new_bodies
    ]
    listed = _raw(api.get(events_path, query={"lastN": 3}))["items"]
    assert [_text(item["body"]) for item in listed] == [_text(b) for b in new_bodies]


def test_session_metadata_and_strategies_round_trip(api: Api, space: dict[str, Any]) -> None:
    strategies = [
        {"type": "soft_delete", "trigger": {"ttl": 600}},
        {
            "type": "extract_memories",
            "trigger": {"idle": 60},
            "opts": {"softDelete": False, "metadata": TRICKY},
        },
    ]
    session = api.session(space["memorySpaceId"], metadata=TRICKY, lifecycleStrategies=strategies)
    path = f"{space['memorySpaceId']}/sessions/{session['id']}/"
    for answer in (session, _raw(api.get(path)), _raw(api.get(path[: -len(session["id"]) - 1]))):
        item = answer["items"][0] if "items" in answer else answer
        assert _text(item["metadata"]) == _text(TRICKY)
        assert _text(item["lifecycleStrategies"]) == _text(strategies)
    stored = EmulatedSession.objects.get()
    assert _text(stored.metadata) == _text(TRICKY)
    assert _text(stored.lifecycle_strategies) == _text(strategies)

    metadata = {"v": 2.0, "w": 1e16, **TRICKY}
    patched = api.patch(path, {"metadata": metadata, "lifecycleStrategies": strategies[::-1]})
    assert patched.status_code == 200, patched.content
    assert _text(_raw(patched)["metadata"]) == _text(metadata)
    assert _text(_raw(patched)["lifecycleStrategies"]) == _text(strategies[::-1])
    assert _text(_raw(api.get(path))["metadata"]) == _text(metadata)

    cleared = api.patch(path, {"metadata": None})
    assert _raw(cleared)["metadata"] is None
    assert EmulatedSession.objects.get().metadata is None


def test_session_defaults_are_stored(api: Api, space: dict[str, Any]) -> None:
    response = api.post(f"{space['memorySpaceId']}/sessions/", {"participants": [SYS]})
    assert response.status_code == 201, response.content
    assert response.json()["metadata"] is None
    assert response.json()["lifecycleStrategies"] == [
        {"type": "soft_delete", "trigger": {"ttl": 15_552_000}}
    ]
    assert EmulatedSession.objects.get().metadata is None


def test_the_columns_hold_json_text(api: Api, events_path: str) -> None:
    """The database sees text (no jsonb normalisation); Python sees the parsed value."""
    api.post(
        events_path,
        {"type": "message", "body": {"content": "c", **TRICKY}, "emitter": {"type": "agent"}},
    )
    raw = EmulatedEvent.objects.values_list("body", flat=True).get()
    assert isinstance(raw, dict)
    field = EmulatedEvent._meta.get_field("body")
    assert isinstance(field, JSONTextField)
    assert field.get_prep_value({"content": "c", **TRICKY}) == _text({"content": "c", **TRICKY})
    assert field.get_prep_value(None) is None
    assert field.to_python({"a": 1.0}) == {"a": 1.0}
    assert field.to_python('{"a":1.0}') == {"a": 1.0}
    assert field.to_python(None) is None
    with pytest.raises(ValidationError):
        field.to_python("{not json")


def test_dumpdata_round_trips(api: Api, events_path: str) -> None:
    api.post(
        events_path,
        {"type": "message", "body": {"content": "c", **TRICKY}, "emitter": {"type": "agent"}},
    )
    dumped = serializers.serialize("json", EmulatedEvent.objects.all())
    EmulatedEvent.objects.all().delete()
    for obj in serializers.deserialize("json", dumped):
        obj.save()
    assert _text(EmulatedEvent.objects.get().body) == _text({"content": "c", **TRICKY})


def test_admin_shows_the_stored_json(api: Api, events_path: str, session: dict[str, Any]) -> None:
    api.post(
        events_path,
        {"type": "message", "body": {"content": "c", "zz": 1e16}, "emitter": {"type": "agent"}},
    )
    admin = User.objects.create_superuser("root", "root@example.com", "pw")
    browser = Client()
    browser.force_login(admin)
    base = "/admin/django_pydantic_agent_memory_emulator"
    page = browser.get(f"{base}/emulatedevent/{EmulatedEvent.objects.get().pk}/change/")
    assert page.status_code == 200
    assert "{&quot;content&quot;:&quot;c&quot;,&quot;zz&quot;:1e+16}" in page.content.decode()
    page = browser.get(f"{base}/emulatedsession/{EmulatedSession.objects.get().pk}/change/")
    assert page.status_code == 200
    assert "&quot;ttl&quot;:63072000" in page.content.decode()
