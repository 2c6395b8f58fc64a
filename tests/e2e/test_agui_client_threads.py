"""Thread operations from the real ``@ag-ui/client``, against the example on each store.

``agui_threads.mjs`` runs two turns with ``HttpAgent``, then regenerates the last answer and
edits the first question by posting the history cut at that point (as AG-UI clients express
both), switches back to the first answer with ``PATCH``, forks, searches, archives and
unarchives, and exports as JSON and Markdown, on the default store and the Memory Service.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.nodejs import run_node
from tests.e2e.test_browser import memory_service_server  # noqa: F401  (fixture)
from tests.e2e.test_chat_page import server  # noqa: F401  (the example on each store)
from tests.example_project.support import RunningServer, cookie_header, login

pytestmark = pytest.mark.e2e

USERNAME = "agui-threads"
PASSWORD = "agui-threads-password"


def _answers(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant" and m.get("content")]


def test_edit_regenerate_switch_fork_search_archive_export_with_the_agui_client(
    server: RunningServer,  # noqa: F811
    node_scripts: Path,
) -> None:
    server.add_user(USERNAME, PASSWORD)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        csrf = login(client, USERNAME, PASSWORD)
        report = run_node(
            node_scripts,
            "agui_threads.mjs",
            server.url,
            env={"AGUI_COOKIE": cookie_header(client), "AGUI_CSRF": csrf},
        )
    assert "error" not in report, report.get("error")
    steps = report["steps"]
    thread_id = report["threadId"]

    turns = steps["turns"]
    assert _answers(turns["stored"])[-2:] == [
        "I asked the calculator, and 2 + 3 = 5.",
        "I asked the calculator, and 6 * 7 = 42.",
    ]

    # Regenerate: a new answer to u2 on a new branch; the old one is its sibling.
    regenerated = steps["regenerate"]
    new_answer = regenerated["thread"]["messages"][-1]
    assert new_answer["content"] == "I asked the calculator, and 6 * 7 = 42."
    old_answer = turns["stored"][-1]
    assert new_answer["id"] != old_answer["id"]
    [point] = [p for p in regenerated["thread"]["branches"].values() if len(p["siblings"]) == 2]
    assert point["index"] == 1
    assert [m["id"] for m in regenerated["thread"]["messages"]].count(old_answer["id"]) == 0

    # The switch makes the first branch active again: its messages, as first stored.
    switched = steps["switch"]
    assert switched["status"] == 200
    assert [m["id"] for m in switched["thread"]["messages"]] == [m["id"] for m in turns["stored"]]

    # Edit u1: it keeps its id on the new branch, and the model answered the new question.
    edited = steps["edit"]
    messages = edited["thread"]["messages"]
    assert messages[0] == {**messages[0], "id": "u1", "content": "Zebra sums: what is 3 + 4?"}
    assert _answers(messages) == ["I asked the calculator, and 3 + 4 = 7."]
    siblings = edited["thread"]["branches"]["u1"]["siblings"]
    assert len(siblings) == 2
    assert siblings[1] == "u1"
    assert siblings[0].startswith("u1~")

    fork = steps["fork"]
    assert fork["status"] == 201
    assert [m["id"] for m in fork["thread"]["messages"]] == [m["id"] for m in messages]

    drawer = steps["drawer"]
    assert {t["threadId"] for t in drawer["found"]} == {thread_id, fork["threadId"]}
    assert drawer["archived"] == drawer["unarchived"] == 200
    assert thread_id not in drawer["listed"]
    assert thread_id in drawer["listedArchived"]
    assert thread_id in drawer["relisted"]

    # The JSON export holds every branch: both answers to u2, both versions of u1.
    export = steps["export"]
    assert export["status"] == [200, 200]
    records = [entry["record"] for entry in export["json"]["messages"] if entry.get("record")]
    contents = [record["content"] for record in records]
    assert contents.count("I asked the calculator, and 6 * 7 = 42.") == 2
    assert "Zebra sums: what is 2 + 3?" in contents
    assert "Zebra sums: what is 3 + 4?" in contents
    assert "Zebra sums: what is 3 + 4?" in export["markdown"]
    assert "6 * 7" not in export["markdown"]  # Markdown is the active branch only
