"""Two workers of the example project on PostgreSQL and Redis, with the timings it ships
(``RunOptions``' defaults), lose worker 1 in the middle of a long answer: stopped
(``SIGSTOP``, a worker whose event loop stands still past the lease and then goes on) or
killed (``SIGKILL``).

The client reads worker 1's stream until it has some of the answer, then worker 1 gets the
signal and the client goes to worker 2 at once, as a page does: it drops the stream and
reattaches with the last id it saw (``GET runs/<thread>/<run>/?after=``), read to the end.
Worker 2 takes the run over once its lease has passed, as its next execution (ids from
``EPOCH_STRIDE + 1``, opening with a ``MESSAGES_SNAPSHOT``).

Checked: the two streams together have every event once (ids increasing, contiguous within
an execution, one ``RUN_STARTED``, ``RUN_FINISHED`` last), the client shows exactly the stored
thread, and the stored thread has worker 1's cut answer ``interrupted`` and the whole answer
once, ``complete``, after the one tool call. A stopped worker 1 gets ``SIGCONT`` while worker 2
streams the answer: it must stop the run without writing (the thread's rows of the first
execution are as the take-over left them, the run record is worker 2's, ended ``complete``),
log it in one warning line, and serve requests again. Neither worker logs a traceback.

Printed (``FIGURE example-worker-loss``): the time from the signal to the first event of the
resumed execution at the client, the issue's 10 s contract, which the test holds it to; for a
stopped worker, the time from ``SIGCONT`` to its warning line; and the cache commands on the
test's key prefix over the whole run (Redis ``MONITOR``), by kind, per second of the run. Lease
renewals (heartbeats) are not among them: they go to the run store, two queries a beat a
worker (``StoredAgentRunStore.beat``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis

from django_pydantic_agent.agui.options import RunOptions
from django_pydantic_agent.chat_history.manager import EPOCH_STRIDE
from tests.e2e.test_workers import LONG_PROMPT, Stream, _forget_prefix, client_of, wait_until_ended
from tests.example_project.support import RunningServer, run_input, serve_example_workers
from tests.reliability.support import log_problems
from tests.support.transcript import apply_events, visible

pytestmark = pytest.mark.reliability

#: Answer words the client reads from worker 1 before the signal.
WORDS_BEFORE = 12
#: Answer words of the resumed execution the client reads before a stopped worker 1 goes on.
WORDS_BEFORE_SIGCONT = 10
#: The contract of issue 39: another worker streams the run's next event within this many
#: seconds of a worker's death, with the default settings.
CONTRACT_SECONDS = 10.0
#: What a fenced worker logs, once per run (``agui.runs`` and ``chat_history.manager``).
FENCED = re.compile(r"taken over by another worker")

Frame = tuple[str | None, dict[str, Any]]


@pytest.fixture
def cache_prefix(redis_url: str) -> Iterator[str]:
    """A Redis key prefix of the test's own, its keys deleted after it."""
    prefix = f"dpa-loss-{uuid.uuid4().hex[:10]}"
    yield prefix
    _forget_prefix(redis_url, prefix)


@pytest.fixture
def workers(
    tmp_path: Path, postgres_database: str, redis_url: str, cache_prefix: str
) -> Iterator[list[RunningServer]]:
    """Two workers of the example project on a fresh database and ``cache_prefix``, with no
    durable-run timing set (the example keeps ``RunOptions``' defaults)."""
    with serve_example_workers(
        tmp_path,
        database_url=postgres_database,
        count=2,
        REDIS_URL=redis_url,
        EXAMPLE_CACHE_PREFIX=cache_prefix,
        DEMO_WORD_DELAY="0.03",
    ) as servers:
        yield servers


class CacheOps:
    """The Redis commands on the workers' key prefix while open (``MONITOR``), by kind: the
    relayed log, cancel polls, the sweep lease, the rest."""

    KINDS = {":relay:": "relay", ":cancel:": "cancel", ":sweep:": "sweep"}

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.prefix = prefix
        self.counts: dict[str, int] = dict.fromkeys([*self.KINDS.values(), "other"], 0)
        self.seconds = 0.0
        self._client = redis.Redis.from_url(redis_url)
        self._monitor = self._client.monitor()
        self._open = True
        self._thread = threading.Thread(target=self._count, daemon=True)

    def __enter__(self) -> CacheOps:
        self._monitor.__enter__()
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.monotonic() - self._started
        self._open = False
        self._thread.join(timeout=5)  # the next command on the server wakes it
        with suppress(Exception):
            self._monitor.__exit__(None, None, None)
        self._client.close()

    def _count(self) -> None:
        with suppress(Exception):  # the connection closes under it at the end
            for command in self._monitor.listen():
                if not self._open:
                    return
                text = command.get("command", "")
                if self.prefix not in text:
                    continue
                kind = next((k for part, k in self.KINDS.items() if part in text), "other")
                self.counts[kind] += 1

    def per_second(self) -> str:
        rate = {kind: count / self.seconds for kind, count in self.counts.items()}
        total = sum(rate.values())
        return " ".join(
            [f"cache_ops_per_s={total:.1f}"] + [f"{k}={v:.1f}" for k, v in rate.items()]
        )


