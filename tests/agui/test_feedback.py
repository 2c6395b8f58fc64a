"""``PUT threads/<id>/messages/<message_id>/feedback/``: set, shown, cleared, exported,
imported; owner-scoped, CSRF-checked, refused with a sentence; not mounted where the store
keeps no feedback."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from django_pydantic_agent.agui.branches import MESSAGE_NOT_FOUND
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.persistence.feedback import FEEDBACK_COMMENT_MAX_CHARS
from tests.agui.conftest import CSRF_SECRET, logged_in, run_body, sse_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


async def one_turn(http: httpx.AsyncClient, prefix: str = "/history/") -> list[dict[str, Any]]:
    payload = run_body(thread_id="thread-1", run_id="run-1")
    payload["messages"] = [{"id": "u1", "role": "user", "content": "Plan a trip"}]
    response = await http.post(prefix, json=payload)
    assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
    await RunCoordinator.wait_for_all_runs()
    return list((await http.get(f"{prefix}threads/thread-1/")).json()["messages"])


def feedback_url(message_id: str, prefix: str = "/history/", thread: str = "thread-1") -> str:
    return f"{prefix}threads/{thread}/messages/{message_id}/feedback/"


async def test_feedback_is_set_shown_cleared_and_carried_by_export_and_import(alice: Any) -> None:
    async with await logged_in(alice) as http:
        messages = await one_turn(http)
        answer = messages[-1]["id"]
        put = await http.put(feedback_url(answer), json={"rating": "down", "comment": " Late "})
        shown = (await http.get("/history/threads/thread-1/")).json()["messages"]
        exported = (await http.get("/history/threads/thread-1/export/")).json()
        imported = await http.post("/history/threads/import/", json=exported)
        copy = await http.get(f"/history/threads/{imported.json()['threadId']}/")
        cleared = await http.put(feedback_url(answer), json={"rating": None})
        after = (await http.get("/history/threads/thread-1/")).json()["messages"]
    assert put.status_code == 200, put.text
    assert put.json() == {
        "threadId": "thread-1",
        "messageId": answer,
        "feedback": {"rating": "down", "comment": "Late"},
    }
    assert [m.get("feedback") for m in shown] == [None, {"rating": "down", "comment": "Late"}]
    assert exported["feedback"] == {answer: {"rating": "down", "comment": "Late"}}
    assert imported.status_code == 201, imported.text
    assert copy.json()["messages"][-1]["feedback"] == {"rating": "down", "comment": "Late"}
    assert cleared.json()["feedback"] is None
    assert all("feedback" not in m for m in after)


async def test_another_owner_can_neither_rate_nor_see_feedback(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http:
        messages = await one_turn(http)
        answer = messages[-1]["id"]
        await http.put(feedback_url(answer), json={"rating": "up", "comment": "mine"})
    async with await logged_in(bob) as http:
        forged = await http.put(feedback_url(answer), json={"rating": "down", "comment": "x"})
        await one_turn(http)  # bob's own thread-1, with its own ids
        theirs = await http.put(feedback_url(answer), json={"rating": "down"})
        own = (await http.get("/history/threads/thread-1/")).json()["messages"]
    async with await logged_in(alice) as http:
        kept = (await http.get("/history/threads/thread-1/")).json()["messages"]
    assert forged.status_code == 404
    assert forged.json() == {"error": "No such thread."}
    assert theirs.status_code == 404
    assert theirs.json() == {"error": MESSAGE_NOT_FOUND}
    assert all("feedback" not in m for m in own)
    assert kept[-1]["feedback"] == {"rating": "up", "comment": "mine"}


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"rating": "meh"}, "\"rating\" is 'meh'"),
        ({"comment": "no rating"}, 'with a "rating"'),
        ({"rating": "up", "stars": 5}, 'Unknown field "stars"'),
        ({"rating": "up", "comment": 5}, '"comment" must be a string'),
        ({"rating": "up", "comment": "x" * (FEEDBACK_COMMENT_MAX_CHARS + 1)}, "the limit is"),
        (["up"], "Send a JSON object"),
    ],
)
async def test_a_bad_feedback_body_is_a_400_naming_it(alice: Any, body: Any, named: str) -> None:
    async with await logged_in(alice) as http:
        messages = await one_turn(http)
        refused = await http.put(feedback_url(messages[-1]["id"]), json=body)
        after = (await http.get("/history/threads/thread-1/")).json()["messages"]
    assert refused.status_code == 400
    assert named in refused.json()["error"]
    assert all("feedback" not in m for m in after)


async def test_nan_and_nul_in_a_feedback_body_are_refused(alice: Any) -> None:
    async with await logged_in(alice) as http:
        messages = await one_turn(http)
        url = feedback_url(messages[-1]["id"])
        headers = {"Content-Type": "application/json"}
        nan = await http.put(url, content=b'{"rating": "up", "comment": NaN}', headers=headers)
        nul = await http.put(
            url, content=b'{"rating": "up", "comment": "a\\u0000"}', headers=headers
        )
        missing = await http.put(feedback_url("nope"), json={"rating": "up"})
    assert nan.status_code == 400
    assert nul.status_code == 400
    assert missing.status_code == 404
    assert missing.json() == {"error": MESSAGE_NOT_FOUND}


async def test_feedback_needs_the_csrf_token(alice: Any) -> None:
    async with await logged_in(alice) as http:
        messages = await one_turn(http, "/stored/")
        url = feedback_url(messages[-1]["id"], "/stored-csrf/")
        forged = await http.put(url, json={"rating": "down"})
        http.cookies.set("csrftoken", CSRF_SECRET)
        allowed = await http.put(url, json={"rating": "up"}, headers={"X-CSRFToken": CSRF_SECRET})
    assert forged.status_code == 403
    assert forged.json()["error"].startswith("CSRF verification failed")
    assert allowed.status_code == 200


@pytest.mark.parametrize("prefix", ["/history-session/", "/history-model/"])
async def test_a_store_without_feedback_mounts_no_feedback_route(alice: Any, prefix: str) -> None:
    async with await logged_in(alice) as http:
        messages = await one_turn(http, prefix)
        put = await http.put(feedback_url(messages[-1]["id"], prefix), json={"rating": "up"})
    assert put.status_code == 404
    assert all("feedback" not in m for m in messages)


async def test_the_scoped_default_store_keeps_feedback_in_its_scope(alice: Any) -> None:
    async with await logged_in(alice) as http:
        messages = await one_turn(http, "/history-scoped/")
        put = await http.put(
            feedback_url(messages[-1]["id"], "/history-scoped/"), json={"rating": "up"}
        )
        shown = (await http.get("/history-scoped/threads/thread-1/")).json()["messages"]
        unscoped = await http.get("/history/threads/thread-1/")
    assert put.status_code == 200
    assert shown[-1]["feedback"] == {"rating": "up", "comment": ""}
    assert unscoped.status_code == 404
