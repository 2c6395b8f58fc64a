"""Every snippet of ``docs/`` that builds an ``Agent`` runs on a fresh install.

A fresh install has ``pydantic-ai-slim`` and no provider package: ``Agent("openai:gpt-4o")``
raises ``ImportError`` when it is built, and in a URLconf that fails every ``manage.py``
command, ``migrate`` included. A snippet names a model that needs nothing
(``os.environ.get("AGENT_MODEL", "test")``) or defers the check (``defer_model_check=True``).
Each such block is run here with ``openai`` unimportable and ``AGENT_MODEL`` unset.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from pydantic_ai import Agent

from django_pydantic_agent.agui import AGUIServer

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _agent_snippets() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
        for number, code in enumerate(blocks, start=1):
            if "from pydantic_ai import Agent" in code and "Agent(" in code:
                found.append((f"{page.relative_to(DOCS)}:{number}", code))
    return found


SNIPPETS = _agent_snippets()


def test_the_pages_that_build_an_agent_are_all_found() -> None:
    pages = {name.split(":")[0] for name, _ in SNIPPETS}

    assert {"index.md", "agui.md", "getting-started.md", "chat-page.md"} <= pages


@pytest.mark.django_db
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.usefixtures("harness_names_as_documented")
@pytest.mark.parametrize(("name", "code"), SNIPPETS, ids=[name for name, _ in SNIPPETS])
def test_the_snippet_builds_its_agent_without_a_provider_package(
    name: str, code: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "pydantic_ai_harness" in code and importlib.util.find_spec("pydantic_ai_harness") is None:
        pytest.skip('needs the harness extra: pip install -e ".[harness]"')
    monkeypatch.setitem(sys.modules, "openai", None)  # an import of it raises ImportError
    monkeypatch.delenv("AGENT_MODEL", raising=False)

    namespace: dict[str, object] = {"__name__": f"docs_{name}"}
    exec(compile(code, f"docs/{name}", "exec"), namespace)

    built = [value for value in namespace.values() if isinstance(value, Agent)]
    built += [value.agent for value in namespace.values() if isinstance(value, AGUIServer)]
    assert built, f"docs/{name} builds no agent"
