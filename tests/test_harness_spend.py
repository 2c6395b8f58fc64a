"""``_harness_spend``: the harness's spend budgets under the installed release's module name.

The harness renamed ``pydantic_ai_harness.spend`` to ``spend_limits`` after 0.62; 0.75 warns on
the old name. These tests run on every harness release the extra allows.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

ROOT = Path(__file__).resolve().parent.parent

_IMPORT_WITH_WARNINGS_AS_ERRORS = """
import warnings

from pydantic_ai_harness import HarnessDeprecationWarning

warnings.simplefilter("error", HarnessDeprecationWarning)
import django

django.setup()
from django_pydantic_agent.agui.spend import budget_refusal
from django_pydantic_agent.contrib.store.spend_store import DefaultSpendStore

assert budget_refusal(RuntimeError("not a budget")) is None
print("clean")
"""


def test_the_spend_budgets_load_without_a_harness_deprecation_warning() -> None:
    """Regression: on 0.75 both imported ``pydantic_ai_harness.spend``, which warns."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_WITH_WARNINGS_AS_ERRORS],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "clean"), done.stderr


def test_the_names_are_the_installed_harness_own() -> None:
    from django_pydantic_agent import _harness_spend

    renamed = importlib.util.find_spec("pydantic_ai_harness.spend_limits") is not None
    harness = importlib.import_module(
        "pydantic_ai_harness.spend_limits" if renamed else "pydantic_ai_harness.spend"
    )
    assert _harness_spend.__all__
    for name in _harness_spend.__all__:
        assert getattr(_harness_spend, name) is getattr(harness, name), name
