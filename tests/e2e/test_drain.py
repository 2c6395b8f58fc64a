"""A worker SIGTERMed mid-answer (a deploy) drains: no answer is cut.

The example project under uvicorn, started as ``make demo`` starts it (``--lifespan on``), on a
SQLite file. A client streams a long answer; the worker gets ``SIGTERM``:

- the client keeps streaming to ``RUN_FINISHED``, the answer is stored ``complete``, and only
  then does the worker exit (cleanly, without a traceback);
- a run whose request was on its way when the signal came gets a JSON 503 with
  ``Retry-After``, not a 200 cut short;
- with a drain shorter than the answer (``AGENT_DRAIN_SECONDS``), the run is handed over: the
  worker exits after the drain, what streamed is stored ``interrupted``, and the run's record
  is left ``running`` for another worker, whose sweep takes it over at once and resumes it.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.drain_support import (
    LONG_PROMPT,
    answer,
    read_until,
    run_rows,
    sigterm_mid_answer,
    text,
)
from tests.e2e.test_sweeper import worker
from tests.example_project.support import login, parse_sse, prepare_database, run_input

pytestmark = pytest.mark.e2e


def test_a_sigtermed_worker_finishes_its_answer_and_refuses_new_runs(tmp_path: Path) -> None:
    database = tmp_path / "example.sqlite3"
    prepare_database(database)
    with worker(database, tmp_path / "worker.log", DEMO_WORD_DELAY="0.02") as served:
        with httpx.Client(base_url=served.url, timeout=60) as http:
            with sigterm_mid_answer(
                served, http, run=("t-drain", "r-drain"), late=("t-late", "r-late")
            ) as signalled:
                time.sleep(0.3)
                status, headers, refused = answer(*signalled.late)
            served.process.wait(timeout=60)
            exited = time.monotonic() - signalled.at
            lines = signalled.lines
        log = served.log.read_text()
    events = parse_sse("\n".join(lines) + "\n\n")
    assert events[-1]["type"] == "RUN_FINISHED"
    assert "outcome" not in events[-1] or events[-1]["outcome"] == {"type": "success"}
    assert "Since you asked for a long answer" in text(events)  # the whole answer
    assert status == 503, refused
    assert headers["retry-after"] == "1"
    assert headers["content-type"] == "application/json"
    assert b"shutting down" in refused
    # uvicorn raises the signal again once it has shut down gracefully.
    assert served.process.returncode in (0, -signal.SIGTERM), log
    assert exited < 25  # it left once the answer was done, within the drain
    assert run_rows(database) == [("r-drain", "complete", run_rows(database)[0][2])]
    assert "Traceback" not in log


def test_a_run_outlasting_the_drain_is_handed_over_to_the_next_worker(tmp_path: Path) -> None:
    database = tmp_path / "example.sqlite3"
    prepare_database(database)
    with worker(
        database, tmp_path / "worker-1.log", DEMO_WORD_DELAY="0.2", AGENT_DRAIN_SECONDS="1"
    ) as first:
        with httpx.Client(base_url=first.url, timeout=60) as http:
            token = login(http)
            cookies = dict(http.cookies.items())
            body = run_input(LONG_PROMPT, thread_id="t-over", run_id="r-over")
            with http.stream(
                "POST", "/agent/", json=body, headers={"X-CSRFToken": token}
            ) as response:
                lines: list[str] = []
                stream = response.iter_lines()
                read_until(stream, lines, 3)
                signalled = time.monotonic()
                first.process.send_signal(signal.SIGTERM)
                lines.extend(stream)
            first.process.wait(timeout=30)
            exited = time.monotonic() - signalled
        log = first.log.read_text()
    events = parse_sse("\n".join(lines) + "\n\n")
    assert events[-1]["type"] == "TEXT_MESSAGE_END"  # closed, neither finished nor cancelled
    assert not [e for e in events if e["type"] in ("RUN_FINISHED", "RUN_ERROR")]
    assert first.process.returncode in (0, -signal.SIGTERM), log
    assert exited < 15
    assert run_rows(database) == [("r-over", "running", "")]
    assert "handed over" in log
    assert "Traceback" not in log

    with worker(
        database,
        tmp_path / "worker-2.log",
        AGENT_RUN_HEARTBEAT_SECONDS="0.5",
        AGENT_RUN_LEASE_SECONDS="30",
        AGENT_SWEEP_SECONDS="0.5",
    ) as second:
        with httpx.Client(base_url=second.url, cookies=cookies, timeout=30) as reloaded:
            deadline = time.monotonic() + 60
            while run_rows(database)[0][1] == "running":
                assert time.monotonic() < deadline
                time.sleep(0.1)
            thread = reloaded.get("/agent/threads/t-over/").json()
        log = second.log.read_text()
    # Its 30 s lease had not passed: the hand over, not the lease, made it the next worker's,
    # whose sweeper resumed it (docs/agui.md, Resume on another worker).
    assert run_rows(database)[0][1] == "complete"
    answers = [m for m in thread["messages"] if m["role"] == "assistant" and m.get("content")]
    assert [m["status"] for m in answers] == ["interrupted", "complete"]
    assert answers[0]["content"].startswith(text(events))
    assert "resumed here" in log
    assert "Traceback" not in log
