"""A worker under gunicorn drains on gunicorn's SIGTERM, as it does under uvicorn.

The example project served as docs/deployment.md serves it with gunicorn
(``-k uvicorn_worker.UvicornWorker --graceful-timeout N``), one worker, on a SQLite file. A
client streams a long answer and the *master* gets ``SIGTERM`` (what a deploy sends); it passes
the signal on to its worker, whose lifespan hook begins the drain:

- the streaming client gets the whole answer, ending with ``RUN_FINISHED``, stored
  ``complete``, and gunicorn exits once it is done (well within the graceful timeout);
- a run whose request was on its way when the signal came gets the JSON 503 with
  ``Retry-After``;
- a new connection after the signal is refused: the worker has closed its listener and the
  master its sockets, so a fresh POST never reaches the application;
- neither gunicorn nor its worker logs a traceback.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.e2e.drain_support import answer, run_rows, sigterm_mid_answer, text
from tests.e2e.test_sweeper import Worker
from tests.example_project.support import (
    BIN_DIR,
    EXAMPLE_DIR,
    _stop,
    _wait_until_up,
    example_env,
    free_port,
    parse_sse,
    prepare_database,
    run_input,
)

pytestmark = pytest.mark.e2e

GRACEFUL_TIMEOUT = 30


@contextmanager
def gunicorn(database: Path, log: Path, **env: str) -> Iterator[Worker]:
    """gunicorn with one uvicorn worker serving the example project (stopped on exit if alive)."""
    port = free_port()
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                str(BIN_DIR / "gunicorn"),
                "example_project.asgi:application",
                "-k",
                "uvicorn_worker.UvicornWorker",
                "--workers",
                "1",
                "--bind",
                f"127.0.0.1:{port}",
                "--graceful-timeout",
                str(GRACEFUL_TIMEOUT),
                # gunicorn >= 25.1 opens a control socket in ~/.gunicorn by default, which
                # tests running side by side would share.
                "--no-control-socket",
            ],
            cwd=EXAMPLE_DIR,
            env=example_env(database, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(url, process, log)
        yield Worker(url=url, log=log, process=process)
    finally:
        if process.poll() is None:
            _stop(process)


def test_gunicorns_sigterm_drains_its_worker(tmp_path: Path) -> None:
    database = tmp_path / "example.sqlite3"
    prepare_database(database)
    with gunicorn(database, tmp_path / "gunicorn.log", DEMO_WORD_DELAY="0.02") as served:
        with httpx.Client(base_url=served.url, timeout=60) as http:
            with sigterm_mid_answer(
                served, http, run=("t-gdrain", "r-gdrain"), late=("t-glate", "r-glate")
            ) as signalled:  # SIGTERM to the master, as a deploy does
                time.sleep(0.5)  # the master has passed it on to the worker
                status, headers, refused = answer(*signalled.late)
                with pytest.raises(httpx.ConnectError):
                    httpx.post(
                        f"{served.url}/agent/",
                        json=run_input("And now?", thread_id="t-gnew", run_id="r-gnew"),
                        headers={"X-CSRFToken": signalled.token},
                        cookies=signalled.cookies,
                        timeout=5,
                    )
            served.process.wait(timeout=GRACEFUL_TIMEOUT + 10)
            exited = time.monotonic() - signalled.at
            lines = signalled.lines
        log = served.log.read_text()
    events = parse_sse("\n".join(lines) + "\n\n")
    assert events[-1]["type"] == "RUN_FINISHED", log
    assert "outcome" not in events[-1] or events[-1]["outcome"] == {"type": "success"}
    assert "Since you asked for a long answer" in text(events)  # the whole answer
    assert status == 503, refused
    assert headers["retry-after"] == "1"
    assert headers["content-type"] == "application/json"
    assert b"shutting down" in refused
    assert served.process.returncode == 0, log
    assert exited < GRACEFUL_TIMEOUT  # it left once the answer was done, not at the timeout
    assert run_rows(database) == [("r-gdrain", "complete", run_rows(database)[0][2])]
    assert "Traceback" not in log
    assert "Shutting down: Master" in log
