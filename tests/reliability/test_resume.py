"""Deploys and crashes lose no answer: 50 runs drained (SIGTERM) and 50 killed (SIGKILL).

Two workers of the reliability site on PostgreSQL, with Redis as the cache. Each round starts
``RUNS_PER_ROUND`` runs on worker A; once every client has read into its answer, A is stopped:

- ``SIGTERM`` (a deploy): A drains for ``DRAIN`` seconds; a run that ends within it finishes
  there, the rest are handed over;
- ``SIGKILL`` (a crash): nothing is finalised; the runs are taken over once their lease passed.

Every client whose stream broke off reattaches on worker B with the last id it saw. A resumed
run is its next execution, numbered from ``EPOCH_STRIDE + 1``: the ids of the client's two
streams together must be unique and increasing, and contiguous within each execution (an
execution read from storage, its ``MESSAGES_SNAPSHOT`` standing for what the client missed,
excepted); the stream must end with ``RUN_FINISHED``; and what the client shows after both
streams (``tests/support/transcript.py``) must be the thread as worker B stores it, with the
whole answer. A new worker A serves the next round. Printed: runs drained (finished on A) and
resumed per deploy, the time from A's death to the first event of the resumed execution at
its client, and the events lost and duplicated (both 0).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import aclosing, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from django_pydantic_agent.chat_history.manager import epoch_base, epoch_of
from tests.reliability.project.agent import answer_words
from tests.reliability.support import (
    Frame,
    SSEConnection,
    Worker,
    log_problems,
    prepare_site,
    run_body,
    serve_site,
)
from tests.support.transcript import apply_events, visible

pytestmark = pytest.mark.reliability

RUNS_PER_ROUND = 10
ROUNDS = 5
DRAIN = 0.3
LEASE = 2.0
#: Answer words a client reads before its worker is stopped.
READ_BEFORE_STOP = 4


@pytest.fixture
def site(postgres_database: str, redis_url: str) -> tuple[str, dict[str, str]]:
    prepare_site(postgres_database)
    prefix = f"reliability-resume-{uuid.uuid4().hex[:8]}"
    env = {
        "RELIABILITY_REDIS_URL": redis_url,
        "RELIABILITY_CACHE_PREFIX": prefix,
        "RELIABILITY_DELTA_DELAY": "0.05",
        "RELIABILITY_RUN_HEARTBEAT": "0.5",
        "RELIABILITY_RUN_LEASE": str(LEASE),
        "RELIABILITY_SWEEP_SECONDS": "1",
        "RELIABILITY_DRAIN_SECONDS": str(DRAIN),
    }
    return postgres_database, env


@contextmanager
def _worker(database: str, log: Path, env: dict[str, str]) -> Iterator[Worker]:
    with serve_site(database, log, lifespan="on", **env) as worker:
        yield worker


async def _until_stopped(connection: SSEConnection, stop: asyncio.Event) -> list[Frame]:
    """Frames until the stream ends or breaks; ``stop`` is set once the answer is under way."""
    frames: list[Frame] = []
    words = 0
    try:
        async with aclosing(connection.frames()) as stream:
            async for frame in stream:
                frames.append(frame)
                if frame.type == "TOOL_CALL_RESULT":
                    words = 0
                elif frame.type == "TEXT_MESSAGE_CONTENT" and any(
                    f.type == "TOOL_CALL_RESULT" for f in frames
                ):
                    words += 1
                    if words == READ_BEFORE_STOP:
                        stop.set()
    except (asyncio.IncompleteReadError, ConnectionError, AssertionError):
        pass
    connection.drop(reset=True)
    return frames


async def _stored(b: Worker, run: str, user: str) -> dict[str, Any]:
    """The run's thread as worker ``b`` reads it once the run has ended."""
    async with httpx.AsyncClient(base_url=b.url, headers={"X-User": user}, timeout=30) as http:
        deadline = time.monotonic() + 30
        while True:
            answer = await http.get(f"/agent/threads/t-{run}/")
            assert answer.status_code == 200, answer.text
            thread: dict[str, Any] = answer.json()
            if thread["activeRun"] is None:
                return thread
            assert time.monotonic() < deadline, thread
            await asyncio.sleep(0.1)


async def _follow(
    b: Worker,
    run: str,
    user: str,
    first: asyncio.Future[list[Frame]],
    since: list[float],
) -> tuple[str, list[Frame], float | None, dict[str, Any]]:
    """A client's whole run: its stream on ``a`` and, once that broke off, its reattach on
    ``b`` with the last id it saw; ``(how it ended, every frame, seconds from a's death to
    the first event of the resumed execution, the thread as b stores it)``."""
    frames = await first
    if frames and frames[-1].type == "RUN_FINISHED":
        return "drained", frames, None, await _stored(b, run, user)
    after = max(f.seq for f in frames if f.seq is not None)
    path = f"/agent/runs/t-{run}/{run}/?after={after}"
    connection = await SSEConnection.open(b, "GET", path, user=user)
    assert await connection.read_head() == 200
    delay: float | None = None
    tail: list[Frame] = []
    async with aclosing(connection.frames()) as stream:
        async for frame in stream:
            resumed = frame.seq is not None and epoch_of(frame.seq) > 0
            if delay is None and (resumed or frame.type == "MESSAGES_SNAPSHOT"):
                delay = time.monotonic() - since[0]
            tail.append(frame)
    await connection.close()
    types = [f.type for f in tail]
    assert types[-1] == "RUN_FINISHED", types
    assert types.count("RUN_STARTED") == 1, types
    # The resumed execution's own snapshot carries an id; storage's (the run ended before the
    # reattach) does not.
    from_storage = any(f.type == "MESSAGES_SNAPSHOT" and f.seq is None for f in tail)
    how = "snapshot" if from_storage else "resumed"
    return how, frames + tail, delay, await _stored(b, run, user)


