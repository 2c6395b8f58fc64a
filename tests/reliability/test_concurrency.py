"""50 concurrent runs over 10 threads and 2 users, on SQLite and on PostgreSQL.

One uvicorn worker serves the reliability project. Alice and Bob each use the thread ids
``c-0`` .. ``c-4`` (10 threads: the same ids, two owners), five runs per thread, all 50 sent
at once, each after a seeded random pause of up to three seconds, so some find their thread busy
and some find it free again. Then:

- no 5xx, ever: each run is a 200 stream ending with ``RUN_FINISHED``, or a 409 JSON body
  saying the thread is busy (``concurrent_runs="reject"``); accepted + rejected = 50;
- no lost turn: every accepted run's user message and answer are stored on its thread, in
  the order the runs started, and every run record is ``complete``; a rejected run left
  nothing;
- no cross-talk: each answer names its own run's marker, on its own owner's thread, and each
  owner lists only its own threads.

SQLite runs with the example project's options (``IMMEDIATE`` transactions, a 20 s timeout,
WAL); PostgreSQL is a fresh database from ``postgres_database`` (a failure under ``CI`` when
it is missing, never a skip).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability.project.agent import answer_words
from tests.reliability.support import (
    USERS,
    Worker,
    log_problems,
    prepare_site,
    run_body,
    serve_site,
    stored_state,
)

pytestmark = pytest.mark.reliability

SEED = 20261102
RUNS = 50
THREAD_IDS = [f"c-{n}" for n in range(5)]
MAX_PAUSE = 3.0


@dataclass(frozen=True)
class Run:
    index: int
    user: str
    thread_id: str

    @property
    def run_id(self) -> str:
        return f"run-{self.index}"

    @property
    def marker(self) -> str:
        return f"{self.user}-{self.thread_id}-{self.index}"


@dataclass
class Answer:
    run: Run
    status: int
    content_type: str
    body: str

    def events(self) -> list[dict[str, Any]]:
        frames = [f for f in self.body.split("\n\n") if f.strip()]
        data = [
            "\n".join(line[5:].lstrip() for line in f.split("\n") if line.startswith("data:"))
            for f in frames
        ]
        return [json.loads(d) for d in data if d]


def planned_runs() -> list[Run]:
    return [Run(i, USERS[i % 2], THREAD_IDS[(i // 2) % len(THREAD_IDS)]) for i in range(RUNS)]


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("postgres_database")
        return url
    return str(tmp_path / "concurrency.sqlite3")


@pytest.fixture
def worker(database: str, tmp_path: Path) -> Iterator[Worker]:
    prepare_site(database)
    with serve_site(database, tmp_path / "worker.log") as served:
        yield served


async def send(http: httpx.AsyncClient, run: Run, pause: float) -> Answer:
    await asyncio.sleep(pause)
    response = await http.post(
        "/agent/",
        json=run_body(run.thread_id, run.run_id, run.marker),
        headers={"X-User": run.user, "Accept": "text/event-stream"},
    )
    return Answer(
        run, response.status_code, response.headers.get("content-type", ""), response.text
    )


def _answer_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


async def test_50_concurrent_runs_lose_nothing_mix_nothing_and_keep_the_policy(
    worker: Worker, database: str
) -> None:
    backend = "postgresql" if "://" in database else "sqlite"
    runs = planned_runs()
    rng = random.Random(SEED)
    pauses = [rng.uniform(0, MAX_PAUSE) for _ in runs]
    limits = httpx.Limits(max_connections=RUNS, max_keepalive_connections=RUNS)
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=worker.url, timeout=60, limits=limits) as http:
        answers = await asyncio.gather(
            *(send(http, r, p) for r, p in zip(runs, pauses, strict=True))
        )
    elapsed = time.monotonic() - started

    statuses = Counter(answer.status for answer in answers)
    assert set(statuses) <= {200, 409}, statuses
    accepted = [a for a in answers if a.status == 200]
    rejected = [a for a in answers if a.status == 409]
    assert len(accepted) + len(rejected) == RUNS
    for answer in rejected:
        assert answer.content_type == "application/json"
        assert f"Thread {answer.run.thread_id!r} is running run" in json.loads(answer.body)["error"]
    for answer in accepted:
        events = answer.events()
        assert answer.content_type.startswith("text/event-stream")
        assert [events[0]["type"], events[-1]["type"]] == ["RUN_STARTED", "RUN_FINISHED"]
        assert _answer_text(events).endswith("".join(answer_words(answer.run.marker)))

    state = stored_state(database)
    records = {record["run_id"]: record for record in state["runs"]}
    assert sorted(records) == sorted(a.run.run_id for a in accepted)  # a 409 left no record
    assert {record["status"] for record in records.values()} == {"complete"}
    owners = {
        user: {records[a.run.run_id]["owner_id"] for a in accepted if a.run.user == user}
        for user in USERS
    }
    assert all(len(ids) == 1 for ids in owners.values()), owners
    assert owners[USERS[0]] != owners[USERS[1]]
    order = [record["run_id"] for record in state["runs"]]  # by start time
    lost = crossed = 0
    async with httpx.AsyncClient(base_url=worker.url, timeout=30) as http:
        for user in USERS:
            mine = [a.run for a in accepted if a.run.user == user]
            listing = (await http.get("/agent/threads/", headers={"X-User": user})).json()
            assert sorted(t["threadId"] for t in listing["threads"]) == sorted(
                {run.thread_id for run in mine}
            )
            for thread_id in sorted({run.thread_id for run in mine}):
                expected = sorted(
                    (run for run in mine if run.thread_id == thread_id),
                    key=lambda run: order.index(run.run_id),
                )
                answer = await http.get(f"/agent/threads/{thread_id}/", headers={"X-User": user})
                assert answer.status_code == 200, answer.text
                messages = answer.json()["messages"]
                turns = [messages[i : i + 4] for i in range(0, len(messages), 4)]
                lost += len(expected) - len(turns)
                assert [m["role"] for m in messages] == [
                    "user",
                    "assistant",
                    "tool",
                    "assistant",
                ] * len(expected)
                for run, turn in zip(expected, turns, strict=True):
                    crossed += {m["runId"] for m in turn} != {run.run_id}
                    assert turn[0]["id"] == f"{run.run_id}-user"
                    assert turn[0]["content"] == f"ask {run.marker}"
                    assert turn[-1]["content"] == "".join(answer_words(run.marker))
                    assert {m["status"] for m in turn} == {"complete"}
    assert (lost, crossed) == (0, 0)
    assert log_problems(worker.log) == []
    print(
        f"FIGURE concurrency backend={backend} runs={RUNS} threads={2 * len(THREAD_IDS)} "
        f"users={len(USERS)} accepted={len(accepted)} rejected={len(rejected)} lost_turns={lost} "
        f"cross_talk={crossed} status_5xx=0 seconds={elapsed:.1f}"
    )
