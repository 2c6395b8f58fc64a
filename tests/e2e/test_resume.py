"""Resume on another worker: worker 1 of two (PostgreSQL + Redis, the deployment guide's
shape) is SIGKILLed, or SIGTERMed with a drain shorter than the answer, mid-answer; the client
reattaches on worker 2 with the last id it saw and gets the whole answer. With the real
``@ag-ui/client`` (``js/agui_reload.mjs``), a page reloaded on worker 2 during the death ends
with exactly the stored thread.

The run keeps its id; worker 2 takes it over (at once after a drain, once the lease has passed
after a kill) as its next execution, numbered from ``EPOCH_STRIDE + 1`` and opening with a
``MESSAGES_SNAPSHOT`` of the stored thread. The client's stream has one ``RUN_STARTED``, ids
increasing, and ``RUN_FINISHED`` at the end, and what the client shows after both streams
(``tests/support/transcript.py``) is exactly the stored thread. What worker 1 streamed stays
in the thread, ``interrupted``; the answer given again follows it, whole.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from django_pydantic_agent.chat_history.manager import EPOCH_STRIDE
from tests.e2e.test_workers import (
    LONG_PROMPT,
    Stream,
    _forget_prefix,
    client_of,
    fresh_database,
    read_all,
    verify_with_agui_client,
    wait_until_ended,
)
from tests.example_project.support import (
    RunningServer,
    cookie_header,
    run_input,
    serve_example_workers,
)
from tests.support.transcript import apply_events, visible

pytestmark = pytest.mark.e2e


@pytest.fixture
def workers(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> Iterator[tuple[list[RunningServer], list[subprocess.Popen[bytes]]]]:
    """Two workers of the example on one fresh database and one Redis key prefix."""
    prefix = f"dpa-resume-{uuid.uuid4().hex[:10]}"
    try:
        with (
            fresh_database(postgres_url) as database_url,
            serve_example_workers(
                tmp_path,
                database_url=database_url,
                count=2,
                REDIS_URL=redis_url,
                EXAMPLE_CACHE_PREFIX=prefix,
                DEMO_WORD_DELAY="0.03",
                AGENT_RUN_HEARTBEAT_SECONDS="0.5",
                AGENT_RUN_LEASE_SECONDS="2",
                AGENT_SWEEP_SECONDS="1",
                AGENT_DRAIN_SECONDS="0.5",
            ) as servers,
        ):
            yield servers, _processes(servers)
    finally:
        _forget_prefix(redis_url, prefix)


def _processes(servers: list[RunningServer]) -> list[subprocess.Popen[bytes]]:
    """The uvicorn processes serving ``servers`` (found by their ports)."""
    found = []
    for server in servers:
        port = server.url.rpartition(":")[2]
        pid = subprocess.run(
            ["fuser", f"{port}/tcp"], capture_output=True, text=True, check=False
        ).stdout.split()
        found.append(int(pid[0]))
    return found  # type: ignore[return-value]


def _clockless(text: str) -> str:
    """``text`` without the demo answer's clock reading (it tells the time it was given)."""
    return re.sub(r"\d\d:\d\d:\d\d UTC", "hh:mm:ss UTC", text)


def _texts(events: list[dict[str, Any]]) -> dict[str, str]:
    """Each text message's text (its clock reading masked), by message id, in order."""
    texts: dict[str, str] = {}
    for event in events:
        if event["type"] == "TEXT_MESSAGE_START":
            texts.setdefault(event["messageId"], "")
        elif event["type"] == "TEXT_MESSAGE_CONTENT":
            texts[event["messageId"]] = texts.get(event["messageId"], "") + event["delta"]
    return {ident: _clockless(text) for ident, text in texts.items()}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_the_client_on_worker_2_gets_the_whole_answer(
    stop: signal.Signals,
    workers: tuple[list[RunningServer], list[int]],
    node_scripts: Path,
    tmp_path: Path,
) -> None:
    (first, second), (pid_one, _) = workers
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", "run-resumed"
    with client_of(second) as (two, token_two):
        # The answer as a run that is never stopped gives it.
        reference = two.post(
            "/agent/",
            json=run_input(LONG_PROMPT, thread_id=f"{thread_id}-ref", run_id="run-ref"),
            headers={"X-CSRFToken": token_two},
        )
        whole = list(_texts(_events(reference.text)).values())[-1]
        assert "Since you asked for a long answer" in whole
        with client_of(first) as (one, token):
            body = run_input(LONG_PROMPT, thread_id=thread_id, run_id=run_id)
            with one.stream(
                "POST", "/agent/", json=body, headers={"X-CSRFToken": token}
            ) as response:
                stream = Stream(response)
                stream.read(25)
                stopped = time.monotonic()
                os.kill(pid_one, stop)
                with suppress(httpx.HTTPError):
                    stream.read()
        seen = list(stream.frames)
        last = max(_seq(frame_id) for frame_id, _ in seen if frame_id)
        assert not [e for _, e in seen if e["type"] in ("RUN_FINISHED", "RUN_ERROR")]
        tail = read_all(two, f"/agent/runs/{thread_id}/{run_id}/?after={last}")
        whole_tail_after = time.monotonic() - stopped
        stored = wait_until_ended(two, thread_id)
    events = [event for _, event in tail]
    types = [event["type"] for event in events]
    assert types[0] == "RUN_STARTED"
    assert types.count("RUN_STARTED") == 1
    assert types[-1] == "RUN_FINISHED"
    numbered = [_seq(frame_id) for frame_id, _ in tail if frame_id]
    assert numbered == sorted(set(numbered))  # increasing, none twice
    resumed = [seq for seq in numbered if seq > EPOCH_STRIDE]
    # The resumed execution from its start, every event once: its RUN_STARTED (EPOCH_STRIDE +
    # 1) unless the stream had sent one already, id-less, following worker 1's relayed log.
    opened = tail[0][0] is None
    start = EPOCH_STRIDE + (2 if opened else 1)
    assert resumed == list(range(start, start + len(resumed)))
    assert [seq for seq in numbered if seq <= EPOCH_STRIDE] == list(
        range(last + 1, last + 1 + len(numbered) - len(resumed))
    )  # what worker 1 relayed after the client's last id, if anything
    assert "MESSAGES_SNAPSHOT" in types
    assert list(_texts(events).values())[-1] == whole  # the whole answer, once
    answers = [m for m in stored["messages"] if m["role"] == "assistant" and m.get("content")]
    assert [m["status"] for m in answers] == ["interrupted", "complete"]
    # What the run completed before it stopped (the clock tool's call and result) is kept
    # complete, and not done again: the model went on from it.
    assert all(m["status"] == "complete" for m in stored["messages"] if m not in answers)
    assert [m["role"] for m in stored["messages"]].count("tool") == 1
    assert _clockless(answers[-1]["content"]) == whole
    assert whole.startswith(_clockless(answers[0]["content"]))
    # The client shows what it posted and what both streams built: exactly the stored thread.
    shown = apply_events([event for _, event in seen + tail], body["messages"])
    assert visible(shown) == visible(stored["messages"])
    verify_with_agui_client(node_scripts, tmp_path, events)
    print(f"FIGURE resume-e2e signal={stop.name} whole_answer_read_after_s={whole_tail_after:.2f}")
    assert "Traceback" not in second.log.read_text()