def _expected(run: str) -> str:
    return "".join(answer_words(f"m{run}"))


def _tally(run: str, frames: list[Frame], stored: dict[str, Any]) -> tuple[int, int]:
    """``(lost, duplicated)`` event ids of a run's frames; checks that the ids increase and
    that the client shows exactly the stored thread, with the whole answer."""
    ids = [f.seq for f in frames if f.seq is not None]
    assert ids == sorted(ids), ids  # increasing (an id twice counts as duplicated)
    numbered = ids
    snapshots = [f for f in frames if f.type == "MESSAGES_SNAPSHOT" and f.seq is None]
    if snapshots:
        # Read from storage: the snapshot stands for the events between the last id the
        # client saw and the run's terminal event.
        cut = frames.index(snapshots[-1])
        numbered = [f.seq for f in frames[:cut] if f.seq is not None]
    lost = 0
    for epoch, group in itertools.groupby(numbered, key=epoch_of):
        seqs = set(group)
        # A stream that goes on into the run's next execution skips that execution's own
        # RUN_STARTED (one per stream): its numbering then starts one later.
        first = epoch_base(epoch) + (2 if epoch and min(seqs) == epoch_base(epoch) + 2 else 1)
        lost += len(set(range(first, max(seqs) + 1)) - seqs)
    # The client shows the message it posted, then what the events build.
    posted = run_body(f"t-{run}", run, f"m{run}")["messages"]
    shown = visible(apply_events([f.event for f in frames], posted))
    assert shown == visible(stored["messages"]), (run, shown, visible(stored["messages"]))
    answers = [m for m in stored["messages"] if m["role"] == "assistant"]
    assert answers[-1]["content"] == _expected(run), answers[-1]
    return lost, len(ids) - len(set(ids))


async def _one_round(
    a: Worker, b: Worker, signal_name: str, round_no: int
) -> tuple[dict[str, int], list[float], int, int]:
    """Stop ``a`` mid-answer; ``(runs by how they ended, seconds from the death to the
    first new event, events lost, events duplicated)``."""
    runs = [f"{signal_name}-r{round_no}-{n}" for n in range(RUNS_PER_ROUND)]
    ready = [asyncio.Event() for _ in runs]
    since = [0.0]
    follows = []
    for index, run in enumerate(runs):
        user = "alice" if index % 2 else "bob"
        body = run_body(f"t-{run}", run, f"m{run}")
        connection = await SSEConnection.open(a, "POST", "/agent/", user=user, body=body)
        assert await connection.read_head() == 200
        first = asyncio.ensure_future(_until_stopped(connection, ready[index]))
        follows.append(asyncio.ensure_future(_follow(b, run, user, first, since)))
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready)), timeout=60)
    since[0] = time.monotonic()
    if signal_name == "SIGKILL":
        await asyncio.to_thread(a.kill)
    else:
        a.terminate()
    ended = await asyncio.wait_for(asyncio.gather(*follows), timeout=120)
    counts = {"drained": 0, "resumed": 0, "snapshot": 0}
    delays = [delay for _, _, delay, _ in ended if delay is not None]
    lost = duplicated = 0
    for run, (how, frames, _, stored) in zip(runs, ended, strict=True):
        counts[how] += 1
        gone, twice = _tally(run, frames, stored)
        lost += gone
        duplicated += twice
    return counts, delays, lost, duplicated


@pytest.mark.timeout(400)
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
async def test_runs_survive_their_worker(
    signal_name: str, site: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    database, env = site
    per_deploy: list[dict[str, int]] = []
    delays: list[float] = []
    lost = duplicated = 0
    with _worker(database, tmp_path / "b.log", env) as b:
        for round_no in range(ROUNDS):
            log = tmp_path / f"a-{round_no}.log"
            with _worker(database, log, env) as a:
                counts, waited, gone, twice = await _one_round(a, b, signal_name, round_no)
                await asyncio.to_thread(a.process.wait, 30)
            per_deploy.append(counts)
            delays += waited
            lost += gone
            duplicated += twice
            assert log_problems(log) == []
        assert log_problems(b.log) == []
    runs = ROUNDS * RUNS_PER_ROUND
    assert sum(sum(c.values()) for c in per_deploy) == runs
    assert (lost, duplicated) == (0, 0)
    print(
        f"FIGURE resume signal={signal_name} runs={runs} deploys={ROUNDS} "
        f"finished_on_a_per_deploy={[c['drained'] for c in per_deploy]} "
        f"resumed_per_deploy={[c['resumed'] + c['snapshot'] for c in per_deploy]} "
        f"ended_before_reattach={sum(c['snapshot'] for c in per_deploy)} "
        f"death_to_first_event_s_median={statistics.median(delays) if delays else 0:.2f} "
        f"max={max(delays, default=0):.2f} lease_s={LEASE} drain_s={DRAIN} "
        f"events_lost={lost} events_duplicated={duplicated}"
    )
