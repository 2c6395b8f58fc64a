"""The suite's own guards (``tests/conftest.py``): a CI leg cannot pass by skipping.

Each test runs pytest in a subprocess on a small probe file, with ``tests.conftest`` loaded as
a plugin and the ``REQUIRE_*`` variables a tox leg sets.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]
HARNESS_INSTALLED = importlib.util.find_spec("pydantic_ai_harness") is not None

PROBE = """
import pytest


def test_runs():
    pass


def test_needs_concurrent_writers():
    pytest.skip("Needs a database with concurrent writers (CI runs it on PostgreSQL).")


@pytest.mark.postgresql
def test_marked():
    pass


def test_needs_the_extra():
    pytest.skip('needs the harness extra: pip install "django-pydantic-agent[harness]"')


def test_other_reason():
    pytest.skip("This store keeps files.")
"""

PROBE_MODULE_SKIP = """
import pytest

pytest.importorskip("no_such_module_anywhere", reason="needs the harness extra")


def test_never_collected():
    pass
"""


def run_probe(
    tmp_path: Path, source: str, *, database_url: str | None = None, **require: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\nmarkers = postgresql\n"
    )
    (tmp_path / "test_probe.py").write_text(source)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("REQUIRE_") and name != "DATABASE_URL"
    }
    # Run in tmp_path, so that the summary names the probe test_probe.py.
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(require, DJANGO_SETTINGS_MODULE="tests.settings", PYTHONPATH=pythonpath)
    if database_url:
        env["DATABASE_URL"] = database_url
    command = [sys.executable, "-m", "pytest", "-c", str(tmp_path / "pytest.ini")]
    command += ["-p", "tests.conftest", "-p", "no:cacheprovider", "-rfEs"]
    return subprocess.run(
        [*command, "test_probe.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _postgres_url() -> str:
    settings = connection.settings_dict
    return (
        f"postgres://{settings['USER']}:{settings['PASSWORD']}@{settings['HOST']}:"
        f"{settings['PORT']}/{settings['NAME']}"
    )


def test_without_requirements_every_skip_stays_a_skip(tmp_path: Path) -> None:
    result = run_probe(tmp_path, PROBE)

    assert result.returncode == 0, result.stdout
    assert "1 passed, 4 skipped" in result.stdout
    assert "Needs PostgreSQL (marked postgresql); set DATABASE_URL." in result.stdout


def test_require_postgres_on_sqlite_refuses_to_start(tmp_path: Path) -> None:
    result = run_probe(tmp_path, PROBE, REQUIRE_POSTGRES="1")

    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert (
        "REQUIRE_POSTGRES=1 but the database engine is 'sqlite3': set DATABASE_URL to a "
        "PostgreSQL server."
    ) in result.stderr


@pytest.mark.postgresql
def test_require_postgres_fails_each_postgresql_only_skip(tmp_path: Path) -> None:
    result = run_probe(tmp_path, PROBE, database_url=_postgres_url(), REQUIRE_POSTGRES="1")

    assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout
    assert "FAILED test_probe.py::test_needs_concurrent_writers" in result.stdout
    assert "REQUIRE_POSTGRES=1: a PostgreSQL-only test must run here, not skip" in result.stdout
    # The marked test ran; skips for other reasons are still skips.
    assert "1 failed, 2 passed, 2 skipped in" in result.stdout


def test_require_harness_refuses_the_wrong_install(tmp_path: Path) -> None:
    wrong = "0" if HARNESS_INSTALLED else "1"

    result = run_probe(tmp_path, PROBE, REQUIRE_HARNESS=wrong)

    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    expected = (
        "REQUIRE_HARNESS=0 but pydantic-ai-harness is installed"
        if HARNESS_INSTALLED
        else "REQUIRE_HARNESS=1 but pydantic-ai-harness is not installed"
    )
    assert expected in result.stderr


@pytest.mark.skipif(not HARNESS_INSTALLED, reason="REQUIRE_HARNESS=1 needs pydantic-ai-harness.")
@pytest.mark.parametrize(
    ("source", "failed"),
    [
        (PROBE, "FAILED test_probe.py::test_needs_the_extra"),
        (PROBE_MODULE_SKIP, "ERROR test_probe.py"),
    ],
)
def test_require_harness_fails_a_harness_skip(tmp_path: Path, source: str, failed: str) -> None:
    result = run_probe(tmp_path, source, REQUIRE_HARNESS="1")

    assert result.returncode != 0
    assert failed in result.stdout
    assert "REQUIRE_HARNESS=1: a harness test must run here, not skip" in result.stdout