def _seq(frame_id: str) -> int:
    """The sequence number of an SSE id (``<run_id>:<seq>``)."""
    return int(frame_id.rpartition(":")[2])


def _events(body: str) -> list[dict[str, Any]]:
    from tests.example_project.support import parse_sse

    return parse_sse(body)


def _line(process: subprocess.Popen[str], seconds: float) -> str:
    """The next line ``process`` prints, within ``seconds``."""
    ready, _, _ = select.select([process.stdout], [], [], seconds)
    assert ready, f"node printed nothing within {seconds} s"
    assert process.stdout is not None
    return process.stdout.readline()


@pytest.mark.timeout(300)
def test_a_page_reloaded_while_its_worker_dies_ends_with_the_stored_thread(
    workers: tuple[list[RunningServer], list[int]],
    node_scripts: Path,
) -> None:
    # The real @ag-ui/client (js/agui_reload.mjs): a page streams a run from worker 1, which
    # is killed mid-answer; the page reloads on worker 2 at once (the thread, then a reattach
    # with the last id it saw) and the package's own client applies what it gets. So does the
    # first page's client, reconnecting with what it showed.
    (first, second), (pid_one, _) = workers
    thread_id, run_id = f"t-{uuid.uuid4().hex[:8]}", "run-reload"
    with client_of(first) as (http, token):
        cookie = cookie_header(http)
    node = subprocess.Popen(
        [
            "node",
            "agui_reload.mjs",
            f"{first.url}/agent/",
            f"{second.url}/agent/",
            thread_id,
            run_id,
            LONG_PROMPT,
        ],
        cwd=node_scripts,
        env={**os.environ, "AGUI_COOKIE": cookie, "AGUI_CSRF": token},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _line(node, 60) == "READY\n"
        os.kill(pid_one, signal.SIGKILL)
        assert node.stdin is not None
        node.stdin.write("killed\n")
        node.stdin.flush()
        out, err = node.communicate(timeout=120)
    finally:
        if node.poll() is None:
            node.kill()
    assert node.returncode == 0, err
    report = json.loads(out.splitlines()[-1])
    # Only the first page's connection broke (the client library leaves that one unhandled).
    assert set(report["unhandled"]) <= {"terminated"}, report["unhandled"]
    seen = report["first"]
    assert seen["types"][-1] not in ("RUN_FINISHED", "RUN_ERROR")  # cut mid-answer
    # The reloaded page found the run still running (worker 2 lists it), and was never refused.
    assert report["reloadedThread"] == {
        "status": 200,
        "activeRun": {"runId": run_id, "lastSeq": report["reloadedThread"]["activeRun"]["lastSeq"]},
    }
    stored = report["stored"]
    assert stored["activeRun"] is None
    for name in ("reload", "reconnect"):
        client = report[name]
        assert client["statuses"] == [200], (name, client)
        assert client["error"] is None, (name, client["error"])
        assert client["types"].count("RUN_STARTED") == 1, (name, client["types"])
        assert client["types"][-1] == "RUN_FINISHED", (name, client["types"])
        assert "MESSAGES_SNAPSHOT" in client["types"], (name, client["types"])
        ids = [_seq(frame["id"]) for frame in client["frames"] if frame["id"]]
        assert ids == sorted(set(ids)), (name, ids)
        assert min(ids) > seen["seen"], (name, ids)
        # What @ag-ui/client shows is exactly what the thread stores.
        assert visible(client["messages"]) == visible(stored["messages"]), name
    answers = [m for m in stored["messages"] if m["role"] == "assistant" and m.get("content")]
    assert [m["status"] for m in answers] == ["interrupted", "complete"]
    assert "Since you asked for a long answer" in answers[-1]["content"]
    assert "Traceback" not in second.log.read_text()
    print(
        f"FIGURE reload-e2e seen={seen['seen']} "
        f"relayed_at_reload={report['reloadedThread']['activeRun']['lastSeq']} "
        f"reload_events={len(report['reload']['types'])} "
        f"reconnect_events={len(report['reconnect']['types'])} unhandled={report['unhandled']}"
    )
