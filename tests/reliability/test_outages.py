"""PostgreSQL and Redis restarted under the two-worker deployment: no run lost, no 500.

The deployment of docs/deployment.md (two uvicorn workers of the example project, one
PostgreSQL, Redis as Django's cache), on a PostgreSQL and a Redis of the test's own
(tests/reliability/servers.py), so restarting them cuts nobody else. Clients stream long
answers from both workers; once each has read a few events:

- the database stops, the routes are asked for threads (a JSON 503 with ``Retry-After``, on
  both workers), and it starts again: every stream goes on to ``RUN_FINISHED``, with every
  sequence number once, and every stored answer is the streamed one, complete, stored once;
- the cache stops: the runs go on streaming on their worker; a reattach and a cancel on the
  other worker are a JSON 503; it starts again, empty: the reattach then answers to the end,
  and the cancel stops its run.

No worker logs a traceback. Each test prints its FIGURE: runs lost over the restart.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.e2e.test_workers import LONG_PROMPT, Stream, client_of, wait_until_ended
from tests.example_project.support import RunningServer, run_input, serve_example_workers
from tests.reliability.servers import OwnPostgres, OwnRedis, own_postgres, own_redis

pytestmark = pytest.mark.reliability

#: Runs streaming across a restart, half on each worker (the cache test: all on worker 1).
RUNS = 6
#: Events each client reads before the restart.
READ_BEFORE = 10
#: At least how long the database or the cache stays down (the answers last a few seconds).
DOWN_FOR = 1.5


@dataclass(frozen=True)
class Deployment:
    postgres: OwnPostgres
    redis: OwnRedis
    workers: list[RunningServer]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    workdir = tmp_path_factory.mktemp("outages")
    with (
        own_postgres() as postgres,
        own_redis(workdir) as redis,
        serve_example_workers(
            workdir,
            database_url=postgres.url,
            count=2,
            REDIS_URL=redis.url,
            DEMO_WORD_DELAY="0.03",  # a long answer lasts a few seconds
            AGENT_RUN_HEARTBEAT_SECONDS="0.2",
        ) as workers,
    ):
        yield Deployment(postgres, redis, workers)
        for worker in workers:
            log = worker.log.read_text()
            assert "Traceback" not in log, log
            assert " 500 " not in log, log


@dataclass
class Streamed:
    thread_id: str
    run_id: str
    frames: list[tuple[str | None, dict[str, Any]]]
    stored: dict[str, Any]


def runs_named(prefix: str) -> list[tuple[str, str]]:
    """``RUNS`` fresh ``(thread_id, run_id)`` pairs."""
    tag = uuid.uuid4().hex[:6]
    return [(f"t-{prefix}{n}-{tag}", f"run-{prefix}{n}") for n in range(RUNS)]


def stream_runs(
    workers: list[RunningServer], runs: list[tuple[str, str]], during: Callable[[], None]
) -> list[Streamed]:
    """Stream one long answer per run (on ``workers`` in turn); once each client has read
    ``READ_BEFORE`` events, call ``during()``; then read every stream to its end."""
    started = [threading.Event() for _ in runs]

    def one(index: int) -> Streamed:
        thread_id, run_id = runs[index]
        body = run_input(LONG_PROMPT, thread_id=thread_id, run_id=run_id)
        try:
            with client_of(workers[index % len(workers)]) as (http, token):
                headers = {"X-CSRFToken": token}
                with http.stream("POST", "/agent/", json=body, headers=headers) as response:
                    assert response.status_code == 200, response.read()
                    stream = Stream(response)
                    stream.read(READ_BEFORE)
                    started[index].set()
                    frames = stream.read()
                stored = wait_until_ended(http, thread_id)
        finally:
            started[index].set()
        return Streamed(thread_id, run_id, frames, stored)

    with ThreadPoolExecutor(len(runs)) as pool:
        futures = [pool.submit(one, index) for index in range(len(runs))]
        for event in started:
            assert event.wait(60)
        during()
        return [future.result(timeout=180) for future in futures]


def texts_of(events: list[dict[str, Any]]) -> dict[str, str]:
    """Each streamed text message's id and its text."""
    texts: dict[str, str] = {}
    for event in events:
        if event["type"] == "TEXT_MESSAGE_START":
            texts[event["messageId"]] = ""
        elif event["type"] == "TEXT_MESSAGE_CONTENT":
            texts[event["messageId"]] += event["delta"]
    return texts


