"""Fixtures for the end-to-end tests: the example project under uvicorn, Node, Chromium.

Every test here is marked ``e2e`` and excluded from the default run; ``make test-e2e`` (and CI)
runs them with ``pytest -m e2e`` after ``npm ci`` in ``tests/e2e/js``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.nodejs import JS_DIR
from tests.example_project.support import RunningServer, login, serve_example
from tests.support.services import postgres_database, postgres_url, redis_url

__all__ = ["postgres_database", "postgres_url", "redis_url"]

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def example_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The example project under uvicorn on a free loopback port, with a fresh database.

    The scripted model pauses 30 ms between words: quick, yet slow enough to press Stop. The
    heartbeat fires after 10 ms of silence, so every client here must skip ``: ping`` comments
    between the events.
    """
    with serve_example(
        tmp_path_factory.mktemp("example-e2e"),
        DEMO_WORD_DELAY="0.03",
        AGENT_HEARTBEAT_SECONDS="0.01",
    ) as server:
        yield server


@pytest.fixture
def demo_client(example_server: RunningServer) -> Iterator[httpx.Client]:
    """An httpx client logged in as the demo user (session and CSRF cookies set)."""
    with httpx.Client(base_url=example_server.url, timeout=30) as client:
        login(client)
        yield client


@pytest.fixture(scope="session")
def node_scripts() -> Path:
    """``tests/e2e/js`` with its npm dependencies installed (``npm ci`` if they are missing)."""
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("Node.js 20 and npm are needed: apt-get install nodejs npm")
    if not (JS_DIR / "node_modules" / ".package-lock.json").exists():
        result = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=JS_DIR,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, f"npm ci failed:\n{result.stderr}"
    return JS_DIR


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium (the tests never download a browser)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium chromium-driver")
    return CHROMIUM
