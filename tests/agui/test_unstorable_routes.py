"""NaN, Infinity, NUL and lone surrogates in the body of every JSON route: a 400 naming the
value by its path, nothing written, one log line and no traceback (``agui.unstorable``).

The run endpoint's refusals are spelled out in ``tests/agui/test_input.py``; here every route
of the table that reads a JSON body gets each value, both in the field the route reads and in
a key it ignores (which no other check of the route looks at). The routes are listed from the
server's own route table, so a new JSON route fails here until it is covered.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.urls import resolve

from tests.agui.conftest import logged_in, run_body
from tests.agui.test_transfer import branched_export
from tests.agui.urls import open_server, persisting

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]

_NON_FINITE = "is NaN or Infinity, which JSON cannot carry; send a finite number or null"
_SURROGATE = (
    "contains an unpaired surrogate (half of a UTF-16 pair), which is not valid Unicode; "
    "send valid UTF-8 text"
)
#: Each value no store can keep, and its refusal after the path that names it.
VALUES: dict[str, tuple[Any, str]] = {
    "nan": (float("nan"), _NON_FINITE),
    "infinity": (float("inf"), _NON_FINITE),
    "minus-infinity": (float("-inf"), _NON_FINITE),
    "nul": ("a\x00b", "contains a NUL character, which no store can keep; remove it"),
    "lone-surrogate": ("half \ud800 a pair", _SURROGATE),
    "lone-low-surrogate": ("\udc00", _SURROGATE),
}
#: Values that only a string can hold, for fields that must be strings.
STRING_VALUES = ["nul", "lone-surrogate", "lone-low-surrogate"]

#: The routes of a persisting server that read a JSON body, by (route name, method). The
#: cancel route takes no body, and the upload route a multipart one.
JSON_ROUTES = {
    ("run", "POST"),
    ("thread", "PATCH"),
    ("thread-fork", "POST"),
    ("threads-import", "POST"),
    ("message-feedback", "PUT"),
}
NO_JSON_BODY = {("run-cancel", "POST"), ("attachments", "POST")}


def test_every_route_that_reads_a_body_is_covered() -> None:
    unsafe = set()
    for candidate in (open_server, persisting):  # stateless, and durable with attachments
        for pattern in candidate.urlpatterns:
            view: Any = pattern.callback
            for method in view.allowed_methods:
                if method in ("POST", "PUT", "PATCH"):
                    unsafe.add((pattern.name, method))
    assert unsafe - NO_JSON_BODY == JSON_ROUTES
    # ... and each of them gets the values below.
    covered = {
        (resolve("/history/" + route.format(id="t", mid="m")).url_name, method)
        for _, method, route, _, _ in CASES + STRING_CASES
    }
    assert covered == JSON_ROUTES


FEEDBACK = "threads/{id}/messages/{mid}/feedback/"

# Each case: (id, method, route, body builder, the path the 400 names). A body builder takes
# the value and the test's thread (``{"id", "old", "mid", "document"}``).
Body = Callable[[Any, dict[str, Any]], Any]
CASES: list[tuple[str, str, str, Body, str]] = [
    ("rename", "PATCH", "threads/{id}/", lambda v, t: {"title": "Renamed", "note": v}, "note"),
    (
        "rename-key",
        "PATCH",
        "threads/{id}/",
        lambda v, t: {"title": "Renamed", "n": {"k": v}},
        "n.k",
    ),
    ("archive", "PATCH", "threads/{id}/", lambda v, t: {"archived": True, "why": [1, v]}, "why.1"),
    (
        "switch",
        "PATCH",
        "threads/{id}/",
        lambda v, t: {"activeMessageId": t["old"], "note": v},
        "note",
    ),
    ("fork", "POST", "threads/{id}/fork/", lambda v, t: {"messageId": t["mid"], "x": v}, "x"),
    ("feedback", "PUT", FEEDBACK, lambda v, t: {"rating": "up", "why": [v]}, "why.0"),
    (
        "import-record",
        "POST",
        "threads/import/",
        lambda v, t: _in_document(t["document"], ("messages", 1, "record", "extra"), v),
        "messages.1 record.extra",
    ),
    (
        "import-usage",
        "POST",
        "threads/import/",
        lambda v, t: _in_document(t["document"], ("runs", 0, "usage", "extra"), v),
        "runs.0.usage.extra",
    ),
    (
        "run-state",
        "POST",
        "",
        lambda v, t: {**run_body(thread_id=t["id"], run_id="r-bad"), "state": {"s": v}},
        "state.s",
    ),
]
#: The same routes with the value in the field they read (strings only).
STRING_CASES: list[tuple[str, str, str, Body, str]] = [
    ("rename-title", "PATCH", "threads/{id}/", lambda v, t: {"title": v}, "title"),
    ("switch-id", "PATCH", "threads/{id}/", lambda v, t: {"activeMessageId": v}, "activeMessageId"),
    ("fork-id", "POST", "threads/{id}/fork/", lambda v, t: {"messageId": v}, "messageId"),
    ("feedback-comment", "PUT", FEEDBACK, lambda v, t: {"rating": "up", "comment": v}, "comment"),
    (
        "import-title",
        "POST",
        "threads/import/",
        lambda v, t: {**t["document"], "title": v},
        "title",
    ),
    (
        "import-wire",
        "POST",
        "threads/import/",
        lambda v, t: _in_document(t["document"], ("messages", 0, "wire", 0, "content"), v),
        "messages.0 wire.0.content",
    ),
]


def _in_document(document: dict[str, Any], where: tuple[Any, ...], value: Any) -> Any:
    changed = copy.deepcopy(document)
    holder: Any = changed
    for part in where[:-1]:
        holder = holder[part]
    holder[where[-1]] = value
    return changed


def _params() -> list[Any]:
    """Each case on the Default and the session store; the feedback route on the Default
    store only (the session store keeps no feedback: it is not mounted there)."""
    cases = [(case, list(VALUES)) for case in CASES] + [(c, STRING_VALUES) for c in STRING_CASES]
    return [
        pytest.param(prefix, case, values, id=f"{prefix.strip('/')}-{case[0]}")
        for prefix in ("/history/", "/history-session/")
        for case, values in cases
        if case[2] != FEEDBACK or prefix == "/history/"
    ]


async def _state(http: httpx.AsyncClient, prefix: str, thread_id: str) -> Any:
    """What a client can read of the store: the thread list, and the thread."""
    listing = (await http.get(f"{prefix}threads/")).json()["threads"]
    detail = (await http.get(f"{prefix}threads/{thread_id}/")).json()
    return listing, detail


@pytest.mark.parametrize(("prefix", "case", "values"), _params())
async def test_a_value_no_store_can_keep_is_a_400_on_every_json_route(
    alice: Any,
    caplog: pytest.LogCaptureFixture,
    prefix: str,
    case: tuple[str, str, str, Body, str],
    values: list[str],
) -> None:
    _name, method, route, build, where = case
    caplog.set_level(logging.INFO)
    async with await logged_in(alice) as http:
        document, current = await branched_export(http)
        imported = await http.post(f"{prefix}threads/import/", json=document)
        assert imported.status_code == 201, imported.text
        thread_id = imported.json()["threadId"]
        [old] = [e["wire"][-1]["id"] for e in document["messages"] if not e["active"]]
        thread = {"id": thread_id, "old": old, "mid": current["messages"][1]["id"]}
        thread["document"] = document
        before = await _state(http, prefix, thread_id)
        for value in values:
            bad, problem = VALUES[value]
            caplog.clear()
            response = await http.request(
                method,
                prefix + route.format(id=thread_id, mid=thread["mid"]),
                content=json.dumps(build(bad, thread)).encode(),
                headers={"Content-Type": "application/json"},
            )
            records = list(caplog.records)
            assert response.status_code == 400, (value, response.text)
            assert response.json()["error"] == f"{where} {problem}.", value
            # One WARNING line naming the problem, and no traceback.
            problems = [r for r in records if r.levelno >= logging.WARNING]
            assert len(problems) == 1, (value, [r.getMessage() for r in problems])
            [warning] = problems
            assert warning.name == "django_pydantic_agent.agui"
            assert f"{where} {problem}." in warning.getMessage()
            assert warning.exc_info is None
        # Nothing was written: no thread renamed, archived, switched, forked or imported, no run.
        assert await _state(http, prefix, thread_id) == before
