"""Branches under concurrency: edit and regenerate racing on one thread, a fork taken while a
run streams, and a thread deleted while it is forked. On the test database (SQLite by
default, PostgreSQL with ``DATABASE_URL``), over Django's ASGI app.

Each test states the invariants a user would notice: no 5xx, no lost or duplicated message,
the active branch one path (positions unique and in order), a fork whole or absent.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage
from tests.agui.agents import GATE
from tests.agui.conftest import logged_in, run_body, sse_events
from tests.agui.test_branches import body, thread, two_turns, user, wire
from tests.reliability.test_owners import _client, stack  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.reliability,
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.agui.urls"),
]

ROUNDS = 8


def _active_positions(thread_id: str) -> list[int]:
    return list(
        StoredMessage.objects.filter(conversation__thread_id=thread_id, active=True)
        .order_by("position")
        .values_list("position", flat=True)
    )


async def test_edit_and_regenerate_racing_on_one_thread_keep_one_active_path(
    alice: Any,
) -> None:
    outcomes: list[str] = []
    async with await logged_in(alice) as http:
        messages = await two_turns(http)
        for n in range(ROUNDS):
            current = (await thread(http))["messages"]
            cut = wire(current[:3])
            edit = [*cut[:2], user("u2", f"edited {n}")]
            answers = await asyncio.gather(
                http.post("/history/", json=body(cut, f"regen-{n}")),
                http.post("/history/", json=body(edit, f"edit-{n}")),
            )
            await RunCoordinator.wait_for_all_runs()
            for answer in answers:
                assert answer.status_code in (200, 409), answer.text
                if answer.status_code == 200:
                    last = sse_events(answer.text)[-1]
                    assert last["type"] in ("RUN_FINISHED", "RUN_ERROR"), last
                    outcomes.append(last["type"])
                else:
                    outcomes.append("409")
            state = await thread(http)
            positions = await sync_to_async(_active_positions)("thread-1")
            # One active path: u1, a1, u2 (edited or not), one answer to it.
            assert positions == list(range(4)), positions
            assert [m["id"] for m in state["messages"]][:3] == [
                "u1",
                messages[1]["id"],
                "u2",
            ]
            assert len(state["messages"]) == 4
            # Every answer ever given to u2 is one of its siblings or its edits' (kept).
            assert state["branches"]
    assert "RUN_FINISHED" in outcomes
    print(f"FIGURE edit/regenerate races: {ROUNDS} rounds of two runs: {sorted(outcomes)}")


@pytest.mark.parametrize("prefix", ["/history-session/", "/history-model/"])
async def test_edit_and_regenerate_racing_on_a_load_save_store_lose_no_branch(
    alice: Any, prefix: str
) -> None:
    """The session store and a ModelConversationStore keep branches inside their messages:
    two runs racing on one thread (one is refused while the other streams) leave one active
    path, and the answer of every finished run is still on some branch (the export). A
    regenerate that runs after the edit of its round posts the old text: it edits too."""
    async with await logged_in(alice) as http:
        await _race_keep_every_answer(http, prefix)


async def test_edit_and_regenerate_racing_on_the_memory_service_lose_no_branch(
    stack: Any,  # noqa: F811 - the fixture imported above
    alice: Any,
) -> None:
    """The same race on the Memory Service, over HTTP to the emulator: its branches are
    marker events, and a regenerate and an edit of one round append theirs concurrently."""
    served, _ = stack
    async with await _client(served, alice) as http:
        await _race_keep_every_answer(http, "/memory/")


async def _race_keep_every_answer(http: httpx.AsyncClient, prefix: str) -> None:
    """``ROUNDS`` rounds of a regenerate and an edit posted at once on ``prefix``; then a
    switch to the oldest answer. Every finished run's answer is kept exactly once."""
    finished = {"run-1", "run-2"}
    outcomes: list[str] = []
    messages = await two_turns(http, prefix)
    for n in range(ROUNDS):
        current = (await thread(http, prefix))["messages"]
        cut = wire(current[:3])
        edit = [*cut[:2], user("u2", f"edited {n}")]
        answers = await asyncio.gather(
            http.post(prefix, json=body(cut, f"regen-{n}")),
            http.post(prefix, json=body(edit, f"edit-{n}")),
        )
        await RunCoordinator.wait_for_all_runs()
        for run_id, answer in zip((f"regen-{n}", f"edit-{n}"), answers, strict=True):
            assert answer.status_code in (200, 409), answer.text
            last = sse_events(answer.text)[-1] if answer.status_code == 200 else {}
            outcome = last.get("type", "409")
            assert outcome in ("RUN_FINISHED", "RUN_ERROR", "409"), last
            outcomes.append(outcome)
            if outcome == "RUN_FINISHED":
                finished.add(run_id)
        state = await thread(http, prefix)
        assert [m["id"] for m in state["messages"]][:3] == ["u1", messages[1]["id"], "u2"]
        assert len(state["messages"]) == 4
        assert state["branches"]
    exported = (await http.get(f"{prefix}threads/thread-1/export/")).json()
    # Switching to the oldest answer and back loses nothing either.
    points = (await thread(http, prefix))["branches"]
    switched = await http.patch(
        f"{prefix}threads/thread-1/", json={"activeMessageId": messages[3]["id"]}
    )
    after = (await http.get(f"{prefix}threads/thread-1/export/")).json()
    assert "RUN_FINISHED" in outcomes
    assert points
    assert switched.status_code == 200, switched.text
    for document in (exported, after):
        answers = [
            m["runId"]
            for entry in document["messages"]
            for m in entry["wire"]
            if m["role"] == "assistant"
        ]
        assert sorted(answers) == sorted(finished)  # each kept once, none lost
    print(f"FIGURE {prefix} edit/regenerate races: {ROUNDS} rounds: {sorted(outcomes)}")