@dataclass
class Loss:
    """One run through a worker's loss: what the client saw, and when."""

    signal: signal.Signals
    thread_id: str = field(default_factory=lambda: f"t-{uuid.uuid4().hex[:8]}")
    run_id: str = "run-lost"
    seen: list[Frame] = field(default_factory=list)
    tail: list[Frame] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    signalled_at: float = 0.0
    continued_at: float | None = None
    #: When a stopped worker's warning line first appeared in its log.
    fenced_at: float | None = None
    #: The thread's message rows as the take-over left them (before a stopped worker went on).
    rows_at_take_over: dict[str, Any] = field(default_factory=dict)

    @property
    def body(self) -> dict[str, Any]:
        return run_input(LONG_PROMPT, thread_id=self.thread_id, run_id=self.run_id)

    @property
    def last_seen(self) -> int:
        return max(_seq(frame_id) for frame_id, _ in self.seen if frame_id)

    def resumed_after(self) -> float:
        """Seconds from the signal to the resumed execution's first event at the client."""
        for (frame_id, _), arrival in zip(self.tail, self.arrivals, strict=True):
            if frame_id and _seq(frame_id) > EPOCH_STRIDE:
                return arrival - self.signalled_at
        raise AssertionError(f"the run was never resumed: {_types(self.tail)}")

    def next_after(self) -> float:
        """Seconds from the signal to the first event the client had not seen."""
        for (frame_id, _), arrival in zip(self.tail, self.arrivals, strict=True):
            if frame_id and _seq(frame_id) > self.last_seen:
                return arrival - self.signalled_at
        raise AssertionError(f"no new event reached the client: {_types(self.tail)}")


def _seq(frame_id: str) -> int:
    return int(frame_id.rpartition(":")[2])


def _types(frames: list[Frame]) -> list[str]:
    return [event["type"] for _, event in frames]


def _frames(stream: Stream) -> Iterator[Frame]:
    """``stream``'s frames one at a time, as they arrive."""
    while True:
        count = len(stream.frames)
        stream.read(1)
        if len(stream.frames) == count:
            return
        yield stream.frames[-1]


def _answer_words(frames: list[Frame]) -> int:
    types = _types(frames)
    if "TOOL_CALL_RESULT" not in types:
        return 0
    return types[types.index("TOOL_CALL_RESULT") :].count("TEXT_MESSAGE_CONTENT")


def _clockless(text: str) -> str:
    """``text`` without the demo answer's clock reading (it tells the time it was given)."""
    return re.sub(r"\d\d:\d\d:\d\d UTC", "hh:mm:ss UTC", text)


def _message_rows(database: str, thread_id: str) -> dict[str, Any]:
    """The thread's message rows as stored, by message id: every column a write changes."""
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT m.message_id, m.content, m.record, m.tool_calls, m.reasonings, m.status, "
            "m.run_id, m.wire, m.active, m.branch "
            "FROM django_pydantic_agent_store_storedmessage m "
            "JOIN django_pydantic_agent_store_storedconversation c ON c.id = m.conversation_id "
            "WHERE c.thread_id = %s",
            [thread_id],
        ).fetchall()
    return {row[0]: row[1:] for row in rows}


def _run_row(database: str, run_id: str) -> tuple[str, int, str, int]:
    """``(status, resumes, worker_id, last_seq)`` of the run's record."""
    with psycopg.connect(database) as conn:
        row = conn.execute(
            "SELECT status, resumes, worker_id, last_seq "
            "FROM django_pydantic_agent_store_storedagentrun WHERE run_id = %s",
            [run_id],
        ).fetchone()
    assert row is not None
    return row


