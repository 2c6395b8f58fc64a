"""The code of ``docs/long-conversations.md`` runs as printed."""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from django_pydantic_agent.agui import AGUIServer
from django_pydantic_agent.chat_history import HistoryWindow

PAGE = Path(__file__).resolve().parent.parent / "docs" / "long-conversations.md"


def _section(title: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n{title}\n")
    following = re.search(r"\n## ", text[start + len(title) + 2 :])
    end = start + len(title) + 2 + following.start() if following else len(text)
    return text[start:end]


def _run(section: str) -> list[dict[str, Any]]:
    blocks = re.findall(r"```python\n(.*?)```", _section(section), flags=re.DOTALL)
    assert blocks
    spaces = []
    for code in blocks:
        space: dict[str, Any] = {}
        exec(compile(code, str(PAGE), "exec"), space)
        spaces.append(space)
    return spaces


needs_harness = pytest.mark.skipif(
    importlib.util.find_spec("pydantic_ai_harness") is None,
    reason='needs the harness extra: pip install -e ".[harness]"',
)


def test_the_window_snippets_run() -> None:
    server, select = _run("## The context window")
    assert isinstance(server["server"], AGUIServer)
    assert server["server"].history == HistoryWindow(max_tokens=50_000, max_messages=200)
    assert select["window"][-1] is select["thread"][-1]


@needs_harness
def test_the_compaction_snippet_runs() -> None:
    space, _summarising = _run("## Compaction")
    assert space["server"].history.max_messages == 100
    assert space["agent"].root_capability is not None


@needs_harness
@pytest.mark.django_db
def test_the_search_snippets_run() -> None:
    thread, owner = _run("## Search")
    assert isinstance(thread["server"], AGUIServer)
    assert owner["agent"] is not None


@needs_harness
@pytest.mark.django_db(transaction=True)
async def test_the_stored_summary_snippet_runs_and_the_fifth_turn_summarises_nothing(
    settings: Any,
) -> None:
    """The page's ``SummarizingCompaction`` server, mounted and run for five turns: the fourth
    stores a summary, the fifth is sent it and calls the summariser no more."""
    from django.contrib.auth import get_user_model
    from django.urls import clear_url_caches, path

    from django_pydantic_agent.contrib.store.models import StoredSummary
    from tests.agui.conftest import CSRF_SECRET, logged_in, sse_events

    _sliding, space = _run("## Compaction")
    calls: list[int] = []
    summarise = space["summarise"]

    def counted(messages: Any, info: Any) -> Any:
        calls.append(1)
        return summarise(messages, info)

    capability = space["agent"].root_capability
    summariser = next(
        c for c in getattr(capability, "capabilities", [capability]) if hasattr(c, "summary_prompt")
    )
    summariser.model.function = counted
    urls = types.ModuleType("tests._docs_summary_urls")
    urls.urlpatterns = [path("agent/", space["server"].urls)]  # type: ignore[attr-defined]
    sys.modules[urls.__name__] = urls
    settings.ROOT_URLCONF = urls.__name__
    clear_url_caches()
    user = await get_user_model().objects.acreate_user("reader", password="pw-reader")
    try:
        async with await logged_in(user) as http:
            http.cookies.set("csrftoken", CSRF_SECRET)  # the page's server checks CSRF
            for n in range(5):
                body = {
                    "threadId": "t1",
                    "runId": f"r{n}",
                    "state": {},
                    "messages": [{"id": f"m{n}", "role": "user", "content": f"Hello {n}"}],
                    "tools": [],
                    "context": [],
                }
                response = await http.post(
                    "/agent/", json=body, headers={"X-CSRFToken": CSRF_SECRET}
                )
                assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
                assert len(calls) == (0 if n < 3 else 1)
            thread = (await http.get("/agent/threads/t1/")).json()
    finally:
        del sys.modules[urls.__name__]
        clear_url_caches()
    assert len(thread["messages"]) == 10
    assert thread["modelView"]["summary"]["text"] == "The user said hello a few times."
    assert thread["modelView"]["summary"]["through"] == thread["messages"][3]["id"]
    assert thread["modelView"]["startsAt"] == "m2"
    assert await StoredSummary.objects.acount() == 1
