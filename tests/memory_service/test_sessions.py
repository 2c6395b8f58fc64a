"""Sessions against the emulator (wire spec §15 items 18-43) and their client-side contracts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated

import pytest

from django_pydantic_agent.memory_service import (
    DEFAULT_SESSION_TTL_SECONDS,
    SYSTEM_PARTICIPANT,
    DRDeduplicationKey,
    DRMemoryBadRequestError,
    DRMemoryNotFoundError,
    DRMemorySpace,
    DRMemoryValidationError,
    DRMemoryVersionConflictError,
    DRRangeKey,
    DRSession,
)
from tests.memory_service.conftest import Wire, body_of
from tests.memory_service.orm import (
    SYS,
    USER,
    ChatMessage,
    ChatSession,
    Color,
    Loc,
    MonthTTL,
    NoStrategies,
    Other,
    Part,
    Rich,
)

pytestmark = pytest.mark.django_db(transaction=True)

DEFAULT_STRATEGIES = [{"type": "soft_delete", "trigger": {"ttl": DEFAULT_SESSION_TTL_SECONDS}}]


async def _chat(space: DRMemorySpace, **overrides: str) -> ChatSession:
    values = {"tenant": "acme", "topic": "billing", "chat_id": "c1", "title": "T", **overrides}
    return await ChatSession.post(space, **values)


async def _post_bulk(wire: Wire, space: DRMemorySpace, n: int) -> None:
    """Create ``n`` chat sessions ``//chat/bulk/<i>/`` directly over the wire, then forget them."""
    for i in range(n):
        await wire.raw(
            "POST",
            f"{space.id}/sessions/",
            json={"participants": [SYS], "description": f"//chat/bulk/{i}/"},
        )
    wire.clear()


# Create, get, adopt ----------------------------------------------------------------------------


async def test_post_sends_the_documented_body(wire: Wire, space: DRMemorySpace) -> None:
    s = await _chat(space)
    assert body_of(wire.last("POST")) == {
        "participants": [SYS],
        "deduplicationKey": "c1",
        "description": "//chat/acme/billing/",
        "metadata": {"title": "T"},
        "lifecycleStrategies": DEFAULT_STRATEGIES,
    }
    assert s.id
    assert (s.version, s.rev) == (1, 1)
    assert datetime.fromisoformat(s.created_at)
    assert s.participants == [SYSTEM_PARTICIPANT]
    assert s.lifecycle_strategies == DEFAULT_STRATEGIES
    assert (s.title, s.tenant, s.topic, s.chat_id) == ("T", "acme", "billing", "c1")
    assert s.space is space


async def test_post_adopts_the_existing_session(wire: Wire, space: DRMemorySpace) -> None:
    s = await _chat(space)
    raw = await wire.raw(
        "POST",
        f"{space.id}/sessions/",
        json={"participants": [SYS], "deduplicationKey": "c1", "description": "//chat/x/y/"},
    )
    assert raw.status_code == 409
    assert raw.json()["errorName"] == "SessionDeduplicationConflict"
    assert raw.json()["existingSessionId"] == s.id
    assert raw.json()["existingSessionUrl"] == f"/memory/{space.id}/sessions/{s.id}/"
    again = await _chat(space, topic="support", title="other")
    assert (again.id, again.title, again.topic) == (s.id, "T", "billing")
    elsewhere = await DRMemorySpace.post(space.client)
    fresh = await _chat(elsewhere)
    assert fresh.id != s.id


