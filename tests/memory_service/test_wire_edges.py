"""Client behaviours that need a service answering off-contract (a scripted loopback server)."""

from __future__ import annotations

import logging
from typing import cast

import pytest

from django_pydantic_agent.memory_service import (
    DRMemoryConflictError,
    DRMemoryServiceClient,
    DRMemoryServiceError,
    DRMemorySpace,
)
from tests.memory_service.conftest import Reply, ScriptedServer
from tests.memory_service.orm import ChatMessage, ChatSession, Rich

SESSION = {
    "id": "s-1",
    "participants": ["000000000000000000000000"],
    "description": "//chat/acme/billing/",
    "deduplicationKey": "c1",
    "metadata": {"title": "T"},
    "createdAt": "2026-11-30T00:00:00Z",
    "version": 1,
    "lifecycleStrategies": [],
}


def _space(client: DRMemoryServiceClient) -> DRMemorySpace:
    return DRMemorySpace(client, {"memorySpaceId": "sp"})


async def test_lifecycle_patch_ignored_by_the_service_is_an_error(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    scripted.script(Reply.json(201, SESSION), Reply.json(200, {**SESSION, "version": 1}))
    s = await ChatSession.post(
        _space(scripted_client), tenant="acme", topic="billing", chat_id="c1"
    )
    with pytest.raises(DRMemoryServiceError, match="version stayed at 1") as caught:
        await s.patch_lifecycle_strategies([{"type": "soft_delete", "trigger": {"idle": 5}}])
    assert caught.value.status_code == 200


async def test_conflict_without_existing_id_is_raised(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    conflict = Reply.json(409, {"detail": "dup", "errorName": "SessionDeduplicationConflict"})
    scripted.script(conflict)
    with pytest.raises(DRMemoryConflictError):
        await ChatSession.post(_space(scripted_client), tenant="a", topic="b", chat_id="c1")
    scripted.script(
        Reply.json(409, {"detail": "dup", "errorName": "MemorySpaceDeduplicationConflict"})
    )
    with pytest.raises(DRMemoryConflictError):
        await DRMemorySpace.post(scripted_client, deduplication_key="k")


async def test_missing_version_means_one_and_sparse_answers_keep_state(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    sparse = {"id": "s-1", "description": "//chat/acme/billing/", "deduplicationKey": "c1"}
    scripted.script(Reply.json(201, sparse), Reply.json(200, {"id": "s-1"}))
    s = await ChatSession.post(
        _space(scripted_client), tenant="acme", topic="billing", chat_id="c1"
    )
    assert (s.version, s.rev, s.lifecycle_strategies, s.participants) == (
        1,
        1,
        [],
        ["000000000000000000000000"],
    )
    await s.patch(title="local")
    assert (s.version, s.topic) == (1, "billing")


async def test_invalid_stored_values_are_kept_raw_with_a_warning(
    scripted: ScriptedServer,
    scripted_client: DRMemoryServiceClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    scripted.script(
        Reply.json(200, {"id": "r", "description": "//rich/", "metadata": {"color": "green"}})
    )
    with caplog.at_level(logging.WARNING, logger="django_pydantic_agent.memory_service"):
        r = await Rich.get(_space(scripted_client), id="r")
    assert cast(object, r.color) == "green"
    assert "Rich.color holds 'green'" in caplog.text


async def test_pagination_stops_at_total(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    full = [{**SESSION, "id": f"s-{i}"} for i in range(100)]
    scripted.script(Reply.json(200, {"items": full, "total": 100}))
    listed = await ChatSession.list(_space(scripted_client))
    assert len(listed) == 100
    assert len(scripted.requests) == 1
    scripted.script(Reply.json(200, {"items": full}), Reply.json(200, {"items": []}))
    scripted.requests.clear()
    assert len(await ChatSession.list(_space(scripted_client))) == 100
    assert len(scripted.requests) == 2


async def test_non_object_metadata_reads_as_defaults(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    scripted.script(Reply.json(200, {**SESSION, "metadata": None}))
    s = await ChatSession.get(_space(scripted_client), id="s-1")
    assert s.title == ""


async def test_dedup_lookup_keeps_only_an_exact_match(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    fuzzy = [{**SESSION, "id": "s-0", "deduplicationKey": "C1"}, {**SESSION, "id": "s-1"}]
    scripted.script(Reply.json(200, {"items": fuzzy, "total": 2}))
    found = await ChatSession.get(_space(scripted_client), chat_id="c1")
    assert found.id == "s-1"


async def test_patch_omits_metadata_that_is_none(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    scripted.script(
        Reply.json(200, {"id": "r", "description": "//rich/", "metadata": {}}),
        Reply.json(200, {"id": "r", "version": 2, "metadata": {"note": "n"}}),
    )
    r = await Rich.get(_space(scripted_client), id="r")
    await r.patch(note="n")
    assert scripted.requests[1].json() == {"metadata": {"color": "red", "parts": [], "note": "n"}}
    assert scripted.requests[1].headers["if-match"] == "1"
    assert (r.note, r.version) == ("n", 2)


# Events answered off-contract ------------------------------------------------------------------


async def _session(scripted: ScriptedServer, client: DRMemoryServiceClient) -> ChatSession:
    scripted.script(Reply.json(200, SESSION))
    session = await ChatSession.get(_space(client), id="s-1")
    scripted.requests.clear()
    return session


async def test_sparse_event_answers_keep_local_state(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient
) -> None:
    session = await _session(scripted, scripted_client)
    scripted.script(Reply.json(201, {"sequenceId": 4}), Reply.json(200, {}))
    m = await ChatMessage.post(session, content="hi", emitter_type="agent", score=0.5)
    assert (m.sequence_id, m.created_at, m.emitter_type, m.emitter_id) == (4, "", "agent", None)
    await m.patch(score=0.9)
    assert "createdAt" not in scripted.requests[1].target  # no token known: unconditional
    # The answer echoed no body, so the instance holds the model defaults, not the sent values.
    assert scripted.requests[1].json() == {"body": {"content": "", "score": 0.9}}
    assert m.score == 0.0


async def test_batch_patch_answer_missing_an_event_logs_a_warning(
    scripted: ScriptedServer,
    scripted_client: DRMemoryServiceClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = await _session(scripted, scripted_client)
    events = [
        {"sequenceId": 1, "createdAt": "t1", "body": {"content": "a"}, "emitterType": "agent"},
        {"sequenceId": 2, "body": {"content": "b"}, "emitterType": "agent"},
    ]
    scripted.script(
        Reply.json(200, {"items": events}),
        Reply.json(200, {"items": [{**events[0], "createdAt": "t1b", "body": {"content": "A"}}]}),
    )
    first, second = await ChatMessage.list(session)
    updated = await ChatMessage.patch_batch(
        session, [(first, {"content": "A"}), (second, {"content": "B"})]
    )
    sent = scripted.requests[1].json()["events"]
    assert sent[0]["createdAt"] == "t1"
    assert "createdAt" not in sent[1]  # the second event never had a token
    assert updated == [first, second]
    assert (first.content, first.created_at) == ("A", "t1b")
    assert second.content == "b"
    assert "no item for event 2" in caplog.text


@pytest.mark.parametrize("body", [b"<html>proxy login</html>", b"[1, 2]"])
async def test_a_success_that_is_not_a_json_object_is_a_service_error(
    scripted: ScriptedServer, scripted_client: DRMemoryServiceClient, body: bytes
) -> None:
    scripted.script(Reply(status=200, headers=[("Content-Type", "text/html")], body=body))
    with pytest.raises(DRMemoryServiceError, match="not a JSON object") as caught:
        await DRMemorySpace.list(scripted_client)
    assert caught.value.status_code == 200