async def test_a_fork_taken_while_a_run_streams_copies_it_as_interrupted(alice: Any) -> None:
    async with await logged_in(alice) as http:
        GATE.reset()
        first = await http.post("/gated/", json=run_body(run_id="g-1"))
        assert first.status_code == 200
        GATE.reset()
        messages = (await thread(http, "/gated/"))["messages"]
        posted = [*wire(messages), user("u2", "more")]
        running = asyncio.create_task(http.post("/gated/", json=body(posted, "g-2")))
        try:
            await asyncio.wait_for(GATE.reached.wait(), timeout=10)
            for _ in range(100):  # the first words are stored (a flush) before the fork
                live = (await thread(http, "/gated/"))["messages"]
                if live[-1]["role"] == "assistant" and live[-1].get("content"):
                    break
                await asyncio.sleep(0.05)
            streaming = live[-1]
            forked = await http.post(
                "/gated/threads/thread-1/fork/", json={"messageId": streaming["id"]}
            )
            at_user = await http.post("/gated/threads/thread-1/fork/", json={"messageId": "u2"})
        finally:
            GATE.released.set()
            done = await running
            await RunCoordinator.wait_for_all_runs()
        assert forked.status_code == 201, forked.text
        assert at_user.status_code == 201, at_user.text
        copy = (await thread(http, "/gated/", forked.json()["threadId"]))["messages"]
        upto_user = (await thread(http, "/gated/", at_user.json()["threadId"]))["messages"]
        source = (await thread(http, "/gated/"))["messages"]
    assert sse_events(done.text)[-1]["type"] == "RUN_FINISHED"
    assert copy[-1]["id"] == streaming["id"]
    assert copy[-1]["status"] == "interrupted"
    assert copy[-1]["content"] == "Working "
    assert [m["id"] for m in upto_user] == [m["id"] for m in messages] + ["u2"]
    assert source[-1]["status"] == "complete"
    assert source[-1]["content"] == "Working done."


async def test_a_thread_deleted_while_it_is_forked_leaves_a_whole_fork_or_none(
    alice: Any,
) -> None:
    outcomes: list[int] = []
    async with await logged_in(alice) as http:
        for n in range(ROUNDS):
            tid = f"doomed-{n}"
            await http.post("/history/", json=run_body(thread_id=tid, run_id=f"d-{n}"))
            await RunCoordinator.wait_for_all_runs()
            source = (await thread(http, tid=tid))["messages"]

            async def delete_after(pause: float, tid: str = tid) -> httpx.Response:
                await asyncio.sleep(pause)  # from "at once" to "once the fork is under way"
                return await http.delete(f"/history/threads/{tid}/")

            fork, gone = await asyncio.gather(
                http.post(f"/history/threads/{tid}/fork/", json={"messageId": source[-1]["id"]}),
                delete_after(0.004 * n),
            )
            assert gone.status_code == 204
            assert fork.status_code in (201, 404), fork.text
            outcomes.append(fork.status_code)
            if fork.status_code == 201:
                copy = (await thread(http, tid=fork.json()["threadId"]))["messages"]
                assert wire(copy) == wire(source)
            assert (await http.get(f"/history/threads/{tid}/")).status_code == 404
    rows = await sync_to_async(
        lambda: sorted(StoredConversation.objects.values_list("thread_id", flat=True))
    )()
    assert not [r for r in rows if r.startswith("doomed-")]
    assert len(rows) == outcomes.count(201)
    print(f"FIGURE delete during fork: {ROUNDS} rounds, fork answers {sorted(outcomes)}")


@pytest.fixture
async def alice() -> Any:
    from django.contrib.auth import get_user_model

    return await get_user_model().objects.acreate_user("alice", password="pw-alice")