async def test_get_by_id_and_by_dedup_key(wire: Wire, space: DRMemorySpace) -> None:
    s = await _chat(space)
    by_id = await ChatSession.get(space, id=s.id)
    assert by_id.model_dump() == s.model_dump()
    assert (by_id.id, by_id.version, by_id.created_at) == (s.id, s.version, s.created_at)
    with pytest.raises(DRMemoryNotFoundError):
        await ChatSession.get(space, id=str(uuid.uuid4()))
    other_space = await DRMemorySpace.post(space.client)
    with pytest.raises(DRMemoryNotFoundError):
        await ChatSession.get(other_space, id=s.id)
    wire.clear()
    by_key = await ChatSession.get(space, chat_id="c1")
    assert by_key.id == s.id
    (request,) = wire.sent
    assert dict(request.url.params) == {"deduplicationKey": "c1", "offset": "0", "limit": "100"}
    with pytest.raises(DRMemoryNotFoundError) as caught:
        await ChatSession.get(space, chat_id="missing")
    assert caught.value.status_code == 404
    assert "'missing'" in str(caught.value)


async def test_lifecycle_strategies_sent_on_create(wire: Wire, space: DRMemorySpace) -> None:
    none = await NoStrategies.post(space)
    assert body_of(wire.last("POST"))["lifecycleStrategies"] == []
    assert none.lifecycle_strategies  # the service applied its default
    month = await MonthTTL.post(space)
    assert month.lifecycle_strategies == [{"type": "soft_delete", "trigger": {"ttl": 2592000}}]


@pytest.mark.parametrize(
    "override",
    [
        {"lifecycleStrategies": [DEFAULT_STRATEGIES[0]] * 6},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {"ttl": 0}}]},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {"ttl": 63072001}}]},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {"ttl": 1, "idle": 1}}]},
        {"lifecycleStrategies": [{"type": "bogus", "trigger": {"ttl": 1}}]},
        {"lifecycleStrategies": [{"type": "soft_delete", "trigger": {"never": True}}]},
        {"participants": []},
        {"participants": ["xyz"]},
        {"participants": [SYS, USER]},
        {"metadata": "str"},
    ],
)
async def test_invalid_creates_are_422(
    wire: Wire, space: DRMemorySpace, override: dict[str, object]
) -> None:
    body = {"participants": [SYS], "description": "//raw/", **override}
    raw = await wire.raw("POST", f"{space.id}/sessions/", json=body)
    assert raw.status_code == 422
    assert raw.json()["detail"][0]["msg"]


async def test_orm_surfaces_invalid_creates_as_validation_errors(space: DRMemorySpace) -> None:
    with pytest.raises(DRMemoryValidationError):
        await _chat(space, participants=["xyz"])  # type: ignore[arg-type]

    class SixStrategies(DRSession):
        __lifecycle_strategies__ = [DEFAULT_STRATEGIES[0]] * 6

    with pytest.raises(DRMemoryValidationError):
        await SixStrategies.post(space)


async def test_participants_are_echoed(space: DRMemorySpace) -> None:
    s = await ChatSession.post(space, tenant="t", topic="x", chat_id="p", participants=[USER])
    assert s.participants == [USER]
    s.participants.append("mutated")
    assert s.participants == [USER]


async def test_typed_metadata_round_trips(wire: Wire, space: DRMemorySpace) -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    parts = [Part(name="a", weight=1.0, count=2)]
    r = await Rich.post(space, when=when, color=Color.BLUE, parts=parts, note=None)
    assert body_of(wire.last("POST"))["metadata"] == {
        "when": "2026-01-02T00:00:00Z",
        "color": "blue",
        "parts": [{"name": "a", "weight": 1.0, "count": 2}],
        "note": None,
    }
    fetched = await Rich.get(space, id=r.id)
    assert (fetched.when, fetched.color, fetched.parts, fetched.note) == (
        when,
        Color.BLUE,
        parts,
        None,
    )


# List, filters, pagination ---------------------------------------------------------------------