def _lose_worker(
    loss: Loss, first: RunningServer, second: RunningServer, database: str
) -> dict[str, Any]:
    """Stream from worker 1, signal it, reattach on worker 2 and read to the end; a stopped
    worker 1 goes on (``SIGCONT``) during the resumed execution. Returns the stored thread."""
    with client_of(first) as (one, token), client_of(second) as (two, _):
        with one.stream(
            "POST", "/agent/", json=loss.body, headers={"X-CSRFToken": token}
        ) as response:
            assert response.status_code == 200
            for frame in _frames(Stream(response)):
                loss.seen.append(frame)
                if _answer_words(loss.seen) >= WORDS_BEFORE:
                    break
            loss.signalled_at = time.monotonic()
            os.kill(first.pid, loss.signal)
        # The page drops worker 1's stream and reattaches on worker 2 with the last id it saw.
        path = f"/agent/runs/{loss.thread_id}/{loss.run_id}/?after={loss.last_seen}"
        with two.stream("GET", path) as response:
            assert response.status_code == 200, response.read()
            for frame in _frames(Stream(response)):
                loss.tail.append(frame)
                loss.arrivals.append(time.monotonic())
                waiting = loss.continued_at is not None and loss.fenced_at is None
                if waiting and _fenced_lines(first.log):
                    loss.fenced_at = time.monotonic()
                if loss.signal == signal.SIGSTOP and loss.continued_at is None:
                    resumed = [e["type"] for i, e in loss.tail if i and _seq(i) > EPOCH_STRIDE]
                    if resumed.count("TEXT_MESSAGE_CONTENT") >= WORDS_BEFORE_SIGCONT:
                        loss.rows_at_take_over = _message_rows(database, loss.thread_id)
                        loss.continued_at = time.monotonic()
                        os.kill(first.pid, signal.SIGCONT)
        return wait_until_ended(two, loss.thread_id)


def _texts(events: list[dict[str, Any]]) -> list[str]:
    """Each text message's text (its clock reading masked), in order."""
    texts: dict[str, str] = {}
    for event in events:
        if event["type"] == "TEXT_MESSAGE_START":
            texts.setdefault(event["messageId"], "")
        elif event["type"] == "TEXT_MESSAGE_CONTENT":
            texts[event["messageId"]] = texts.get(event["messageId"], "") + event["delta"]
    return [_clockless(text) for text in texts.values()]


def _stream_problems(loss: Loss) -> list[str]:
    """Events the client lost or got twice across its two streams (none, when all is well)."""
    found = []
    seen_ids = [_seq(i) for i, _ in loss.seen if i]
    if seen_ids != list(range(1, len(seen_ids) + 1)):
        found.append(f"worker 1's stream is not numbered 1, 2, ...: {seen_ids}")
    types = _types(loss.tail)
    if _types(loss.seen).count("RUN_STARTED") != 1 or types.count("RUN_STARTED") != 1:
        found.append(f"RUN_STARTED not once per stream: {_types(loss.seen)} / {types}")
    if not types or types[-1] != "RUN_FINISHED" or "RUN_ERROR" in types:
        found.append(f"the reattach does not end with RUN_FINISHED: {types}")
    numbered = [_seq(i) for i, _ in loss.tail if i]
    old = [seq for seq in numbered if seq <= EPOCH_STRIDE]
    new = [seq for seq in numbered if seq > EPOCH_STRIDE]
    # What worker 1 relayed after the client's last id, then the resumed execution from its
    # start (its RUN_STARTED is the one the reattach sent already, without an id).
    if old != list(range(loss.last_seen + 1, loss.last_seen + 1 + len(old))):
        found.append(f"worker 1's relayed events are not the ones after {loss.last_seen}: {old}")
    start = EPOCH_STRIDE + (2 if loss.tail[0][0] is None else 1)
    if new != list(range(start, start + len(new))) or not new:
        found.append(f"the resumed execution is not numbered from {start}: {new[:5]}...")
    return found


def _check_thread(loss: Loss, stored: dict[str, Any]) -> None:
    """The stored thread: the cut answer, then the whole answer once; the client shows it."""
    events = [event for _, event in loss.tail]
    shown = apply_events([event for _, event in loss.seen + loss.tail], loss.body["messages"])
    assert visible(shown) == visible(stored["messages"])
    answers = [m for m in stored["messages"] if m["role"] == "assistant" and m.get("content")]
    assert [m["status"] for m in answers] == ["interrupted", "complete"], answers
    whole = _clockless(answers[-1]["content"])
    assert "Since you asked for a long answer" in whole
    assert _texts(events)[-1] == whole  # the resumed execution streamed the whole answer once
    assert whole.startswith(_clockless(answers[0]["content"]))
    # The clock tool ran once: the resumed execution went on from its stored result.
    assert [m["role"] for m in stored["messages"]].count("tool") == 1
    assert all(m["status"] == "complete" for m in stored["messages"] if m not in answers)


