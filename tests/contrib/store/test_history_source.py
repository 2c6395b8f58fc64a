"""``StoredHistorySource``: the model searches its own stored history, never another user's."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from django_pydantic_agent.contrib.store.history_source import StoredHistorySource
from django_pydantic_agent.persistence.conversation import conversation_id_for, run_scope
from tests.agui.conftest import logged_in, sse_events
from tests.contrib.store.urls_search import FOUND, SENT

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.contrib.store.urls_search"),
]


async def _say(user: Any, mount: str, thread: str, text: str, **extra: Any) -> list[dict[str, Any]]:
    run = f"run-{uuid.uuid4().hex[:8]}"
    body = {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": [{"id": f"u-{run}", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": extra,
    }
    async with await logged_in(user) as http:
        response = await http.post(f"/{mount}/", json=body)
    assert response.status_code == 200
    events = sse_events(response.text)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]
    return events


async def _search(user: Any, mount: str, thread: str, query: str, **extra: Any) -> str:
    before = len(FOUND)
    await _say(user, mount, thread, f"search: {query}", **extra)
    assert len(FOUND) == before + 1
    return FOUND[-1]


async def test_a_thread_search_finds_its_own_words_and_never_another_users(
    alice: Any, bob: Any
) -> None:
    await _say(bob, "search", "shared", "My secret fruit is bananas.")
    await _say(alice, "search", "shared", "My favourite fruit is apples.")
    await _say(alice, "search", "other", "Kiwis grow on vines.")

    assert "apples" in await _search(alice, "search", "shared", "apples")
    # Alice's search finds her own question, never Bob's sentence in his thread of that name.
    assert "secret fruit" not in await _search(alice, "search", "shared", "bananas")
    # Another thread of the same user is outside a conversation-scoped search.
    assert "grow on" not in await _search(alice, "search", "shared", "kiwis vines")
    # The conversation id is the server's: one the client forwards changes nothing.
    forged = conversation_id_for(str(bob.pk), "shared")
    found = await _search(
        alice, "search", "shared", "bananas", conversation_id=forged, conversationId=forged
    )
    assert "secret fruit" not in found
    assert "secret fruit" in await _search(bob, "search", "shared", "bananas")


async def test_an_owner_search_reaches_every_thread_of_its_owner_only(alice: Any, bob: Any) -> None:
    await _say(bob, "owner-search", "b1", "Bob keeps mangoes in the cellar.")
    await _say(alice, "owner-search", "a1", "Kiwis grow on vines.")
    found = await _search(alice, "owner-search", "a2", "kiwis")
    assert "Kiwis grow on vines" in found
    assert "Bob keeps" not in await _search(alice, "owner-search", "a2", "mangoes cellar")
    assert "Bob keeps" in await _search(bob, "owner-search", "b2", "mangoes cellar")


async def test_outside_a_run_the_source_lists_nothing(alice: Any) -> None:
    await _say(alice, "search", "t", "Pears are ripe.")
    source = StoredHistorySource()
    assert await source.list_runs() == []
    assert await source.run_history(run_id="1:") == []
    with run_scope(str(alice.pk), "t"):
        runs = await source.list_runs()
        assert [r.conversation_id for r in runs] == [conversation_id_for(str(alice.pk), "t")]
        history = await source.run_history(run_id=runs[0].run_id)
        assert "Pears are ripe." in repr(history)
        assert await source.run_history(run_id="not-a-run") == []
    # A run id of another owner's thread, named while serving alice, reads nothing.
    with run_scope("someone-else", "t"):
        assert await source.run_history(run_id=runs[0].run_id) == []


def test_a_source_scope_is_conversation_or_owner() -> None:
    with pytest.raises(ValueError, match=r"scope='everyone'"):
        StoredHistorySource(scope="everyone")  # type: ignore[arg-type]


async def test_the_thread_json_says_where_the_models_view_begins(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await _say(alice, "window", "w", "Turn 0")
        first = (await http.get("/window/threads/w/")).json()
        assert first["modelView"] == {"startsAt": None, "messages": 2, "summary": None}
        for n in range(1, 4):
            await _say(alice, "window", "w", f"Turn {n}")
        thread = (await http.get("/window/threads/w/")).json()
    # Every message is shown; the model's view begins at the third turn's question.
    assert len(thread["messages"]) == 8
    third = thread["messages"][4]
    assert third["content"] == "Turn 2"
    assert thread["modelView"] == {"startsAt": third["id"], "messages": 4, "summary": None}
    # And that is what the model was sent (the window, then the new question).
    SENT.clear()
    await _say(alice, "window", "w", "Turn 4")
    assert SENT == [5]


async def test_a_harness_compaction_capability_trims_what_a_served_agent_sends(
    alice: Any,
) -> None:
    for n in range(5):
        SENT.clear()
        await _say(alice, "compact", "c", f"Turn {n}")
    # The window holds 9 messages; SlidingWindowCompaction cut the request to fit its limit.
    assert SENT
    assert SENT[-1] <= 4
    async with await logged_in(alice) as http:
        thread = (await http.get("/compact/threads/c/")).json()
    assert len(thread["messages"]) == 10  # the user still sees every message