async def test_list_is_scoped_to_the_class_and_range_prefix(
    wire: Wire, space: DRMemorySpace
) -> None:
    billing = await _chat(space, chat_id="1")
    support = await _chat(space, chat_id="2", topic="support")
    corp = await _chat(space, chat_id="3", tenant="acmecorp", topic="x")
    await Other.post(space, q="q")
    await Loc.post(space, key="chat:1")
    assert {s.id for s in await ChatSession.list(space)} == {billing.id, support.id, corp.id}
    assert wire.last().url.params["description"] == "//chat/"
    acme = await ChatSession.list(space, tenant="acme")
    assert {s.id for s in acme} == {billing.id, support.id}
    one = await ChatSession.list(space, tenant="acme", topic="billing")
    assert [s.id for s in one] == [billing.id]
    assert wire.last().url.params["description"] == "//chat/acme/billing/"
    upper = await ChatSession.list(space, tenant="ACME")
    assert {s.id for s in upper} == {billing.id, support.id}
    assert [s.q for s in await Other.list(space)] == ["q"]
    assert [s.key for s in await Loc.list(space)] == ["chat:1"]


async def test_range_values_are_escaped_and_literal(wire: Wire, space: DRMemorySpace) -> None:
    odd = await _chat(space, chat_id="odd", tenant="a/b%_c", topic="t")
    assert body_of(wire.last("POST"))["description"] == "//chat/a%2Fb%25_c/t/"
    assert odd.tenant == "a/b%_c"
    assert (await ChatSession.get(space, id=odd.id)).tenant == "a/b%_c"
    assert [s.id for s in await ChatSession.list(space, tenant="a/b%_c")] == [odd.id]
    await _chat(space, chat_id="axb", tenant="aXb", topic="t")
    assert await ChatSession.list(space, tenant="a_b") == []
    await _chat(space, chat_id="ax25", tenant="ax25", topic="t")
    assert await ChatSession.list(space, tenant="a%") == []
    assert wire.last().url.params["description"] == "//chat/a%25/"


async def test_participant_filter(wire: Wire, space: DRMemorySpace) -> None:
    mine = await _chat(space, chat_id="u", participants=[USER])  # type: ignore[arg-type]
    await _chat(space, chat_id="s")
    await _chat(space, chat_id="u2", tenant="other", participants=[USER])  # type: ignore[arg-type]
    assert {s.id for s in await ChatSession.list(space, participant=USER)} == {
        mine.id,
        (await ChatSession.get(space, chat_id="u2")).id,
    }
    both = await ChatSession.list(space, participant=USER, tenant="acme")
    assert [s.id for s in both] == [mine.id]
    with pytest.raises(DRMemoryBadRequestError) as caught:
        await ChatSession.list(space, participant="not-an-oid")
    assert caught.value.status_code == 400
    short = await wire.raw("GET", f"{space.id}/sessions/", params={"description": "ab"})
    assert short.status_code == 422


@pytest.mark.e2e
async def test_list_fetches_every_page(wire: Wire, space: DRMemorySpace) -> None:
    await _post_bulk(wire, space, 250)
    listed = await ChatSession.list(space, tenant="bulk")
    assert len(listed) == 250
    assert len({s.id for s in listed}) == 250
    assert [r.url.params["offset"] for r in wire.sent] == ["0", "100", "200"]
    assert {r.url.params["limit"] for r in wire.sent} == {"100"}
    for offset, size in ((0, 100), (100, 100), (200, 50)):
        page = await wire.raw(
            "GET",
            f"{space.id}/sessions/",
            params={"description": "//chat/bulk/", "offset": offset, "limit": 100},
        )
        assert (len(page.json()["items"]), page.json()["total"]) == (size, 250)


async def test_list_pages_follow_offset_and_total(wire: Wire, space: DRMemorySpace) -> None:
    await _post_bulk(wire, space, 101)
    listed = await ChatSession.list(space, tenant="bulk")
    assert len({s.id for s in listed}) == 101
    assert [r.url.params["offset"] for r in wire.sent] == ["0", "100"]
    raw = await wire.raw(
        "GET", f"{space.id}/sessions/", params={"description": "//chat/bulk/", "limit": 100}
    )
    assert raw.json()["total"] == 101
    assert len(raw.json()["items"]) == 100
    assert {s.topic for s in listed} == {str(i) for i in range(101)}
    assert {s.chat_id for s in listed} == {None}  # required but absent on the wire: None


