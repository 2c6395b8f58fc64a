"""The code of ``docs/long-conversations.md`` runs as printed."""

from __future__ import annotations

import importlib.util
import re
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
    reason='needs the harness extra: pip install "django-pydantic-agent[harness]"',
)


def test_the_window_snippets_run() -> None:
    server, select = _run("## The context window")
    assert isinstance(server["server"], AGUIServer)
    assert server["server"].history == HistoryWindow(max_tokens=50_000, max_messages=200)
    assert select["window"][-1] is select["thread"][-1]


@needs_harness
def test_the_compaction_snippet_runs() -> None:
    (space,) = _run("## Compaction")
    assert space["server"].history.max_messages == 100
    assert space["agent"].root_capability is not None


@needs_harness
@pytest.mark.django_db
def test_the_search_snippets_run() -> None:
    thread, owner = _run("## Search")
    assert isinstance(thread["server"], AGUIServer)
    assert owner["agent"] is not None
