"""Events against the emulator (wire spec §15 items 44-68) and their client-side contracts."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

import pytest

from django_pydantic_agent.memory_service import (
    DREvent,
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
    Part,
    Rich,
    StatusEvent,
    ToolOutput,
    Typed,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def session(space: DRMemorySpace) -> ChatSession:
    return await ChatSession.post(space, tenant="acme", topic="billing", chat_id="c1")


def _path(session: DRSession, tail: str = "") -> str:
    return f"{session.space.id}/sessions/{session.id}/events/{tail}"


async def _post_n(session: ChatSession, n: int) -> list[ChatMessage]:
    return [
        await ChatMessage.post(session, content=f"m{i}", emitter_type="agent") for i in range(n)
    ]


# Create and read -------------------------------------------------------------------------------


async def test_post_agent_event(wire: Wire, session: ChatSession) -> None:
    m = await ChatMessage.post(session, content="hi", emitter_type="agent")
    assert body_of(wire.last("POST")) == {
        "type": "message",
        "body": {"content": "hi"},
        "emitter": {"type": "agent"},
    }
    listed = await wire.raw("GET", _path(session), params={"lastN": 1})
    (raw,) = listed.json()["items"]
    assert isinstance(raw["sequenceId"], int)
    assert isinstance(raw["createdAt"], str)
    assert (raw["body"], raw["emitterType"], raw["emitterId"], raw["eventType"]) == (
        {"content": "hi"},
        "agent",
        None,
        "message",
    )
    assert m.sequence_id >= 0
    assert (m.content, m.emitter_type, m.emitter_id, m.score) == ("hi", "agent", None, 0.0)
    assert m.created_at == raw["createdAt"]
    assert m.session is session


async def test_post_user_event(wire: Wire, session: ChatSession) -> None:
    m = await ChatMessage.post(session, content="u", emitter_type="user", emitter_id=SYS, score=0.9)
    assert body_of(wire.last("POST"))["emitter"] == {"type": "user", "id": SYS}
    assert (m.emitter_type, m.emitter_id, m.score) == ("user", SYS, 0.9)


async def test_typed_body_round_trips_exactly(wire: Wire, space: DRMemorySpace) -> None:
    rich = await Rich.post(space)
    values: dict[str, Any] = {
        "tags": ["a", "b"],
        "meta": {"n": 1, "f": 1.5, "none": None, "deep": {"list": [1, 2.0, "x"]}},
        "when": datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        "ref": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "nested": [Part(name="bolt", weight=2.0, count=3)],
        "opt": None,
        "color": Color.BLUE,
        "ratio": 1,
        "count": 7,
    }
    posted = await Typed.post(rich, content="\u200b", emitter_type="agent", **values)
    sent = body_of(wire.last("POST"))["body"]
    (read,) = await Typed.list(rich)
    for name, value in values.items():
        expected = float(value) if name == "ratio" else value
        assert getattr(read, name) == expected, name
        assert getattr(posted, name) == expected, name
    assert read.content == "\u200b"
    raw = (await wire.raw("GET", _path(rich))).json()["items"][0]["body"]
    assert json.dumps(raw, sort_keys=True) == json.dumps(sent, sort_keys=True)
    assert isinstance(raw["ratio"], float)
    assert isinstance(raw["count"], int)
    assert raw["opt"] is None


async def test_sequence_ids_are_per_session_and_never_reused(space: DRMemorySpace) -> None:
    a = await ChatSession.post(space, tenant="a", topic="x", chat_id="a")
    b = await ChatSession.post(space, tenant="b", topic="x", chat_id="b")
    first = [m.sequence_id for m in await _post_n(a, 3)]
    assert first == [first[0], first[0] + 1, first[0] + 2]
    assert [m.sequence_id for m in await _post_n(b, 1)] == [first[0]]
    last = (await ChatMessage.last(a, 1))[0]
    await last.delete()
    (after,) = await _post_n(a, 1)
    assert after.sequence_id > first[-1]


async def test_content_limits(wire: Wire, session: ChatSession) -> None:
    with pytest.raises(DRMemoryValidationError) as caught:
        await ChatMessage.post(session, content="", emitter_type="agent")
    assert caught.value.status_code == 422
    with pytest.raises(DRMemoryValidationError):
        await ChatMessage.post(session, content="x" * 100_001, emitter_type="agent")
    big = await ChatMessage.post(session, content="x" * 100_000, emitter_type="agent")
    assert len(big.content) == 100_000
    zwsp = await ChatMessage.post(session, content="\u200b", emitter_type="agent")
    assert (await ChatMessage.last(session, 1))[0].content == zwsp.content == "\u200b"


async def test_emitter_validation(wire: Wire, session: ChatSession) -> None:
    def create(emitter: dict[str, str]) -> dict[str, object]:
        return {"type": "message", "body": {"content": "x"}, "emitter": emitter}

    robot = await wire.raw("POST", _path(session), json=create({"type": "robot"}))
    assert robot.status_code == 422
    stranger = create({"type": "user", "id": "ffffffffffffffffffffffff"})
    assert (await wire.raw("POST", _path(session), json=stranger)).status_code == 400
    assert (
        await wire.raw("POST", _path(session), json=create({"type": "user"}))
    ).status_code == 400
    agent = await wire.raw("POST", _path(session), json=create({"type": "agent", "id": SYS}))
    assert agent.status_code == 201


async def test_user_emitter_pre_check_sends_nothing(wire: Wire, session: ChatSession) -> None:
    wire.clear()
    with pytest.raises(DRMemoryBadRequestError) as caught:
        await ChatMessage.post(session, content="x", emitter_type="user", emitter_id=USER)
    assert caught.value.status_code is None
    assert repr(USER) in str(caught.value)
    with pytest.raises(DRMemoryBadRequestError):
        await ChatMessage.post_batch(
            session, [{"content": "x", "emitter_type": "user", "emitter_id": USER}]
        )
    assert wire.sent == []
    # Without an id the service decides (and refuses).
    with pytest.raises(DRMemoryBadRequestError) as caught:
        await ChatMessage.post(session, content="x", emitter_type="user")
    assert caught.value.status_code == 400


async def test_event_types_filter(wire: Wire, session: ChatSession) -> None:
    await ChatMessage.post(session, content="m", emitter_type="agent")
    status = await StatusEvent.post(session, content="s", emitter_type="agent")
    await ToolOutput.post(session, content="t", emitter_type="agent")
    assert body_of(wire.last("POST"))["type"] == "tool_output"
    only = await ChatMessage.list(session, type="status")
    assert [e.sequence_id for e in only] == [status.sequence_id]
    assert wire.last().url.params["eventType"] == "status"
    assert [e.content for e in await ChatMessage.list(session)] == ["m", "s", "t"]
    bogus = await wire.raw("GET", _path(session), params={"eventType": "bogus"})
    assert bogus.status_code == 422
    with pytest.raises(DRMemoryValidationError):
        await ChatMessage.list(session, type="bogus")


async def test_paging_and_tail(wire: Wire, session: ChatSession) -> None:
    e = [m.sequence_id for m in await _post_n(session, 5)]
    assert [m.sequence_id for m in await ChatMessage.list(session, offset=0, limit=2)] == e[:2]
    assert [m.sequence_id for m in await ChatMessage.list(session, offset=2, limit=2)] == e[2:4]
    assert await ChatMessage.list(session, offset=10) == []
    assert [m.sequence_id for m in await ChatMessage.last(session, 2)] == e[3:]
    assert dict(wire.last().url.params) == {"lastN": "2"}
    await StatusEvent.post(session, content="s", emitter_type="agent")
    tail = await ChatMessage.last(session, n=2, type="message")
    assert [m.sequence_id for m in tail] == e[3:]
    assert len(await ChatMessage.last(session, n=10)) == 6
    both = await wire.raw("GET", _path(session), params={"lastN": 2, "offset": 0})
    assert both.status_code == 422
    for call in (
        ChatMessage.last(session, 0),
        ChatMessage.last(session, 101),
        ChatMessage.list(session, limit=0),
        ChatMessage.list(session, limit=101),
    ):
        with pytest.raises(DRMemoryValidationError):
            await call


async def test_routes_under_missing_parents_are_404(
    wire: Wire, space: DRMemorySpace, session: ChatSession
) -> None:
    unknown = f"{space.id}/sessions/{uuid.uuid4()}/events/"
    assert (await wire.raw("GET", unknown)).status_code == 404
    m = await ChatMessage.post(session, content="x", emitter_type="agent")
    await session.delete()
    with pytest.raises(DRMemoryNotFoundError):
        await ChatMessage.list(session)
    with pytest.raises(DRMemoryNotFoundError):
        await m.patch(content="y")
    other = await ChatSession.post(space, tenant="o", topic="x", chat_id="o")
    await space.delete()
    with pytest.raises(DRMemoryNotFoundError):
        await ChatMessage.post(other, content="x", emitter_type="agent")


# Patch and concurrency -------------------------------------------------------------------------


async def test_patch_advances_the_token(wire: Wire, session: ChatSession) -> None:
    m = await ChatMessage.post(session, content="hi", emitter_type="agent")
    old_token, seq = m.created_at, m.sequence_id
    await m.patch(score=0.7)
    request = wire.last("PATCH")
    assert request.url.params["createdAt"] == old_token
    assert body_of(request) == {"body": {"content": "hi", "score": 0.7}}
    assert m.score == 0.7
    assert m.created_at != old_token
    assert datetime.fromisoformat(m.created_at) > datetime.fromisoformat(old_token)
    assert m.sequence_id == seq
    await m.patch(content="hi2")
    assert (await ChatMessage.last(session, 1))[0].content == "hi2"


async def test_stale_token_is_a_version_conflict(session: ChatSession) -> None:
    m = await ChatMessage.post(session, content="hi", emitter_type="agent")
    (old,) = await ChatMessage.list(session)
    await m.patch(score=0.5)
    with pytest.raises(DRMemoryVersionConflictError) as caught:
        await old.patch(score=0.1)
    assert caught.value.status_code == 422
    assert "patch of incorrect version of event" in caught.value.detail.lower()
    assert (await ChatMessage.last(session, 1))[0].score == 0.5


async def test_raw_patch_token_forms(wire: Wire, session: ChatSession) -> None:
    m = await ChatMessage.post(session, content="hi", emitter_type="agent")
    path = _path(session, f"{m.sequence_id}/")
    free = await wire.raw("PATCH", path, json={"body": {"content": "a"}})
    assert free.status_code == 200
    token = datetime.fromisoformat(free.json()["createdAt"]).isoformat()
    assert "+00:00" in token
    offset = await wire.raw(
        "PATCH", path, params={"createdAt": token}, json={"body": {"content": "b"}}
    )
    assert offset.status_code == 200
    spaced = offset.json()["createdAt"].replace("Z", "+00:00").replace("+", " ")
    url = wire.endpoint + "/memory/" + path + "?createdAt=" + spaced.replace(":", "%3A")
    raw_space = await wire.pool.patch(
        url.replace(" ", "+"),
        headers={"Authorization": "Bearer token-a"},
        json={"body": {"content": "c"}},
    )
    assert raw_space.status_code == 200
    assert (
        await wire.raw("PATCH", _path(session, "999999/"), json={"body": {"content": "x"}})
    ).status_code == 404
    assert (await wire.raw("PATCH", path, json={"body": {"score": 1}})).status_code == 422


async def test_patch_emitter(wire: Wire, session: ChatSession) -> None:
    m = await ChatMessage.post(session, content="x", emitter_type="user", emitter_id=SYS)
    with pytest.raises(DRMemoryBadRequestError) as caught:
        await m.patch(emitter_type="user", emitter_id="ffffffffffffffffffffffff")
    assert caught.value.status_code == 400
    await m.patch(emitter_type="agent")
    assert body_of(wire.last("PATCH")) == {"emitter": {"type": "agent", "id": SYS}}
    assert (m.emitter_type, m.emitter_id) == ("agent", SYS)


async def test_patch_batch(wire: Wire, session: ChatSession) -> None:
    m1, m2 = await _post_n(session, 2)
    t1, t2 = m1.created_at, m2.created_at
    updated = await ChatMessage.patch_batch(
        session, [(m1, {"score": 0.9}), (m2, {"content": "edited", "emitter_type": "agent"})]
    )
    assert body_of(wire.last("PATCH")) == {
        "events": [
            {
                "sequenceId": m1.sequence_id,
                "createdAt": t1,
                "body": {"content": "m0", "score": 0.9},
            },
            {
                "sequenceId": m2.sequence_id,
                "createdAt": t2,
                "body": {"content": "edited", "score": 0.0},
                "emitter": {"type": "agent"},
            },
        ]
    }
    assert updated == [m1, m2]
    assert updated[0] is m1
    assert (m1.score, m2.content) == (0.9, "edited")
    assert m1.created_at != t1
    assert m2.created_at != t2
    await m1.patch(score=0.1)


async def test_patch_batch_is_atomic(wire: Wire, session: ChatSession) -> None:
    m1, m2 = await _post_n(session, 2)
    (stale,) = await ChatMessage.list(session, offset=1, limit=1)
    await m2.patch(score=0.3)
    with pytest.raises(DRMemoryVersionConflictError) as caught:
        await ChatMessage.patch_batch(session, [(m1, {"score": 0.9}), (stale, {"score": 0.1})])
    assert caught.value.status_code == 422
    assert [m.score for m in await ChatMessage.list(session)] == [0.0, 0.3]
    batch = _path(session, "batch/")
    dup = {"events": [{"sequenceId": m1.sequence_id, "body": {"content": "a"}}] * 2}
    assert (await wire.raw("PATCH", batch, json=dup)).status_code == 422
    bare = {"events": [{"sequenceId": m1.sequence_id}]}
    assert (await wire.raw("PATCH", batch, json=bare)).status_code == 422
    many = {"events": [{"sequenceId": i, "body": {"content": "a"}} for i in range(201)]}
    assert (await wire.raw("PATCH", batch, json=many)).status_code == 422


async def test_post_batch(wire: Wire, session: ChatSession) -> None:
    events = await ChatMessage.post_batch(
        session,
        [
            {"content": "a", "emitter_type": "agent"},
            {"content": "b", "emitter_type": "user", "emitter_id": SYS, "score": 1},
        ],
    )
    assert [e.content for e in events] == ["a", "b"]
    assert events[1].sequence_id == events[0].sequence_id + 1
    assert body_of(wire.last("POST"))["events"][1]["body"] == {"content": "b", "score": 1.0}
    with pytest.raises(DRMemoryValidationError):
        await ChatMessage.post_batch(
            session,
            [{"content": "ok", "emitter_type": "agent"}, {"content": "", "emitter_type": "agent"}],
        )
    assert len(await ChatMessage.list(session)) == 2
    many = {
        "events": [{"type": "message", "body": {"content": "a"}, "emitter": {"type": "agent"}}]
        * 201
    }
    assert (await wire.raw("POST", _path(session, "batch/"), json=many)).status_code == 422
    assert await ChatMessage.post_batch(session, []) == []


async def test_delete_event(wire: Wire, session: ChatSession) -> None:
    keep, gone = await _post_n(session, 2)
    await gone.delete()
    assert [m.sequence_id for m in await ChatMessage.list(session)] == [keep.sequence_id]
    assert [m.sequence_id for m in await ChatMessage.last(session, 5)] == [keep.sequence_id]
    path = _path(session, f"{gone.sequence_id}/")
    assert (await wire.raw("PATCH", path, json={"body": {"content": "x"}})).status_code == 404
    assert (await wire.raw("DELETE", path)).status_code == 404
    with pytest.raises(DRMemoryNotFoundError):
        await ChatMessage.patch_batch(session, [(keep, {"score": 1.0}), (gone, {"score": 1.0})])
    assert (await ChatMessage.last(session, 1))[0].score == 0.0


# Client-side contracts -------------------------------------------------------------------------


async def test_client_side_errors_send_nothing(wire: Wire, session: ChatSession) -> None:
    (m,) = await _post_n(session, 1)
    wire.clear()
    with pytest.raises(ValueError, match="undeclared fields \\['bogus'\\]"):
        await ChatMessage.post(session, content="x", emitter_type="agent", bogus=1)
    with pytest.raises(ValueError, match="at most 200"):
        await ChatMessage.post_batch(session, [{"content": "x", "emitter_type": "agent"}] * 201)
    with pytest.raises(ValueError, match="lacks \\['emitter_type'\\]"):
        await ChatMessage.post_batch(session, [{"content": "x"}])
    with pytest.raises(ValueError, match="at most 200"):
        await ChatMessage.patch_batch(session, [(m, {"score": 1.0})] * 201)
    with pytest.raises(ValueError, match="nothing to change"):
        await ChatMessage.patch_batch(session, [(m, {})])
    with pytest.raises(ValueError, match="nothing to change"):
        await m.patch()
    with pytest.raises(ValueError, match="undeclared fields \\['nope'\\]"):
        await m.patch(nope=1)
    other = await ChatSession.post(session.space, tenant="z", topic="z", chat_id="z")
    wire.clear()
    with pytest.raises(ValueError, match="batch each session separately"):
        await ChatMessage.patch_batch(other, [(m, {"score": 1.0})])
    loc = await Loc.post(session.space, key="k")
    wire.clear()
    with pytest.raises(TypeError, match="bound to ChatSession sessions but got Loc"):
        await ChatMessage.post(loc, content="x", emitter_type="agent")
    with pytest.raises(ValueError, match="not bound to a stored event"):
        await ChatMessage(content="x").patch(content="y")
    with pytest.raises(ValueError, match="not bound to a stored session"):
        await ChatMessage.list(ChatSession(tenant="a", topic="b", chat_id="c", rev=1))
    assert wire.sent == []


async def test_unbound_event_class_accepts_any_session(space: DRMemorySpace) -> None:
    class Note(DREvent):
        pass

    loc = await Loc.post(space, key="k")
    note = await Note.post(loc, content="n", emitter_type="agent")
    assert [n.content for n in await Note.list(loc)] == ["n"]
    assert note.session is loc


def test_class_creation_validates_events() -> None:
    with pytest.raises(TypeError, match="reserved by DREvent"):

        class Reserved(DREvent):
            content: str = "x"

    with pytest.raises(TypeError, match="not a DRSession subclass"):

        class Unbound(DREvent, session=int):
            pass

    class Keyed(DRSession):
        k: Annotated[str, DRRangeKey]

    class Bound(DREvent, session=Keyed):
        pass

    assert Bound.__session_class__ is Keyed
    assert Bound.__event_type__ == "message"