async def test_other_spaces_and_deleted_sessions_never_list(space: DRMemorySpace) -> None:
    keep = await _chat(space, chat_id="keep")
    gone = await _chat(space, chat_id="gone")
    elsewhere = await DRMemorySpace.post(space.client)
    await _chat(elsewhere, chat_id="far")
    await gone.delete()
    assert [s.id for s in await ChatSession.list(space)] == [keep.id]


# Patch, concurrency, lifecycle -----------------------------------------------------------------


async def test_patch_metadata_and_range_keys(wire: Wire, space: DRMemorySpace) -> None:
    s = await _chat(space)
    await s.patch(title="T2")
    request = wire.last("PATCH")
    assert request.headers["If-Match"] == "1"
    assert body_of(request) == {"metadata": {"title": "T2"}}
    assert (s.version, s.rev, s.title) == (2, 2, "T2")
    fetched = await ChatSession.get(space, id=s.id)
    assert (fetched.version, fetched.rev, fetched.title) == (2, 2, "T2")
    await s.patch(topic="support")
    request = wire.last("PATCH")
    assert request.headers["If-Match"] == "2"
    assert body_of(request) == {"description": "//chat/acme/support/"}
    assert (s.version, s.topic) == (3, "support")
    listed = await ChatSession.list(space, tenant="acme", topic="support")
    assert [x.id for x in listed] == [s.id]


async def test_stale_patch_is_a_version_conflict(space: DRMemorySpace) -> None:
    s = await _chat(space)
    a = await ChatSession.get(space, id=s.id)
    b = await ChatSession.get(space, id=s.id)
    await a.patch(title="x")
    with pytest.raises(DRMemoryVersionConflictError) as caught:
        await b.patch(title="y")
    assert caught.value.status_code == 409
    assert "session version mismatch" in caught.value.detail.lower()
    assert b.title == "T"
    assert (await ChatSession.get(space, id=s.id)).title == "x"


async def test_if_match_forms(wire: Wire, space: DRMemorySpace) -> None:
    s = await _chat(space)
    path = f"{space.id}/sessions/{s.id}/"
    quoted = await wire.raw(
        "PATCH", path, json={"metadata": {"title": "q"}}, headers={"If-Match": '"1"'}
    )
    assert quoted.status_code == 200
    assert quoted.json()["version"] == 2
    unguarded = await wire.raw("PATCH", path, json={"metadata": {"title": "u"}})
    assert unguarded.json()["version"] == 3
    assert isinstance(unguarded.json()["lifecycleStrategies"], list)


async def test_patch_lifecycle_strategies(wire: Wire, space: DRMemorySpace) -> None:
    s = await _chat(space)
    idle = [{"type": "soft_delete", "trigger": {"idle": 100}}]
    await s.patch_lifecycle_strategies(idle)
    assert body_of(wire.last("PATCH")) == {"lifecycleStrategies": idle}
    assert (s.version, s.lifecycle_strategies) == (2, idle)
    await s.patch_lifecycle_strategies(idle)
    assert s.version == 3
    for bad in ([], [DEFAULT_STRATEGIES[0]] * 6):
        raw = await wire.raw(
            "PATCH", f"{space.id}/sessions/{s.id}/", json={"lifecycleStrategies": bad}
        )
        assert raw.status_code == 422
    with pytest.raises(DRMemoryValidationError):
        await s.patch_lifecycle_strategies([DEFAULT_STRATEGIES[0]] * 6)
    with pytest.raises(ValueError, match="1 to 5"):
        await s.patch_lifecycle_strategies([])


