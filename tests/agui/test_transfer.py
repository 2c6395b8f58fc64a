"""Export (JSON, Markdown) and import of threads over HTTP."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from tests.agui.conftest import logged_in
from tests.agui.test_branches import body, post, thread, two_turns, user, wire

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


async def branched_export(http: httpx.AsyncClient) -> tuple[dict[str, Any], Any]:
    messages = await two_turns(http)
    await post(http, body(wire(messages[:3]), "run-3"))  # regenerate the second answer
    response = await http.get("/history/threads/thread-1/export/?format=json")
    assert response.status_code == 200, response.text
    assert response.headers["content-disposition"] == 'attachment; filename="thread.json"'
    return response.json(), await thread(http)


async def test_the_json_export_holds_every_branch_status_and_run(alice: Any) -> None:
    async with await logged_in(alice) as http:
        document, current = await branched_export(http)
    assert document["format"] == "django-pydantic-agent.thread"
    assert document["version"] == 1
    assert document["title"] == "first"
    entries = document["messages"]
    assert len(entries) == 5  # u1, a1, u2, and both answers to u2
    active = [e for e in entries if e["active"]]
    assert [w["id"] for e in active for w in e["wire"]] == [m["id"] for m in current["messages"]]
    [old] = [e for e in entries if not e["active"]]
    assert old["parent"] == entries.index(active[2])  # the old answer follows u2 too
    assert all(e["record"]["status"] == "complete" for e in entries)
    assert [run["runId"] for run in document["runs"]] == ["run-1", "run-2", "run-3"]
    assert all(run["usage"] for run in document["runs"])
    assert "owner" not in str(document).lower()


async def test_the_markdown_export_is_the_active_branch_readable(alice: Any) -> None:
    async with await logged_in(alice) as http:
        _, current = await branched_export(http)
        response = await http.get("/history/threads/thread-1/export/?format=markdown")
        bad = await http.get("/history/threads/thread-1/export/?format=pdf")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/markdown; charset=utf-8"
    text = response.text
    assert text.startswith("# first\n")
    assert "**User:**\n\nsecond" in text
    assert current["messages"][-1]["content"] in text
    assert "1 more message(s) on other branches" in text
    assert bad.status_code == 400


async def test_import_creates_a_new_thread_with_every_branch(alice: Any) -> None:
    async with await logged_in(alice) as http:
        document, current = await branched_export(http)
        response = await http.post("/history/threads/import/", json=document)
        assert response.status_code == 201, response.text
        new_id = response.json()["threadId"]
        assert new_id != "thread-1"
        imported = await thread(http, tid=new_id)
        assert wire(imported["messages"]) == wire(current["messages"])
        assert imported["branches"] == current["branches"]
        # The import is a thread like any other: switch back to the old answer, and run on.
        old = next(iter(current["branches"].values()))["siblings"][0]
        switched = await http.patch(f"/history/threads/{new_id}/", json={"activeMessageId": old})
        assert switched.status_code == 200
        events = await post(
            http,
            body(
                [*wire((await thread(http, tid=new_id))["messages"]), user("u3", "x")], "i", new_id
            ),
        )
    assert events[-1]["type"] == "RUN_FINISHED"


async def test_the_session_store_imports_a_default_export_with_every_branch(alice: Any) -> None:
    async with await logged_in(alice) as http:
        document, current = await branched_export(http)
        response = await http.post("/history-session/threads/import/", json=document)
        assert response.status_code == 201, response.text
        new_id = response.json()["threadId"]
        imported = await thread(http, "/history-session/", new_id)
        exported = await http.get(f"/history-session/threads/{new_id}/export/")
        [old] = [e["wire"][-1]["id"] for e in document["messages"] if not e["active"]]
        switch = {"activeMessageId": old}
        switched = await http.patch(f"/history-session/threads/{new_id}/", json=switch)
        other = await thread(http, "/history-session/", new_id)
    assert wire(imported["messages"]) == wire(current["messages"])
    answer = current["messages"][-1]["id"]
    assert imported["branches"] == {answer: {"siblings": [old, answer], "index": 1}}
    assert len(exported.json()["messages"]) == len(document["messages"])  # every branch
    assert switched.status_code == 200, switched.text
    kept = [m["id"] for m in current["messages"][:3]]
    assert [m["id"] for m in other["messages"]] == [*kept, old]


@pytest.mark.parametrize("prefix", ["/history/", "/history-session/"])
async def test_an_entry_without_a_parent_is_a_first_message(alice: Any, prefix: str) -> None:
    # check_document reads a missing parent as null; the Default store's import used to
    # read it as a key (a 500).
    async with await logged_in(alice) as http:
        document, current = await branched_export(http)
        del document["messages"][0]["parent"]
        response = await http.post(f"{prefix}threads/import/", json=document)
        assert response.status_code == 201, response.text
        imported = await thread(http, prefix, response.json()["threadId"])
    assert wire(imported["messages"]) == wire(current["messages"])


def _broken(document: dict[str, Any]) -> list[tuple[Any, str]]:
    def changed(edit: Any) -> Any:
        copied = copy.deepcopy(document)
        edit(copied)
        return copied

    return [
        ([], "not a JSON object"),
        ({**document, "format": "other"}, "format must be"),
        ({**document, "messages": []}, "non-empty list"),
        (changed(lambda d: d["messages"][1].update(parent=3)), "messages.1 has a parent"),
        (changed(lambda d: d["messages"][0].update(active="yes")), "messages.0 needs a boolean"),
        (
            changed(lambda d: [m.update(active=True) for m in d["messages"]]),
            "second active message",
        ),
        (changed(lambda d: d["messages"][2].update(record=5)), "messages.2 has a record"),
        (
            changed(lambda d: d["messages"][2]["record"].update(role=["x"])),
            "messages.2 record is not a message",
        ),
        (
            changed(
                lambda d: d["messages"][0]["record"].update(
                    wire_extra={"attachments": [{"id": "9b0f4c3e-0d8e-4a55-9b0c-5f0a1d2e3f40"}]}
                )
            ),
            "not an upload of yours",
        ),
    ]


async def test_import_checks_the_whole_document_first_and_writes_nothing(
    alice: Any,
) -> None:
    async with await logged_in(alice) as http:
        document, _ = await branched_export(http)
        for broken, expected in _broken(document):
            response = await http.post("/history/threads/import/", json=broken)
            assert response.status_code == 400, (expected, response.text)
            assert expected in response.json()["error"], response.json()
        not_json = await http.post(
            "/history/threads/import/", content=b"{", headers={"Content-Type": "application/json"}
        )
        threads = (await http.get("/history/threads/")).json()["threads"]
    assert not_json.status_code == 400
    assert [t["threadId"] for t in threads] == ["thread-1"]


async def test_import_reresolves_attachment_references_against_the_callers_uploads(
    alice: Any, bob: Any
) -> None:
    async with await logged_in(bob) as http:
        uploaded = await http.post(
            "/history/attachments/", files={"file": ("b.txt", b"bob's", "text/plain")}
        )
        assert uploaded.status_code == 201, uploaded.text
        bobs = uploaded.json()["id"]
    async with await logged_in(alice) as http:
        document, _ = await branched_export(http)
        mine = (
            await http.post(
                "/history/attachments/", files={"file": ("a.txt", b"alice's", "text/plain")}
            )
        ).json()
        stolen = copy.deepcopy(document)
        stolen["messages"][0]["record"]["wire_extra"] = {"attachments": [{"id": bobs}]}
        refused = await http.post("/history/threads/import/", json=stolen)
        lied = copy.deepcopy(document)
        lied["messages"][0]["record"]["wire_extra"] = {
            "attachments": [{"id": mine["id"], "name": "evil.exe", "size": 1}]
        }
        accepted = await http.post("/history/threads/import/", json=lied)
        assert accepted.status_code == 201, accepted.text
        imported = await thread(http, tid=accepted.json()["threadId"])
    assert refused.status_code == 400
    assert "not an upload of yours" in refused.json()["error"]
    assert imported["messages"][0]["attachments"] == [
        {"id": mine["id"], "name": "a.txt", "mime": "text/plain", "size": 7}
    ]


async def test_export_and_import_are_owner_scoped(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http:
        document, _ = await branched_export(http)
    async with await logged_in(bob) as http:
        stranger = await http.get("/history/threads/thread-1/export/")
        missing = await http.get("/history/threads/nothing/export/")
        imported = await http.post("/history/threads/import/", json=document)
        bobs = (await http.get("/history/threads/")).json()["threads"]
    assert stranger.status_code == missing.status_code == 404
    assert stranger.json() == missing.json()
    assert imported.status_code == 201
    assert [t["threadId"] for t in bobs] == [imported.json()["threadId"]]


async def test_import_refuses_references_it_cannot_resolve(alice: Any) -> None:
    async with await logged_in(alice) as http:
        document, _ = await branched_export(http)
        answers = {}
        for name, refs in (("not a list", "f1"), ("no id", [{"name": "x"}])):
            broken = copy.deepcopy(document)
            broken["messages"][0]["record"]["wire_extra"] = {"attachments": refs}
            answers[name] = await http.post("/history/threads/import/", json=broken)
        quoting = copy.deepcopy(document)
        quoting["messages"][0]["wire"][0]["metadata"] = {"attachments": ["f1"]}
        answers["no uploads here"] = await http.post(
            "/history-session/threads/import/", json=quoting
        )
        nested = await http.post(
            "/history/threads/import/",
            content=b"[" * 100_000 + b"]" * 100_000,
            headers={"Content-Type": "application/json"},
        )
        threads = (await http.get("/history-session/threads/")).json()["threads"]
    assert {name: a.status_code for name, a in answers.items()} == dict.fromkeys(answers, 400)
    assert "must be a list" in answers["not a list"].json()["error"]
    assert "has no string id" in answers["no id"].json()["error"]
    assert "keeps no uploads" in answers["no uploads here"].json()["error"]
    assert nested.status_code in (400, 413)
    assert threads == []


@pytest.mark.parametrize("prefix", ["/history/", "/history-session/"])
async def test_a_value_no_store_can_keep_is_a_400_naming_it_and_writes_nothing(
    alice: Any, prefix: str
) -> None:
    async with await logged_in(alice) as http:
        document, _ = await branched_export(http)
        before = (await http.get(f"{prefix}threads/")).json()["threads"]
        answers = {}
        for name, where in (
            ("title", ("title",)),
            ("content", ("messages", 1, "record", "content")),
        ):
            broken = copy.deepcopy(document)
            holder: Any = broken
            for part in where[:-1]:
                holder = holder[part]
            holder[where[-1]] = "a NUL \x00 here"
            answers[name] = await http.post(f"{prefix}threads/import/", json=broken)
        renamed = await http.patch(f"{prefix}threads/thread-1/", json={"title": "bad \x00 title"})
        after = (await http.get(f"{prefix}threads/")).json()["threads"]
    for name, where in (("title", "title"), ("content", "messages.1 record.content")):
        assert answers[name].status_code == 400, answers[name].text
        assert answers[name].json()["error"] == (
            f"{where} contains a NUL character, which no store can keep; remove it."
        )
    assert renamed.status_code == 400
    assert "title contains a NUL character" in renamed.json()["error"]
    assert after == before
