"""GET threads/ with search, archive, date bounds and cursors; PATCH threads/<id>/ archived."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.test import RequestFactory

from django_pydantic_agent.agui.thread_query import BAD_CURSOR
from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage
from django_pydantic_agent.contrib.store.search import repair_sqlite_index
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import Conversation
from tests.agui.conftest import logged_in, run_body, sse_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


def _request(user: Any) -> Any:
    request = RequestFactory().get("/")
    request.user = user
    return request


async def save(user: Any, thread_id: str, *texts: str) -> None:
    """Save a thread whose first message (the title) and answers are ``texts``."""
    messages = [
        {"id": f"{thread_id}-{i}", "role": "user" if i == 0 else "assistant", "content": text}
        for i, text in enumerate(texts)
    ]
    store = DefaultConversationStore()
    await store.save(Conversation(thread_id=thread_id, messages=messages), request=_request(user))
    await asyncio.sleep(0.002)  # distinct timestamps on coarse clocks


async def listed(http: httpx.AsyncClient, **params: str) -> dict[str, Any]:
    response = await http.get("/stored/threads/", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def ids(body: dict[str, Any]) -> list[str]:
    return [row["threadId"] for row in body["threads"]]


async def test_search_ranks_titles_then_texts_with_snippets_and_no_strangers(
    alice: Any, bob: Any
) -> None:
    await save(alice, "by-text", "Groceries", "Buy a pineapple and two lemons for the cake")
    await save(alice, "by-title", "Pineapple recipes", "Nothing here")
    await save(alice, "unrelated", "Taxes", "Forms to file")
    await save(bob, "bobs", "Pineapple secrets of bob", "bob's pineapple private words")
    async with await logged_in(alice) as http:
        body = await listed(http, q="pineap")
    assert ids(body) == ["by-title", "by-text"]
    title_hit, text_hit = body["threads"]
    assert title_hit["snippet"] == "Pineapple recipes"
    assert "Buy a pineapple and two lemons" in text_hit["snippet"]
    assert "bob" not in str(body)
    assert body["nextCursor"] is None
    async with await logged_in(alice) as http:
        assert ids(await listed(http, q="pineapple lemons")) == ["by-text"]
        assert ids(await listed(http, q="private")) == []
        plain = await listed(http)
    assert "snippet" not in plain["threads"][0]


async def test_cursors_page_through_and_refuse_tampering(alice: Any) -> None:
    for index in range(5):
        await save(alice, f"t{index}", f"Topic {index}")
    seen: list[str] = []
    async with await logged_in(alice) as http:
        body = await listed(http, limit="2")
        first_cursor = body["nextCursor"]
        while True:
            seen.extend(ids(body))
            if body["nextCursor"] is None:
                break
            body = await listed(http, limit="2", cursor=body["nextCursor"])
        assert seen == ["t4", "t3", "t2", "t1", "t0"]
        altered = first_cursor[:-2] + ("AA" if not first_cursor.endswith("AA") else "BB")
        for params in (
            {"cursor": altered},
            {"cursor": "not-a-cursor"},
            {"cursor": first_cursor, "q": "topic"},  # made for other filters
            {"cursor": first_cursor, "archived": "1"},
        ):
            response = await http.get("/stored/threads/", params=params)
            assert response.status_code == 400
            assert response.json() == {"error": BAD_CURSOR}


async def test_a_bob_cursor_shows_alice_nothing_of_bob(alice: Any, bob: Any) -> None:
    for index in range(3):
        await save(bob, f"b{index}", f"Bob topic {index}")
    await save(alice, "a0", "Alice topic")
    async with await logged_in(bob) as http:
        cursor = (await listed(http, limit="1"))["nextCursor"]
    async with await logged_in(alice) as http:
        body = await listed(http, limit="1", cursor=cursor)
    assert all(not thread_id.startswith("b") for thread_id in ids(body))


async def test_archive_hides_a_thread_until_asked_for(alice: Any, bob: Any) -> None:
    await save(alice, "kept", "Kept one")
    await save(alice, "shelved", "Shelved one")
    async with await logged_in(bob) as http:
        theirs = await http.patch("/stored/threads/shelved/", json={"archived": True})
        missing = await http.patch("/stored/threads/never/", json={"archived": True})
    assert theirs.status_code == missing.status_code == 404
    assert theirs.content == missing.content
    async with await logged_in(alice) as http:
        done = await http.patch("/stored/threads/shelved/", json={"archived": True})
        assert done.json() == {"threadId": "shelved", "archived": True}
        assert ids(await listed(http)) == ["kept"]
        archived = await listed(http, archived="1")
        assert ids(archived) == ["shelved"]
        assert archived["threads"][0]["archived"] is True
        assert ids(await listed(http, archived="all")) == ["shelved", "kept"]
        both = await http.patch(
            "/stored/threads/shelved/", json={"archived": False, "title": "Back"}
        )
        assert both.json() == {"threadId": "shelved", "title": "Back", "archived": False}
        assert ids(await listed(http)) == ["shelved", "kept"]
        for bad, word in (
            ({"archived": "yes"}, '"archived" must be true or false'),
            ({"archived": True, "title": ""}, '"title"'),
            ({"other": 1}, '"archived"'),
        ):
            refused = await http.patch("/stored/threads/kept/", json=bad)
            assert refused.status_code == 400
            assert word in refused.json()["error"]
        # A refused body changed nothing.
        assert ids(await listed(http, archived="1")) == []


async def test_updated_bounds_and_bad_parameters(alice: Any) -> None:
    await save(alice, "old", "Old one")
    await asyncio.sleep(0.01)
    await save(alice, "new", "New one")
    stamps = {
        thread_id: updated_at
        async for thread_id, updated_at in StoredConversation.objects.values_list(
            "thread_id", "updated_at"
        )
    }
    async with await logged_in(alice) as http:
        after = await listed(http, updated_after=stamps["old"].isoformat())
        assert ids(after) == ["new"]
        before = await listed(http, updated_before=stamps["new"].isoformat())
        assert ids(before) == ["old"]
        for params, word in (
            ({"updated_after": "yesterday"}, "updated_after must be an ISO 8601"),
            ({"updated_before": "2026-13-45T00:00:00"}, "updated_before must be an ISO 8601"),
            (
                {"updated_after": "2026-12-02T00:00:00Z", "updated_before": "2026-12-01T00:00Z"},
                "earlier than",
            ),
            ({"archived": "maybe"}, "archived must be 0"),
            ({"q": "x" * 201}, "the limit is 200"),
            ({"q": "a\x01b"}, "control characters"),
        ):
            response = await http.get("/stored/threads/", params=params)
            assert response.status_code == 400, params
            assert word in response.json()["error"]


async def test_a_runs_answer_is_searchable_once_complete_and_gone_once_deleted(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await http.post("/stored/", json=run_body(thread_id="ran", text="Add numbers"))
        assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
        found = await listed(http, q="sum")
        assert ids(found) == ["ran"]
        assert "The sum is 5." in found["threads"][0]["snippet"]
        await http.delete("/stored/threads/ran/")
        assert ids(await listed(http, q="sum")) == []


async def test_an_active_message_is_not_indexed_until_it_completes(alice: Any) -> None:
    await save(alice, "live", "Live thread", "half an answer")
    await StoredMessage.objects.filter(content="half an answer").aupdate(status="active")
    async with await logged_in(alice) as http:
        assert ids(await listed(http, q="answer")) == []
        await StoredMessage.objects.filter(content="half an answer").aupdate(
            content="half an answer, now whole", status="complete"
        )
        assert ids(await listed(http, q="whole")) == ["live"]
        assert ids(await listed(http, q="half")) == ["live"]


async def test_sqlite_triggers_dropped_by_a_table_rebuild_are_restored(alice: Any) -> None:
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("The FTS5 index's triggers: other databases keep none.")
    await save(alice, "kept", "Kept", "a quokka smiles")

    def drop_and_repair() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER dpa_store_message_fts_ai")
        return repair_sqlite_index("default")

    assert await sync_to_async(drop_and_repair)() is True
    await save(alice, "later", "Later", "another quokka")
    async with await logged_in(alice) as http:
        assert sorted(ids(await listed(http, q="quokka"))) == ["kept", "later"]
    assert await sync_to_async(repair_sqlite_index)("default") is False