async def test_event_operations_never_bump_the_session_version(space: DRMemorySpace) -> None:
    s = await _chat(space)
    m = await ChatMessage.post(s, content="hi", emitter_type="agent")
    await m.patch(score=0.5)
    await m.delete()
    await s.patch(title="still version 1")
    assert s.version == 2


# Delete ----------------------------------------------------------------------------------------


async def test_delete_hides_the_session_and_frees_its_key(wire: Wire, space: DRMemorySpace) -> None:
    s = await _chat(space)
    await s.delete()
    with pytest.raises(DRMemoryNotFoundError):
        await ChatSession.get(space, id=s.id)
    assert await ChatSession.list(space) == []
    with pytest.raises(DRMemoryNotFoundError):
        await ChatSession.get(space, chat_id="c1")
    again = await _chat(space)
    assert again.id != s.id
    events = await wire.raw("GET", f"{space.id}/sessions/{s.id}/events/")
    assert events.status_code == 404


# Client-side contracts (no request is sent) ----------------------------------------------------


async def test_client_side_errors_send_nothing(wire: Wire, space: DRMemorySpace) -> None:
    s = await _chat(space)
    wire.clear()
    with pytest.raises(ValueError, match="undeclared fields \\['bogus'\\]"):
        await ChatSession.post(space, tenant="a", topic="b", chat_id="x", bogus=1)
    with pytest.raises(ValueError, match="rev=5"):
        await ChatSession.post(space, tenant="a", topic="b", chat_id="x", rev=5)
    with pytest.raises(ValueError, match=r"ChatSession\.tenant is a DRRangeKey and got ''"):
        await ChatSession.post(space, tenant="", topic="b", chat_id="x")
    with pytest.raises(ValueError, match="got None"):
        await ChatSession.post(space, topic="b", chat_id="x")
    with pytest.raises(ValueError, match="over the service limit of 1000"):
        await ChatSession.post(space, tenant="x" * 1000, topic="b", chat_id="x")
    with pytest.raises(ValueError, match="exactly one of id= or"):
        await ChatSession.get(space)
    with pytest.raises(ValueError, match="exactly one of id= or"):
        await ChatSession.get(space, id=s.id, chat_id="c1")
    with pytest.raises(ValueError, match="only 'chat_id'"):
        await ChatSession.get(space, title="T")
    with pytest.raises(ValueError, match="no DRDeduplicationKey"):
        await Other.get(space, q="q")
    with pytest.raises(ValueError, match="contiguous leading prefix"):
        await ChatSession.list(space, topic="billing")
    with pytest.raises(ValueError, match="contiguous leading prefix"):
        await ChatSession.list(space, title="T")
    with pytest.raises(ValueError, match="nothing to change"):
        await s.patch()
    with pytest.raises(ValueError, match="cannot change \\['chat_id', 'participants', 'rev'\\]"):
        await s.patch(chat_id="c2", participants=[USER], rev=9)
    with pytest.raises(ValueError, match="got None"):
        await s.patch(tenant=None)
    assert wire.sent == []


async def test_unbound_instances_explain_themselves() -> None:
    loose = ChatSession(tenant="a", topic="b", chat_id="c", rev=1)
    with pytest.raises(ValueError, match="not bound to a stored session"):
        await loose.patch(title="x")
    with pytest.raises(ValueError, match="not bound to a stored session"):
        await loose.delete()


def test_class_creation_validates_markers() -> None:
    with pytest.raises(TypeError, match="reserved by DRSession"):

        class Reserved(DRSession):
            version: int = 0

    with pytest.raises(TypeError, match="several markers"):

        class Both(DRSession):
            x: Annotated[str, DRRangeKey, DRDeduplicationKey()]

    with pytest.raises(TypeError, match="is abstract"):
        DRSession._routing()


def test_prefix_defaults_to_the_class_name() -> None:
    class Plain(DRSession):
        k: Annotated[str, DRRangeKey]

    assert Plain._prefix() == "Plain"
    assert Other._prefix() == "chatx"
