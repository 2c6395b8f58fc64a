"""Without the ``harness`` extra, everything that needs it says how to install it.

The harness is hidden with ``sys.modules[name] = None``, which makes its import fail exactly as
an uninstalled package does; these tests therefore run with and without the extra.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from django_pydantic_agent.contrib.store._harness_extra import harness_missing

INSTALL = (
    "Install the harness extra from this project's repository, not from PyPI (whose "
    "django-pydantic-agent is the predecessor, 0.28.3): "
    'pip install "django-pydantic-agent[harness] @ '
    'git+https://github.com/django-pydantic-agent/django-pydantic-agent", or from a clone: '
    'pip install -e "./django-pydantic-agent[harness]"'
)
ROOT = Path(__file__).resolve().parents[3]

# Importing these again must fail the way a project without the extra sees it.
_OURS = [
    "django_pydantic_agent._harness_spend",
    "django_pydantic_agent.contrib.store.harness",
    "django_pydantic_agent.contrib.store.memory_store",
    "django_pydantic_agent.contrib.store.spend_store",
    "django_pydantic_agent.contrib.store.step_store",
]


@pytest.fixture
def no_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide pydantic-ai-harness and forget our modules that import it (restored afterwards)."""
    for name in [n for n in sys.modules if n.startswith("pydantic_ai_harness.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "pydantic_ai_harness", None)
    for name in _OURS:
        monkeypatch.delitem(sys.modules, name, raising=False)


@pytest.mark.usefixtures("no_harness")
@pytest.mark.parametrize(
    ("module", "feature"),
    [
        ("django_pydantic_agent.contrib.store.step_store", "DefaultStepStore"),
        ("django_pydantic_agent.contrib.store.memory_store", "DefaultMemoryStore"),
        ("django_pydantic_agent.contrib.store.spend_store", "DefaultSpendStore"),
        ("django_pydantic_agent.contrib.store.harness", "DefaultMemoryStore"),
    ],
)
def test_importing_a_harness_store_names_the_extra(module: str, feature: str) -> None:
    with pytest.raises(ImproperlyConfigured) as raised:
        importlib.import_module(module)

    assert str(raised.value) == (
        f"{feature} needs the optional pydantic-ai-harness package, which is not installed. "
        f"{INSTALL}"
    )
    # No ModuleNotFoundError chained under it: the message is the whole story.
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__ is True


@pytest.mark.usefixtures("no_harness")
def test_the_lazy_re_export_names_the_extra() -> None:
    from django_pydantic_agent.contrib.store import stores

    with pytest.raises(ImproperlyConfigured, match=r"DefaultStepStore needs .*harness\]"):
        _ = stores.DefaultStepStore


def test_a_module_the_harness_itself_needs_is_reported_as_itself() -> None:
    exc = ModuleNotFoundError("No module named 'json_repair'", name="json_repair")

    assert harness_missing(exc, "DefaultMemoryStore") is exc


@pytest.mark.usefixtures("no_harness")
def test_the_purge_command_without_the_extra_says_how_to_install_it() -> None:
    with pytest.raises(CommandError, match=r"DefaultMemoryStore needs .*harness\]"):
        call_command("agent_store_purge_memory", "42")


_PURGE_WITHOUT_HARNESS = """
import sys

sys.modules["pydantic_ai_harness"] = None
from django.core.management import execute_from_command_line

execute_from_command_line(["manage.py", "agent_store_purge_memory", "42"])
"""


def test_the_purge_command_without_the_extra_is_a_command_error_not_a_traceback() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PURGE_WITHOUT_HARNESS],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        "CommandError: DefaultMemoryStore needs the optional pydantic-ai-harness package, "
        f"which is not installed. {INSTALL}\n"
    )
    assert result.stdout == ""
