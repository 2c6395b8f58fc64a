"""Every install line names this project's source, never the bare name on PyPI.

PyPI's ``django-pydantic-agent`` is the predecessor, 0.28.3: ``pip install
django-pydantic-agent[harness]`` installs a different code base. Docs, the README, CONTRIBUTING
and every message of the package or the tests install from a clone (``./django-pydantic-agent``,
``.``) or from the repository (``django-pydantic-agent[...] @ git+https://...``). The bare name
may appear only in a paragraph that says it installs the predecessor (the README's and Getting
started's warnings), and pinned to the predecessor (``==0.28.3``, for a rollback).
"""

from __future__ import annotations

import re
from pathlib import Path

from django_pydantic_agent.contrib.store._harness_extra import harness_missing

ROOT = Path(__file__).resolve().parents[1]
NAME = "django-pydantic-agent"

#: ``pip install`` (options allowed) of the bare name, extras allowed, not pinned to 0.28.3 and
#: not followed by `` @ <url>``.
_BARE = re.compile(
    r"pip install(?:\s+-[-\w]+)*\s+[\"']?" + re.escape(NAME) + r"(?:\[[\w,]+\])?[\"']?"
    r"(?!\s*@|==|[\w./\[-])"
)


def _sources() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("django_pydantic_agent", "tests", "example_project"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return [path for path in files if path != Path(__file__)]


def test_no_install_line_sends_a_user_to_the_predecessor() -> None:
    found = []
    for path in _sources():
        for paragraph in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            if "predecessor" in paragraph:
                continue
            for match in _BARE.finditer(paragraph):
                found.append(f"{path.relative_to(ROOT)}: {match.group(0)}")

    assert found == []


def test_the_pattern_tells_the_bare_name_from_this_projects_source() -> None:
    assert _BARE.search('pip install "django-pydantic-agent[harness]"')
    assert _BARE.search("pip install -U --pre django-pydantic-agent")
    assert not _BARE.search('pip install -e "./django-pydantic-agent[harness]"')
    assert not _BARE.search('pip install "django-pydantic-agent[harness] @ git+https://x/y"')
    assert not _BARE.search("pip install django-pydantic-agent==0.28.3")
    assert not _BARE.search("pip install django-pydantic-agent-extras")


def test_the_missing_harness_message_installs_from_this_projects_source() -> None:
    missing = ModuleNotFoundError("No module named 'pydantic_ai_harness'")
    missing.name = "pydantic_ai_harness"

    message = str(harness_missing(missing, "DefaultStepStore"))

    assert not _BARE.search(message), message
    assert "git+https://github.com/django-pydantic-agent/django-pydantic-agent" in message
    assert './django-pydantic-agent[harness]"' in message
