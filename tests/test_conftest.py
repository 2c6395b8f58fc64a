"""The suite's own guards (``tests/conftest.py``): a CI leg cannot pass by skipping.

Each test reads a pytest run in a subprocess on a small probe file, with ``tests.conftest``
loaded as a plugin and the ``REQUIRE_*`` variables a tox leg sets; the SQLite runs are started
together by a module fixture.
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
    pytest.skip('needs the harness extra: pip install -e ".[harness]"')


def test_other_reason():
    pytest.skip("This store keeps files.")
"""

PROBE_MODULE_SKIP = """
import pytest

pytest.importorskip("no_such_module_anywhere", reason="needs the harness extra")


def test_never_collected():
    pass
"""


def start_probe(
    directory: Path, source: str, *, database_url: str | None = None, **require: str
) -> subprocess.Popen[str]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "markers =\n    postgresql\n    sqlite\n    boundary\n"
    )
    (directory / "test_probe.py").write_text(source)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("REQUIRE_") and name != "DATABASE_URL"
    }
    # Run in the probe's directory, so that the summary names the probe test_probe.py.
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(require, DJANGO_SETTINGS_MODULE="tests.settings", PYTHONPATH=pythonpath)
    if database_url:
        env["DATABASE_URL"] = database_url
    command = [sys.executable, "-m", "pytest", "-c", str(directory / "pytest.ini")]
    command += ["-p", "tests.conftest", "-p", "no:cacheprovider", "-rfEs"]
    return subprocess.Popen(
        [*command, "test_probe.py"],
        cwd=directory,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_probe(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:  # pragma: no cover - only after a timeout
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def run_probe(
    tmp_path: Path, source: str, *, database_url: str | None = None, **require: str
) -> subprocess.CompletedProcess[str]:
    return finish_probe(start_probe(tmp_path, source, database_url=database_url, **require))


Probes = dict[str, subprocess.CompletedProcess[str]]
WRONG_HARNESS = "0" if HARNESS_INSTALLED else "1"


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> Probes:
    """The SQLite probe runs, started together (each is mostly interpreter start-up)."""
    base = tmp_path_factory.mktemp("probes")
    runs = {
        "no requirements": (PROBE, {}),
        "REQUIRE_POSTGRES on SQLite": (PROBE, {"REQUIRE_POSTGRES": "1"}),
        "wrong REQUIRE_HARNESS": (PROBE, {"REQUIRE_HARNESS": WRONG_HARNESS}),
    }
    if HARNESS_INSTALLED:
        runs["REQUIRE_HARNESS, test skip"] = (PROBE, {"REQUIRE_HARNESS": "1"})
        runs["REQUIRE_HARNESS, module skip"] = (PROBE_MODULE_SKIP, {"REQUIRE_HARNESS": "1"})
    started = {
        name: start_probe(base / f"probe{index}", source, **require)
        for index, (name, (source, require)) in enumerate(runs.items())
    }
    return {name: finish_probe(process) for name, process in started.items()}


def _postgres_url() -> str:
    settings = connection.settings_dict
    return (
        f"postgres://{settings['USER']}:{settings['PASSWORD']}@{settings['HOST']}:"
        f"{settings['PORT']}/{settings['NAME']}"
    )


def test_without_requirements_every_skip_stays_a_skip(probes: Probes) -> None:
    result = probes["no requirements"]

    assert result.returncode == 0, result.stdout
    assert "1 passed, 4 skipped" in result.stdout
    assert "Needs PostgreSQL (marked postgresql); set DATABASE_URL." in result.stdout


def test_require_postgres_on_sqlite_refuses_to_start(probes: Probes) -> None:
    result = probes["REQUIRE_POSTGRES on SQLite"]

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


def test_require_harness_refuses_the_wrong_install(probes: Probes) -> None:
    result = probes["wrong REQUIRE_HARNESS"]

    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    expected = (
        "REQUIRE_HARNESS=0 but pydantic-ai-harness is installed"
        if HARNESS_INSTALLED
        else "REQUIRE_HARNESS=1 but pydantic-ai-harness is not installed"
    )
    assert expected in result.stderr


@pytest.mark.skipif(not HARNESS_INSTALLED, reason="REQUIRE_HARNESS=1 needs pydantic-ai-harness.")
@pytest.mark.parametrize(
    ("probe", "failed"),
    [
        ("REQUIRE_HARNESS, test skip", "FAILED test_probe.py::test_needs_the_extra"),
        ("REQUIRE_HARNESS, module skip", "ERROR test_probe.py"),
    ],
)
def test_require_harness_fails_a_harness_skip(probes: Probes, probe: str, failed: str) -> None:
    result = probes[probe]

    assert result.returncode != 0
    assert failed in result.stdout
    assert "REQUIRE_HARNESS=1: a harness test must run here, not skip" in result.stdout
