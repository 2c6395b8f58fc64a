"""Attachment references on posted user messages are the server's, checked before the run.

A user message quotes an upload by its id; what is stored and replayed is the attachment
store's ref (real name, type, size), never what the client wrote beside the id. An id that
names no upload of the caller is a 400 naming it, and nothing of the run is written.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from django_pydantic_agent.contrib.store.models import (
    StoredAgentRun,
    StoredConversation,
    StoredMessage,
)
from tests.agui.conftest import logged_in, run_body, sse_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]

FORGED = {
    "name": "Invoice-signed.pdf",
    "mime": "application/pdf",
    "size": 999_999,
    "url": "https://evil.example/invoice.pdf",
}


async def _upload(http: httpx.AsyncClient, name: str = "notes.txt") -> dict[str, Any]:
    created = await http.post(
        "/stored/attachments/", files={"file": (name, b"hello world", "text/plain")}
    )
    assert created.status_code == 201
    return dict(created.json())


def _quoting(refs: Any, *, where: str = "attachments", **ids: str) -> dict[str, Any]:
    body = run_body(**ids)
    message = body["messages"][0]
    if where == "attachments":
        message["attachments"] = refs
    else:
        message["metadata"] = {"source": "composer", "attachments": refs}
    return body


def _rows() -> tuple[int, int, int]:
    return (
        StoredConversation.objects.count(),
        StoredMessage.objects.count(),
        StoredAgentRun.objects.count(),
    )


@pytest.mark.parametrize("where", ["attachments", "metadata"])
async def test_a_forged_name_and_type_are_replaced_by_the_uploads_own(
    alice: Any, where: str
) -> None:
    async with await logged_in(alice) as http:
        ref = await _upload(http)
        posted = _quoting([{"id": ref["id"], **FORGED}], where=where)
        response = await http.post("/stored/", json=posted)
        thread = await http.get("/stored/threads/thread-1/")
    assert response.status_code == 200
    assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
    [user] = [m for m in thread.json()["messages"] if m["role"] == "user"]
    real = [{"id": ref["id"], "name": "notes.txt", "mime": "text/plain", "size": 11}]
    if where == "attachments":
        assert user["attachments"] == real
    else:
        assert user["metadata"]["attachments"] == real
        assert user["metadata"]["source"] == "composer"  # the rest of the message is kept
    assert "Invoice" not in thread.text
    assert "evil.example" not in thread.text


async def test_a_reference_by_id_alone_is_completed(alice: Any) -> None:
    async with await logged_in(alice) as http:
        first, second = await _upload(http, "a.txt"), await _upload(http, "b.txt")
        posted = _quoting([{"id": second["id"]}, {"id": first["id"]}, {"id": second["id"]}])
        response = await http.post("/stored/", json=posted)
        thread = await http.get("/stored/threads/thread-1/")
    assert response.status_code == 200
    [user] = [m for m in thread.json()["messages"] if m["role"] == "user"]
    assert [(a["id"], a["name"], a["size"]) for a in user["attachments"]] == [
        (second["id"], "b.txt", 11),
        (first["id"], "a.txt", 11),
        (second["id"], "b.txt", 11),
    ]


@pytest.mark.parametrize("owner", ["stranger", "nobody"])
async def test_an_id_that_names_no_upload_of_the_caller_is_a_400_before_the_run(
    alice: Any, bob: Any, owner: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with await logged_in(bob) as other:
        bobs = await _upload(other)
    quoted = bobs["id"] if owner == "stranger" else "0" * 32
    caplog.set_level(logging.INFO)
    async with await logged_in(alice) as http:
        caplog.clear()
        response = await http.post("/stored/", json=_quoting([{"id": quoted, **FORGED}]))
        logged = [r for r in caplog.records if r.name.startswith("django")]
        listing = await http.get("/stored/threads/")
        still_bobs = await http.get(f"/stored/attachments/{bobs['id']}/")
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": f"messages.0 (id 'user-run-1') attachments.0 names attachment '{quoted}', "
        "which is not an upload of yours; upload the file to attachments/ and quote the id "
        "it returns."
    }
    # Nothing of the refused run is written, and a stranger's file is as unknown as none.
    assert listing.json() == {"threads": [], "nextCursor": None}
    assert await sync_to_async(_rows)() == (0, 0, 0)
    assert still_bobs.status_code == 404
    # One line for the refusal, no traceback.
    assert [(r.levelname, r.getMessage()) for r in logged] == [
        ("WARNING", f"Refused POST /stored/ with 400: {response.json()['error']}")
    ]
    assert logged[0].exc_info is None


async def test_one_unknown_id_among_real_ones_refuses_the_whole_run(alice: Any) -> None:
    async with await logged_in(alice) as http:
        ref = await _upload(http)
        body = _quoting([{"id": ref["id"]}])
        body["messages"].append(
            {"id": "u2", "role": "user", "content": "and this", "attachments": [{"id": "nope"}]}
        )
        response = await http.post("/stored/", json=body)
    assert response.status_code == 400
    assert response.json()["error"].startswith(
        "messages.1 (id 'u2') attachments.0 names attachment 'nope', which is not an upload"
    )
    assert await sync_to_async(_rows)() == (0, 0, 0)


@pytest.mark.parametrize(
    ("refs", "problem"),
    [
        ({"id": "x"}, "attachments must be a list of attachment references"),
        (["x"], "attachments.0 has no string id"),
        ([{"name": "a.pdf"}], "attachments.0 has no string id"),
        ([{"id": 7}], "attachments.0 has no string id"),
        ([{"id": ""}], "attachments.0 has no string id"),
    ],
)
async def test_a_malformed_reference_is_a_400(alice: Any, refs: Any, problem: str) -> None:
    async with await logged_in(alice) as http:
        response = await http.post("/stored/", json=_quoting(refs))
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"messages.0 (id 'user-run-1') {problem}")
    assert await sync_to_async(_rows)() == (0, 0, 0)


async def test_without_an_attachment_store_a_reference_is_refused(alice: Any) -> None:
    # The scripted mount keeps neither threads nor uploads: it cannot vouch for any id.
    async with await logged_in(alice) as http:
        refused = await http.post("/agent/", json=_quoting([{"id": "abc", **FORGED}]))
        plain = await http.post("/agent/", json=run_body())
    assert refused.status_code == 400
    assert refused.json() == {
        "error": "messages.0 (id 'user-run-1') quotes attachment 'abc', but this endpoint "
        "keeps no uploads (its attachment store is Null); send the file's content instead, "
        "or mount an attachment store."
    }
    assert plain.status_code == 200


async def test_an_empty_list_and_other_roles_are_left_alone(alice: Any) -> None:
    async with await logged_in(alice) as http:
        body = _quoting([])
        response = await http.post("/stored/", json=body)
        thread = await http.get("/stored/threads/thread-1/")
    assert response.status_code == 200
    [user] = [m for m in thread.json()["messages"] if m["role"] == "user"]
    assert user.get("attachments", []) == []


@pytest.mark.parametrize("where", ["attachments", "metadata"])
async def test_a_stranger_id_quoted_older_than_the_run_reads_is_still_a_400(
    alice: Any, bob: Any, where: str
) -> None:
    """A durable run builds only the newest 400 posted messages; what an older user message
    quotes is still checked against the caller's uploads."""
    async with await logged_in(bob) as other:
        bobs = await _upload(other)
    body = _quoting([{"id": bobs["id"]}], where=where)
    body["messages"] += [
        {"id": f"u{n}", "role": "user", "content": f"filler {n}"} for n in range(400)
    ]
    async with await logged_in(alice) as http:
        response = await http.post("/stored/", json=body)
    assert response.status_code == 400, response.text[:300]
    field = "attachments" if where == "attachments" else "metadata.attachments"
    assert response.json()["error"].startswith(
        f"messages.0 (id 'user-run-1') {field}.0 names attachment '{bobs['id']}', which is "
        "not an upload of yours"
    )
    assert await sync_to_async(_rows)() == (0, 0, 0)
