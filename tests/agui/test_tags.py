"""Pins and tags: ``PATCH threads/<id>/ {"pinned", "tags"}``, ``GET threads/?tag=``, pinned
threads first in every order, export and import; owner-scoped, checked, capped, and refused
on a store that keeps neither."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.agui.threads import CANNOT_TAG
from tests.agui.conftest import logged_in, run_body, sse_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


async def turn(
    http: httpx.AsyncClient, thread_id: str, text: str, prefix: str = "/history/"
) -> None:
    payload = run_body(thread_id=thread_id, run_id=f"run-{thread_id}")
    payload["messages"] = [{"id": f"u-{thread_id}", "role": "user", "content": text}]
    response = await http.post(prefix, json=payload)
    assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
    await RunCoordinator.wait_for_all_runs()


async def listed(http: httpx.AsyncClient, query: str = "", prefix: str = "/history/") -> Any:
    response = await http.get(f"{prefix}threads/{query}")
    assert response.status_code == 200, response.text
    return response.json()


def ids(page: Any) -> list[str]:
    return [row["threadId"] for row in page["threads"]]


async def test_pins_lead_every_order_and_tags_filter_and_search(alice: Any) -> None:
    async with await logged_in(alice) as http:
        for name, text in (("old", "trip to Rome"), ("mid", "tax forms"), ("new", "trip to Oslo")):
            await turn(http, name, text)
        tagged = await http.patch(
            "/history/threads/old/", json={"pinned": True, "tags": [" Travel ", "travel", "EU"]}
        )
        await http.patch("/history/threads/new/", json={"tags": ["travel"]})
        everything = await listed(http)
        by_tag = await listed(http, "?tag=TRAVEL")
        searched = await listed(http, "?q=trip")
        in_tag = await listed(http, "?q=trip&tag=eu")
        first = await listed(http, "?limit=1")
        second = await listed(http, f"?limit=1&cursor={first['nextCursor']}")
        wrong_filter = await http.get(
            f"/history/threads/?limit=1&tag=eu&cursor={first['nextCursor']}"
        )
    assert tagged.status_code == 200, tagged.text
    assert tagged.json() == {"threadId": "old", "pinned": True, "tags": ["travel", "eu"]}
    assert ids(everything) == ["old", "new", "mid"]  # pinned first, then newest first
    [row] = [r for r in everything["threads"] if r["threadId"] == "old"]
    assert (row["pinned"], row["tags"]) == (True, ["travel", "eu"])
    assert ids(by_tag) == ["old", "new"]
    assert ids(searched) == ["old", "new"]
    assert ids(in_tag) == ["old"]
    # The pinned thread leads the first page on top of its limit; the pages go on without it.
    assert ids(first) == ["old", "new"]
    assert ids(second) == ["mid"]
    assert wrong_filter.status_code == 400


async def test_tags_are_checked_and_nothing_changes_on_a_bad_body(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "t", "hello")
        refused = [
            await http.patch("/history/threads/t/", json=body)
            for body in (
                {"tags": "work"},
                {"tags": ["ok", 5]},
                {"tags": [f"tag{i}" for i in range(21)]},
                {"tags": ["x" * 51]},
                {"tags": ["   "]},
                {"pinned": "yes"},
                {"title": "Fine", "tags": ["a\u0007b"]},
            )
        ]
        [row] = (await listed(http))["threads"]
    assert [r.status_code for r in refused] == [400] * 7
    assert "list of strings" in refused[0].json()["error"]
    assert "at most 20" in refused[2].json()["error"]
    assert "the limit is 50" in refused[3].json()["error"]
    assert refused[5].json() == {"error": '"pinned" must be true or false.'}
    assert (row["title"], row["pinned"], row["tags"]) != ("Fine", True, [])
    assert row["tags"] == []


async def test_another_owner_cannot_pin_tag_or_find_by_tag(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "secret", "plans")
        await http.patch("/history/threads/secret/", json={"tags": ["private"]})
    async with await logged_in(bob) as http:
        forged = await http.patch("/history/threads/secret/", json={"pinned": True, "tags": []})
        found = await listed(http, "?tag=private")
    async with await logged_in(alice) as http:
        [row] = (await listed(http))["threads"]
    assert forged.status_code == 404
    assert found["threads"] == []
    assert (row["pinned"], row["tags"]) == (False, ["private"])


async def test_the_pin_cap_is_a_409(alice: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from django_pydantic_agent.contrib.store import tags

    monkeypatch.setattr(tags, "MAX_PINNED_THREADS", 1)
    async with await logged_in(alice) as http:
        await turn(http, "a", "one")
        await turn(http, "b", "two")
        first = await http.patch("/history/threads/a/", json={"pinned": True})
        again = await http.patch("/history/threads/a/", json={"pinned": True})
        second = await http.patch("/history/threads/b/", json={"pinned": True, "tags": ["x"]})
        rows = {row["threadId"]: row for row in (await listed(http))["threads"]}
    assert (first.status_code, again.status_code) == (200, 200)
    assert second.status_code == 409
    assert "unpin one first" in second.json()["error"]
    assert (rows["b"]["pinned"], rows["b"]["tags"]) == (False, [])  # nothing of it was kept


async def test_pins_and_tags_travel_with_export_and_import(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "t", "hello")
        await http.patch("/history/threads/t/", json={"pinned": True, "tags": ["work"]})
        document = (await http.get("/history/threads/t/export/")).json()
        await http.patch("/history/threads/t/", json={"pinned": False})
        imported = await http.post("/history/threads/import/", json=document)
        rows = {row["threadId"]: row for row in (await listed(http))["threads"]}
        bad = await http.post("/history/threads/import/", json={**document, "tags": [1]})
    assert (document["pinned"], document["tags"]) == (True, ["work"])
    copy = rows[imported.json()["threadId"]]
    assert (copy["pinned"], copy["tags"]) == (True, ["work"])
    assert bad.status_code == 400


@pytest.mark.parametrize("prefix", ["/history-session/", "/history-model/"])
async def test_a_store_without_tags_refuses_them(alice: Any, prefix: str) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "t", "hello", prefix)
        refused = await http.patch(f"{prefix}threads/t/", json={"pinned": True})
        by_tag = await listed(http, "?tag=work", prefix)
        [row] = (await listed(http, "", prefix))["threads"]
    assert refused.status_code == 400
    assert refused.json() == {"error": CANNOT_TAG}
    assert by_tag["threads"] == []
    assert (row["pinned"], row["tags"]) == (False, [])


async def test_the_scoped_default_store_keeps_pins_in_its_scope(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await turn(http, "t", "hello", "/history-scoped/")
        await turn(http, "u", "other", "/history-scoped/")
        pinned = await http.patch(
            "/history-scoped/threads/t/", json={"pinned": True, "tags": ["a"]}
        )
        scoped = await listed(http, "", "/history-scoped/")
        by_tag = await listed(http, "?tag=a", "/history-scoped/")
    assert pinned.status_code == 200
    assert ids(scoped) == ["t", "u"]
    assert scoped["threads"][0]["tags"] == ["a"]
    assert ids(by_tag) == ["t"]
