"""Two uvicorn workers spend one user's daily budget at once, on PostgreSQL and SQLite.

Each worker serves one client that sends runs one after another (each run: two model
responses, a tool call and an answer, priced ``SPEND_PRICE`` each) until it is refused. Then:

- every refusal is the JSON 429 ``BUDGET_EXCEEDED`` with the next UTC midnight, or a
  ``RUN_ERROR`` ``BUDGET_EXCEEDED`` for a run the other worker's spending stopped midway;
- no increment was lost: the counter holds exactly the responses the runs received (two per
  finished run, one per run stopped midway), each at its price;
- the overshoot is at most one response's price (two requests in flight, each checked before
  it is sent: both pass only below the ceiling);
- another user's budget is untouched.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from tests.reliability.project.prices import SPEND_BUDGET, SPEND_PRICE
from tests.reliability.support import (
    Worker,
    log_problems,
    prepare_site,
    run_body,
    serve_site,
    stored_state,
)

pytestmark = pytest.mark.reliability

MAX_RUNS = 20  # per worker: far more than the budget allows


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("postgres_database")
        return url
    return str(tmp_path / "spend.sqlite3")


@pytest.fixture
def workers(database: str, tmp_path: Path) -> Iterator[tuple[Worker, Worker]]:
    prepare_site(database)
    with (
        serve_site(database, tmp_path / "one.log") as one,
        serve_site(database, tmp_path / "two.log") as two,
    ):
        yield one, two


async def spend_until_refused(worker: Worker, name: str) -> list[tuple[int, dict | list]]:
    """Runs on ``worker`` as alice, one at a time, until one is refused; each answer."""
    answers: list[tuple[int, dict | list]] = []
    async with httpx.AsyncClient(base_url=worker.url, timeout=60) as http:
        for index in range(MAX_RUNS):
            run_id = f"{name}-{index}"
            response = await http.post(
                "/spend-agent/",
                json=run_body(run_id, run_id, run_id),
                headers={"X-User": "alice", "Accept": "text/event-stream"},
            )
            if response.status_code == 429:
                answers.append((429, response.json()))
                return answers
            frames = [f for f in response.text.split("\n\n") if "data:" in f]
            events = [json.loads(f.split("data:", 1)[1]) for f in frames]
            answers.append((response.status_code, events))
            if events[-1]["type"] == "RUN_ERROR":
                return answers
    return answers


async def test_two_workers_overshoot_a_shared_daily_budget_by_at_most_one_response(
    workers: tuple[Worker, Worker], database: str
) -> None:
    one, two = workers
    first, second = await asyncio.gather(
        spend_until_refused(one, "one"), spend_until_refused(two, "two")
    )

    midnight = datetime.now(UTC).date() + timedelta(days=1)
    resets = datetime(midnight.year, midnight.month, midnight.day, tzinfo=UTC).isoformat()
    finished = stopped = 0
    for answers in (first, second):
        last_status, last = answers[-1]
        assert len(answers) < MAX_RUNS, "the budget never stopped this worker"
        for status, body in answers[:-1]:
            assert status == 200
            assert isinstance(body, list)
            assert body[-1]["type"] == "RUN_FINISHED"
            finished += 1
        if last_status == 429:
            assert isinstance(last, dict)
            assert (last["code"], last["budget"], last["resetsAt"]) == (
                "BUDGET_EXCEEDED",
                "daily",
                resets,
            )
        else:
            assert isinstance(last, list)
            assert (last[-1]["type"], last[-1]["code"]) == ("RUN_ERROR", "BUDGET_EXCEEDED")
            assert resets in last[-1]["message"]
            stopped += 1

    state = stored_state(database)
    (counter,) = state["spend"]
    assert counter["key"].startswith("daily|day|u-")
    spent = Decimal(counter["usd_nanos"]) / 10**9
    # No lost increment: every response the runs received is counted, once.
    assert counter["requests"] == 2 * finished + stopped
    assert spent == counter["requests"] * SPEND_PRICE
    overshoot = spent - SPEND_BUDGET
    assert Decimal(0) <= overshoot <= SPEND_PRICE
    assert {run["status"] for run in state["runs"]} <= {"complete", "errored"}
    async with httpx.AsyncClient(base_url=one.url, timeout=30) as http:
        bob = (await http.get("/spend-agent/usage/", headers={"X-User": "bob"})).json()
        alice = (await http.get("/spend-agent/usage/", headers={"X-User": "alice"})).json()
    assert bob["budgets"][0]["spentUsd"] == "0"
    assert alice["budgets"][0]["exhausted"] is True
    # The ledger holds every run that ended: those that finished, and those the budget stopped
    # after their first response (a stopped run records the usage it reached).
    assert alice["total"]["runs"] == finished + stopped
    assert log_problems(one.log) == log_problems(two.log) == []
    backend = "postgresql" if "://" in database else "sqlite"
    print(
        f"FIGURE spend backend={backend} workers=2 budget={SPEND_BUDGET} price={SPEND_PRICE} "
        f"finished={finished} stopped_midway={stopped} spent={spent} overshoot={overshoot}"
    )