def lost_runs(results: list[Streamed]) -> list[str]:
    """The runs whose client or store did not get the whole answer exactly once, and why."""
    lost = []
    for result in results:
        ids = [frame_id for frame_id, _ in result.frames]
        events = [event for _, event in result.frames]
        messages = result.stored["messages"]
        stored = {m["id"]: m for m in messages}
        texts = texts_of(events)
        problems = {
            "a gap or a duplicate in the event ids": ids
            != [f"{result.run_id}:{seq}" for seq in range(1, len(ids) + 1)],
            f"the stream ended with {events[-1]['type']}": events[-1]["type"] != "RUN_FINISHED",
            "a message stored twice": len(stored) != len(messages),
            "a streamed text stored otherwise, or not at all": any(
                message_id not in stored or (stored[message_id].get("content") or "") != text
                for message_id, text in texts.items()
            ),
            f"the answer was stored {messages[-1].get('status')}": messages[-1].get("status")
            != "complete",
        }
        lost += [f"{result.run_id}: {problem}" for problem, found in problems.items() if found]
    roles = {tuple(m["role"] for m in result.stored["messages"]) for result in results}
    if len(roles) > 1:  # one prompt, one agent: every thread holds the same messages
        lost.append(f"the threads hold different messages: {sorted(roles)}")
    return lost


def unavailable(response: httpx.Response, backend: str) -> None:
    assert response.status_code == 503, response.text
    assert response.json() == {"error": f"{backend} is unavailable right now; retry in a moment."}
    assert response.headers["Retry-After"] == "1"


def test_no_run_is_lost_over_a_database_restart(deployment: Deployment) -> None:
    probes = [client_of(worker) for worker in deployment.workers]
    clients = [probe.__enter__()[0] for probe in probes]  # logged in before the outage
    answers: list[httpx.Response] = []
    outage: list[float] = []

    def restart() -> None:
        began = time.monotonic()
        deployment.postgres.stop()
        answers.extend(http.get("/agent/threads/") for http in clients)
        time.sleep(DOWN_FOR)  # the answers go on streaming meanwhile
        deployment.postgres.start()
        outage.append(time.monotonic() - began)

    try:
        results = stream_runs(deployment.workers, runs_named("db"), restart)
        after = [http.get("/agent/threads/") for http in clients]
    finally:
        for probe in probes:
            probe.__exit__(None, None, None)
    for answer in answers:
        unavailable(answer, "The database")
    assert [answer.status_code for answer in after] == [200, 200]
    lost = lost_runs(results)
    assert texts_of([event for _, event in results[0].frames]), "the answers have text"
    events = sum(len(result.frames) for result in results)
    print(
        f"FIGURE runs lost over a database restart: {len(lost)} of {RUNS} "
        f"({events} events streamed, none lost or twice; database down {outage[0]:.1f} s)"
    )
    assert lost == []


def test_no_run_is_lost_over_a_cache_restart(deployment: Deployment) -> None:
    first, second = deployment.workers
    runs = runs_named("cache")
    followed, victim = runs[0], runs[-1]  # reattached, and cancelled, from worker 2
    answers: dict[str, list[httpx.Response]] = {"reattach": [], "cancel": []}
    outage: list[float] = []

    with client_of(second) as (two, token):

        def reattach() -> httpx.Response:
            thread_id, run_id = followed
            with two.stream("GET", f"/agent/runs/{thread_id}/{run_id}/?after=3") as response:
                response.read()
                return response

        def cancel() -> httpx.Response:
            thread_id, run_id = victim
            return two.post(
                f"/agent/runs/{thread_id}/{run_id}/cancel/", headers={"X-CSRFToken": token}
            )

        def restart() -> None:
            began = time.monotonic()
            deployment.redis.stop()
            answers["reattach"].append(reattach())
            answers["cancel"].append(cancel())
            time.sleep(DOWN_FOR)  # the answers go on streaming meanwhile
            deployment.redis.start()
            outage.append(time.monotonic() - began)
            # Back, and empty. A pooled connection the restart cut may fail once more.
            # The cancel first: the reattach reads its run to the end.
            for kind, call in (("cancel", cancel), ("reattach", reattach)):
                deadline = time.monotonic() + 10
                while answers[kind][-1].status_code == 503 and time.monotonic() < deadline:
                    time.sleep(0.1)
                    answers[kind].append(call())

        results = stream_runs([first], runs, restart)
    for kind in ("reattach", "cancel"):
        unavailable(answers[kind][0], "The cache")
        assert {answer.status_code for answer in answers[kind][:-1]} == {503}
    assert answers["reattach"][-1].status_code == 200
    assert Stream(answers["reattach"][-1]).read()[-1][1]["type"] == "RUN_FINISHED"
    assert answers["cancel"][-1].status_code == 202
    [cancelled] = [result for result in results if result.run_id == victim[1]]
    assert cancelled.frames[-1][1].get("outcome") == {"type": "cancelled"}
    assert cancelled.stored["messages"][-1]["status"] == "interrupted"
    completed = [result for result in results if result.run_id != victim[1]]
    lost = lost_runs(completed)
    print(
        f"FIGURE runs lost over a cache restart: {len(lost)} of {len(completed)} "
        f"(one more cancelled from the other worker once the cache was back; cache down "
        f"{outage[0]:.1f} s)"
    )
    assert lost == []
