"""Two uvicorn processes of the example project on one PostgreSQL, with Redis as Django's cache.

The deployment shape of docs/deployment.md: ``DATABASE_URL``, ``REDIS_URL`` and one shared
``EXAMPLE_MEDIA_ROOT``, migrated once. A run started on worker 1 is reattached on worker 2 with
exactly the events its reader missed, then the live tail (through the run's log relayed in
Redis); a cancel posted to worker 2 stops it on worker 1; a stranger gets the 404 of a missing
run on either worker; the throttle counts one user's requests across both. Each flow runs on
the Default store and on the Memory Service (the emulator mounted in each process: its state
is the shared database, so both workers see the same memory).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from tests.e2e.nodejs import run_node
from tests.example_project.support import (
    RunningServer,
    login,
    run_input,
    serve_example_workers,
)

pytestmark = pytest.mark.e2e

#: Runs plus uploads one user may start per minute, across both workers.
THROTTLE = 6
LONG_PROMPT = "Tell me a long story, please."


@contextmanager
def fresh_database(postgres_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database for one module; its URL. Dropped afterwards."""
    import psycopg

    name = f"dpa_workers_{uuid.uuid4().hex[:10]}"
    admin = urlunsplit(urlsplit(postgres_url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(postgres_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _forget_prefix(redis_url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=500))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(scope="module", params=["default", "memory-service"])
def workers(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    postgres_url: str,
    redis_url: str,
) -> Iterator[list[RunningServer]]:
    """Two workers of the example on one fresh database, one Redis key prefix, one media root."""
    prefix = f"dpa-workers-{uuid.uuid4().hex[:10]}"
    workdir = tmp_path_factory.mktemp(f"workers-{request.param}")
    try:
        with (
            fresh_database(postgres_url) as database_url,
            serve_example_workers(
                workdir,
                database_url=database_url,
                count=2,
                REDIS_URL=redis_url,
                EXAMPLE_CACHE_PREFIX=prefix,
                AGENT_STORE=request.param,
                AGENT_MEMORY_SPACE=f"workers-{uuid.uuid4().hex[:8]}",
                # Words come quickly, yet a long answer lasts a few seconds.
                DEMO_WORD_DELAY="0.03",
                AGENT_HEARTBEAT_SECONDS="0.2",
                AGENT_REQUESTS_PER_MINUTE=str(THROTTLE),
            ) as servers,
        ):
            yield servers
            for server in servers:
                log = server.log.read_text()
                assert "Traceback" not in log, log
    finally:
        _forget_prefix(redis_url, prefix)


@contextmanager
def client_of(
    server: RunningServer, username: str = "demo", password: str = ""
) -> Iterator[tuple[httpx.Client, str]]:
    """An httpx client logged in on ``server`` and its CSRF token."""
    with httpx.Client(base_url=server.url, timeout=60) as http:
        token = login(http) if not password else login(http, username, password)
        yield http, token


class Stream:
    """A run's SSE stream read frame by frame: ``(id, event)`` pairs, comments skipped."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.iter_lines()
        self.frames: list[tuple[str | None, dict[str, Any]]] = []

    def read(self, count: int | None = None) -> list[tuple[str | None, dict[str, Any]]]:
        """Read ``count`` more frames (all that are left with ``None``); return all so far."""
        wanted = None if count is None else len(self.frames) + count
        frame_id: str | None = None
        data: list[str] = []
        for line in self._lines:
            if line.startswith("id:"):
                frame_id = line[3:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip(" "))
            elif not line and data:
                self.frames.append((frame_id, json.loads("\n".join(data))))
                frame_id, data = None, []
                if wanted is not None and len(self.frames) >= wanted:
                    break
            elif not line:
                frame_id = None
        return self.frames


def read_all(http: httpx.Client, path: str, **kwargs: Any) -> list[tuple[str | None, Any]]:
    with http.stream("GET", path, **kwargs) as response:
        assert response.status_code == 200, response.read()
        return Stream(response).read()


def answer_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def verify_with_agui_client(node_scripts: Path, tmp_path: Path, *streams: list[Any]) -> None:
    """Each stream passes @ag-ui/client's verifier (``verifyEvents``)."""
    path = tmp_path / "streams.json"
    path.write_text(json.dumps(list(streams)))
    results = run_node(node_scripts, "verify_streams.mjs", str(path))
    assert results == [{"ok": True}] * len(streams), results


def wait_until_ended(http: httpx.Client, thread_id: str) -> dict[str, Any]:
    """``GET threads/<id>/`` once the thread has no active run (finalised)."""
    deadline = time.monotonic() + 30
    while True:
        thread = http.get(f"/agent/threads/{thread_id}/").json()
        if thread.get("activeRun") is None:
            return thread
        assert time.monotonic() < deadline, thread
        time.sleep(0.1)


def test_a_run_on_worker_1_reattaches_on_worker_2_with_exactly_the_missing_events(
    workers: list[RunningServer], node_scripts: Path, tmp_path: Path
) -> None:
    first, second = workers
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", "run-reattach"
    body = run_input(LONG_PROMPT, thread_id=thread_id, run_id=run_id)
    with (
        client_of(first) as (one, token),
        client_of(second) as (two, _),
        ThreadPoolExecutor(2) as pool,
    ):
        with one.stream("POST", "/agent/", json=body, headers={"X-CSRFToken": token}) as response:
            assert response.status_code == 200
            stream = Stream(response)
            seen = stream.read(25)
            after = 25
            assert seen[-1][0] == f"{run_id}:{after}"
            assert seen[-1][1]["type"] not in ("RUN_FINISHED", "RUN_ERROR")
            path = f"/agent/runs/{thread_id}/{run_id}/"
            by_query = pool.submit(read_all, two, f"{path}?after={after}")
            by_header = pool.submit(
                read_all, two, path, headers={"Last-Event-ID": f"{run_id}:{after + 5}"}
            )
            whole = stream.read()
        resumed, resumed_by_header = by_query.result(), by_header.result()
        stored_one = wait_until_ended(one, thread_id)
        stored_two = wait_until_ended(two, thread_id)
    assert whole[-1][1]["type"] == "RUN_FINISHED"
    assert [frame_id for frame_id, _ in whole] == [
        f"{run_id}:{seq}" for seq in range(1, len(whole) + 1)
    ]
    for tail, seen_up_to in ((resumed, after), (resumed_by_header, after + 5)):
        reopened = [event["type"] for frame_id, event in tail if frame_id is None]
        assert reopened == ["RUN_STARTED", "TEXT_MESSAGE_START"]
        numbered = [frame for frame in tail if frame[0] is not None]
        # Exactly the missing events, in order, each once, then the live tail to the end.
        assert numbered == whole[seen_up_to:]
        full = answer_text([event for _, event in whole])
        assert (
            answer_text([e for _, e in whole[:seen_up_to]]) + answer_text([e for _, e in numbered])
            == full
        )
    assert "Since you asked for a long answer" in full
    # Both workers read the same stored answer.
    assert stored_one["messages"] == stored_two["messages"]
    assert stored_two["messages"][-1]["content"] == full
    verify_with_agui_client(
        node_scripts,
        tmp_path,
        [event for _, event in resumed],
        [event for _, event in resumed_by_header],
    )


def test_a_cancel_posted_to_worker_2_stops_the_run_on_worker_1(
    workers: list[RunningServer], node_scripts: Path, tmp_path: Path
) -> None:
    first, second = workers
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", "run-cancel"
    body = run_input(LONG_PROMPT, thread_id=thread_id, run_id=run_id)
    with client_of(first) as (one, token), client_of(second) as (two, token_two):
        with one.stream("POST", "/agent/", json=body, headers={"X-CSRFToken": token}) as response:
            stream = Stream(response)
            stream.read(25)
            cancel = two.post(
                f"/agent/runs/{thread_id}/{run_id}/cancel/", headers={"X-CSRFToken": token_two}
            )
            frames = stream.read()
        stored_one = wait_until_ended(one, thread_id)
        stored_two = wait_until_ended(two, thread_id)
        again = two.post(
            f"/agent/runs/{thread_id}/{run_id}/cancel/", headers={"X-CSRFToken": token_two}
        )
    assert cancel.status_code == 202, cancel.text
    assert cancel.json() == {"runId": run_id, "status": "cancelling", "cancelled": True}
    events = [event for _, event in frames]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "cancelled"}
    assert "Since you asked for a long answer" not in answer_text(events)  # stopped early
    for stored in (stored_one, stored_two):
        assert stored["messages"][-1]["status"] == "interrupted"
        assert stored["messages"][-1]["content"] == answer_text(events)
    assert again.json() == {"runId": run_id, "status": "interrupted", "cancelled": False}
    verify_with_agui_client(node_scripts, tmp_path, events)


def test_a_strangers_reattach_and_cancel_on_worker_2_are_the_404_of_a_missing_run(
    workers: list[RunningServer],
) -> None:
    first, second = workers
    second.add_user("mallory", "mallory-password")
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", "run-private"
    body = run_input(LONG_PROMPT, thread_id=thread_id, run_id=run_id)
    with (
        client_of(first) as (one, token),
        client_of(second, "mallory", "mallory-password") as (stranger, stranger_token),
        one.stream("POST", "/agent/", json=body, headers={"X-CSRFToken": token}) as response,
    ):
        stream = Stream(response)
        stream.read(10)
        answers = [
            stranger.get(f"/agent/runs/{thread_id}/{run_id}/?after=3"),
            stranger.post(
                f"/agent/runs/{thread_id}/{run_id}/cancel/",
                headers={"X-CSRFToken": stranger_token},
            ),
        ]
        missing = [
            stranger.get(f"/agent/runs/{thread_id}/no-such-run/?after=3"),
            stranger.post(
                f"/agent/runs/{thread_id}/no-such-run/cancel/",
                headers={"X-CSRFToken": stranger_token},
            ),
        ]
        frames = stream.read()
    for theirs, absent in zip(answers, missing, strict=True):
        assert theirs.status_code == absent.status_code == 404
        assert theirs.json() == absent.json() == {"error": "No such run."}
    # The stranger's cancel did nothing: the run completed.
    assert frames[-1][1]["type"] == "RUN_FINISHED"
    assert "outcome" not in frames[-1][1] or frames[-1][1]["outcome"] == {"type": "success"}


def test_the_throttle_counts_one_users_runs_across_both_workers(
    workers: list[RunningServer],
) -> None:
    first, second = workers
    for _attempt in range(2):
        username = f"busy-{uuid.uuid4().hex[:6]}"
        first.add_user(username, "busy-password")
        window = int(time.time() // 60)
        statuses: list[int] = []
        with (
            client_of(first, username, "busy-password") as (one, token_one),
            client_of(second, username, "busy-password") as (two, token_two),
        ):
            for index in range(THROTTLE + 1):
                http, token = (one, token_one) if index % 2 == 0 else (two, token_two)
                body = run_input("hi", thread_id=f"t-{username}-{index}", run_id=f"r{index}")
                answer = http.post("/agent/", json=body, headers={"X-CSRFToken": token})
                statuses.append(answer.status_code)
        if int(time.time() // 60) == window:
            break  # all in one throttle window; else the counts restarted: try again
    else:  # pragma: no cover - two minute boundaries in two short attempts
        pytest.fail("the throttle window rolled over during both attempts")
    # Each worker alone saw at most 4 runs: only a shared count refuses the seventh.
    assert statuses == [200] * THROTTLE + [429], statuses
