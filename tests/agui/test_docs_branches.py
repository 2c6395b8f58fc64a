"""The branch snippet of ``docs/agui.md`` runs as printed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from django_pydantic_agent.agui.runs import RunCoordinator
from tests.agui.conftest import logged_in, run_body

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "agui.md"


def snippet() -> Any:
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Branches: edit, regenerate, fork") :]
    (code,) = re.findall(r"```python\n(.*?)```", section[: section.index("\n## ", 5)], re.DOTALL)
    scope: dict[str, Any] = {}
    exec(code, scope)
    return scope["regenerate_switch_and_fork"]


async def test_the_branch_snippet_regenerates_switches_and_forks(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await http.post("/history/", json=run_body(text="Hello"))
        await RunCoordinator.wait_for_all_runs()
        first = (await http.get("/history/threads/thread-1/")).json()["messages"]
        siblings, fork_id = await snippet()(http, "/history/")
        await RunCoordinator.wait_for_all_runs()
        active = (await http.get("/history/threads/thread-1/")).json()["messages"]
        fork = (await http.get(f"/history/threads/{fork_id}/")).json()["messages"]
    assert siblings[0] == first[-1]["id"]
    assert len(siblings) == 2
    assert [m["id"] for m in active] == [m["id"] for m in first]
    assert [m["id"] for m in fork] == [m["id"] for m in first]


async def test_the_export_example_of_the_page_imports(alice: Any) -> None:
    import json

    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Export and import") :]
    (example,) = re.findall(r"```json\n(.*?)```", section[: section.index("\n## ", 5)], re.DOTALL)
    async with await logged_in(alice) as http:
        response = await http.post("/history/threads/import/", json=json.loads(example))
        assert response.status_code == 201, response.text
        thread = (await http.get(f"/history/threads/{response.json()['threadId']}/")).json()
    assert [(m["role"], m["content"]) for m in thread["messages"]] == [("user", "Hi")]