def _fenced_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if FENCED.search(line)]


def _figure(loss: Loss, **extra: Any) -> None:
    defaults = RunOptions()
    values = " ".join(f"{name}={value}" for name, value in extra.items())
    print(
        f"FIGURE example-worker-loss signal={loss.signal.name} seen={loss.last_seen} "
        f"to_next_event_s={loss.next_after():.2f} to_resumed_s={loss.resumed_after():.2f} "
        f"heartbeat_s={defaults.run_heartbeat_seconds:g} lease_s={defaults.run_lease_seconds:g} "
        f"sweep_s={defaults.sweep_interval_seconds:g} {values}".rstrip()
    )


@pytest.mark.timeout(300)
def test_a_killed_workers_run_goes_on_on_the_other_within_ten_seconds(
    workers: list[RunningServer],
    postgres_database: str,
    redis_url: str,
    cache_prefix: str,
    tmp_path: Path,
) -> None:
    first, second = workers
    loss = Loss(signal.SIGKILL)
    with CacheOps(redis_url, cache_prefix) as ops:
        stored = _lose_worker(loss, first, second, postgres_database)
    (tmp_path / "frames.json").write_text(json.dumps([loss.seen, loss.tail], indent=1))
    _figure(loss, run_s=f"{ops.seconds:.1f}", ops=ops.per_second())
    assert _stream_problems(loss) == []
    _check_thread(loss, stored)
    assert loss.resumed_after() <= CONTRACT_SECONDS
    status, resumes, worker_id, _ = _run_row(postgres_database, loss.run_id)
    assert (status, resumes) == ("complete", 1)
    assert f":{second.pid}:" in worker_id
    assert log_problems(second.log) == []


@pytest.mark.timeout(300)
def test_a_stopped_worker_comes_back_fenced_and_the_run_runs_once(
    workers: list[RunningServer], postgres_database: str, tmp_path: Path
) -> None:
    first, second = workers
    loss = Loss(signal.SIGSTOP)
    try:
        stored = _lose_worker(loss, first, second, postgres_database)
    finally:
        with suppress(ProcessLookupError):
            os.kill(first.pid, signal.SIGCONT)
    (tmp_path / "frames.json").write_text(json.dumps([loss.seen, loss.tail], indent=1))
    assert loss.continued_at is not None, _types(loss.tail)
    # Worker 1 finds its run taken over at its next beat (or refused write), and says so.
    deadline = time.monotonic() + 30
    while loss.fenced_at is None and time.monotonic() < deadline:
        if _fenced_lines(first.log):
            loss.fenced_at = time.monotonic()
        time.sleep(0.2)
    assert loss.fenced_at is not None, first.log.read_text()
    fenced_after = loss.fenced_at - loss.continued_at
    # It comes back whole: it answers requests again.
    assert httpx.get(f"{first.url}/accounts/login/", timeout=10).status_code == 200
    rows = _message_rows(postgres_database, loss.thread_id)
    _figure(loss, fenced_after_sigcont_s=f"{fenced_after:.2f}")
    assert _stream_problems(loss) == []
    _check_thread(loss, stored)
    assert loss.resumed_after() <= CONTRACT_SECONDS
    # Nothing of the first execution was written after the take-over: its rows are as the
    # take-over left them (only the resumed execution's rows came or changed since).
    first_execution = {event.get("messageId") for _, event in loss.seen} | {f"{loss.run_id}-user"}
    before = {k: v for k, v in loss.rows_at_take_over.items() if k in first_execution}
    assert before, loss.rows_at_take_over
    assert {k: rows[k] for k in before} == before
    status, resumes, worker_id, last_seq = _run_row(postgres_database, loss.run_id)
    assert (status, resumes) == ("complete", 1)
    assert f":{second.pid}:" in worker_id
    assert last_seq > EPOCH_STRIDE
    # One warning line on worker 1, no traceback on either.
    assert len(_fenced_lines(first.log)) == 1, first.log.read_text()
    assert log_problems(first.log) == []
    assert log_problems(second.log) == []
