"""A worker SIGKILLed mid-run: the next worker's sweeper ends its run ``errored``.

Two uvicorn processes of the example project share one SQLite database, one after the other:
the first is killed while it streams a long answer, and its run is left ``running`` with a
heartbeat that stops. The second starts with a short lease and sweep interval
(``AGENT_RUN_LEASE_SECONDS`` / ``AGENT_SWEEP_SECONDS``); a reloaded page reattaches to the dead
run through it and gets ``RUN_ERROR``, and the thread reads back with no active run and the
cut-off answer ``errored``.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from django_pydantic_agent.contrib.store.runs import SWEPT_ERROR
from tests.example_project.support import (
    _start_uvicorn,
    _stop,
    _wait_until_up,
    example_env,
    login,
    parse_sse,
    prepare_database,
    run_input,
)

pytestmark = pytest.mark.e2e

THREAD, RUN = "swept-thread", "swept-run"
RUNS_TABLE = "django_pydantic_agent_store_storedagentrun"


@dataclass(frozen=True, kw_only=True)
class Worker:
    url: str
    log: Path
    process: subprocess.Popen[bytes]


@contextmanager
def worker(database: Path, log: Path, **env: str) -> Iterator[Worker]:
    """One uvicorn worker of the example project on ``database`` (stopped on exit if alive)."""
    process, url = _start_uvicorn(example_env(database, **env), log)
    try:
        _wait_until_up(url, process, log)
        yield Worker(url=url, log=log, process=process)
    finally:
        if process.poll() is None:
            _stop(process)


def run_rows(database: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(database) as db:
        return db.execute(f"SELECT run_id, status, error FROM {RUNS_TABLE}").fetchall()


def wait_until(predicate: Any, *, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("timed out")


def stored_answer(client: httpx.Client) -> dict[str, Any] | None:
    """The thread's assistant message once some of its text is stored, else ``None``."""
    response = client.get(f"/agent/threads/{THREAD}/")
    if response.status_code != 200:
        return None
    answers = [m for m in response.json()["messages"] if m["role"] == "assistant"]
    return answers[-1] if answers and answers[-1].get("content") else None


@pytest.mark.parametrize("cache", ["per-process", "redis"])
def test_a_killed_workers_run_is_swept_by_the_next_worker(
    cache: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    database = tmp_path / "example.sqlite3"
    prepare_database(database)
    shared: dict[str, str] = {}
    if cache == "redis":
        # Both workers on one Redis: the second follows the first's relayed log until the
        # sweep ends the run.
        shared = {
            "REDIS_URL": request.getfixturevalue("redis_url"),
            "EXAMPLE_CACHE_PREFIX": f"sweeper-e2e-{uuid.uuid4().hex[:8]}",
        }
    # Worker 1 keeps the example's defaults for runs (10 s heartbeat, 60 s lease); its words
    # come slowly, so the answer is still streaming when it dies.
    with worker(
        database,
        tmp_path / "worker-1.log",
        DEMO_WORD_DELAY="0.2",
        AGENT_ON_WORKER_LOSS="error",
        **shared,
    ) as first:
        client = httpx.Client(base_url=first.url, timeout=30)
        csrf = login(client)
        cookies = dict(client.cookies.items())
        deltas = 0
        with client.stream(
            "POST",
            "/agent/",
            json=run_input("Tell me a long story", thread_id=THREAD, run_id=RUN),
            headers={"X-CSRFToken": csrf, "Accept": "text/event-stream"},
        ) as stream:
            assert stream.status_code == 200
            lines = stream.iter_lines()
            for line in lines:
                if line.startswith("data:") and '"TEXT_MESSAGE_CONTENT"' in line:
                    deltas += 1
                    if deltas == 3:
                        break
            with httpx.Client(base_url=first.url, cookies=cookies, timeout=30) as reader:
                partial = wait_until(lambda: stored_answer(reader))
            first.process.send_signal(signal.SIGKILL)
            first.process.wait(timeout=30)
            with suppress(httpx.HTTPError):
                for _ in lines:
                    pass
        client.close()
    assert first.process.returncode == -signal.SIGKILL
    assert run_rows(database) == [(RUN, "running", "")]
    assert partial["status"] == "active"

    # Worker 2: same database, a short lease and sweep interval (the heartbeat must be shorter
    # than the lease, or the server refuses to start).
    with worker(
        database,
        tmp_path / "worker-2.log",
        # The sweeper ending a run errored (test_resume.py has the resume).
        AGENT_ON_WORKER_LOSS="error",
        AGENT_RUN_HEARTBEAT_SECONDS="0.5",
        AGENT_RUN_LEASE_SECONDS="2",
        AGENT_SWEEP_SECONDS="0.5",
        **shared,
    ) as second:
        with httpx.Client(base_url=second.url, cookies=cookies, timeout=60) as reloaded:
            # The reloaded page reattaches to the run it was reading: the mount's first request
            # starts the sweeper, and the reattach waits until the dead run has ended.
            reattach = reloaded.get(
                f"/agent/runs/{THREAD}/{RUN}/", headers={"Accept": "text/event-stream"}
            )
            thread = reloaded.get(f"/agent/threads/{THREAD}/").json()
        log = second.log.read_text()
    assert reattach.status_code == 200
    events = parse_sse(reattach.text)
    types = [e["type"] for e in events]
    # From storage (RUN_STARTED, the snapshot) or, over Redis, first what the dead worker had
    # relayed, its open message closed; then the run's end as the sweep recorded it.
    assert types[0] == "RUN_STARTED"
    assert types[-2:] == ["MESSAGES_SNAPSHOT", "RUN_ERROR"]
    if cache == "redis":
        assert "TEXT_MESSAGE_CONTENT" in types
        assert types[-3] == "TEXT_MESSAGE_END"
    assert events[-1]["message"] == SWEPT_ERROR
    assert_valid_agui(events)
    assert run_rows(database) == [(RUN, "errored", SWEPT_ERROR)]
    # The thread reads back sane: no active run, what streamed kept, the answer errored.
    assert thread["activeRun"] is None
    answer = thread["messages"][-1]
    assert answer["role"] == "assistant"
    assert answer["status"] == "errored"
    assert answer["content"].startswith(partial["content"])
    assert answer["chatHistory"]["runOutcome"]["type"] == "error"
    assert "swept as errored" in log
    assert "Traceback" not in log
