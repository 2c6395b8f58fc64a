"""The example project on its own SQLite settings under concurrent use, over real HTTP.

20 runs on 20 threads of execution and 5 DELETEs at once, through uvicorn: every request
succeeds, nothing answers with an HTML error page, and the log has no traceback. Without
``transaction_mode="IMMEDIATE"`` and a ``timeout`` most of these saves failed with
"database is locked", and a DELETE answered with Django's HTML 500 page.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Barrier

import httpx
import pytest

from tests.example_project.support import (
    RunningServer,
    login,
    parse_sse,
    run_input,
    serve_example,
)

pytestmark = pytest.mark.e2e

RUNS = 20
DELETES = 5


@pytest.fixture
def busy_server(tmp_path: Path) -> Iterator[RunningServer]:
    """The example with a fresh SQLite file; words stream fast, so the runs overlap in writes."""
    with serve_example(tmp_path, DEMO_WORD_DELAY="0.005") as server:
        yield server


def _client(server: RunningServer, cookies: httpx.Cookies) -> httpx.Client:
    return httpx.Client(base_url=server.url, cookies=cookies, timeout=60)


def test_concurrent_runs_and_deletes_on_sqlite_all_succeed(busy_server: RunningServer) -> None:
    with httpx.Client(base_url=busy_server.url, timeout=60) as setup:
        token = login(setup)
        cookies = setup.cookies
        for i in range(DELETES):  # the threads the DELETEs will remove
            body = run_input("hello", thread_id=f"old-{i}", run_id=f"old-run-{i}")
            answer = setup.post("/agent/", json=body, headers={"X-CSRFToken": token})
            assert parse_sse(answer.text)[-1]["type"] == "RUN_FINISHED"
    barrier = Barrier(RUNS + DELETES)

    def run(i: int) -> tuple[int, str, str]:
        body = run_input(f"what is {i} * 7?", thread_id=f"new-{i}", run_id=f"run-{i}")
        with _client(busy_server, cookies) as http:
            barrier.wait(timeout=30)
            answer = http.post("/agent/", json=body, headers={"X-CSRFToken": token})
        events = parse_sse(answer.text) if answer.status_code == 200 else []
        last = events[-1]["type"] if events else ""
        return answer.status_code, answer.headers.get("content-type", ""), last

    def delete(i: int) -> tuple[int, str, str]:
        with _client(busy_server, cookies) as http:
            barrier.wait(timeout=30)
            answer = http.delete(f"/agent/threads/old-{i}/", headers={"X-CSRFToken": token})
        return answer.status_code, answer.headers.get("content-type", ""), answer.text

    with ThreadPoolExecutor(RUNS + DELETES) as pool:
        runs = [pool.submit(run, i) for i in range(RUNS)]
        deletes = [pool.submit(delete, i) for i in range(DELETES)]
        run_results = [future.result() for future in runs]
        delete_results = [future.result() for future in deletes]

    assert [status for status, _, _ in run_results] == [200] * RUNS, run_results
    assert all(kind.startswith("text/event-stream") for _, kind, _ in run_results)
    assert [last for _, _, last in run_results] == ["RUN_FINISHED"] * RUNS, run_results
    assert [status for status, _, _ in delete_results] == [204] * DELETES, delete_results
    assert [text for _, _, text in delete_results] == [""] * DELETES  # no HTML error page
    with _client(busy_server, cookies) as http:
        listing = http.get("/agent/threads/", params={"limit": 50}).json()["threads"]
    assert sorted(thread["threadId"] for thread in listing) == sorted(
        f"new-{i}" for i in range(RUNS)
    )
    log = busy_server.log.read_text()
    assert "Traceback" not in log
    assert "database is locked" not in log
    assert " 500 " not in log
