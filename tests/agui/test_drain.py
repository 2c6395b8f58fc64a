"""A worker's graceful drain: no new runs (503 + Retry-After), the running ones finish within
``drain_seconds``, the rest are handed over; the lifespan and the signal hook that start it."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest
from django.core.cache import cache

from django_pydantic_agent.agui import BodyLimitMiddleware, DrainReport
from django_pydantic_agent.agui.drain import (
    DRAIN_RETRY_AFTER_SECONDS,
    DRAINING,
    install_signal_hook,
)
from django_pydantic_agent.contrib.store.models import StoredAgentRun
from django_pydantic_agent.contrib.store.runs import SWEPT_ERROR, sweep_runs
from django_pydantic_agent.persistence.runs import HANDED_OVER_HEARTBEAT
from tests.agui.agents import GATE
from tests.agui.conftest import asgi_app, logged_in, run_body, sse_frames
from tests.agui.urls_drain import hasty, patient, stateless

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.agui.urls_drain"),
]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    """No sweep lease or gate left by another test (``tests/conftest.py`` ends the drains)."""
    cache.clear()
    GATE.reset()


def _ids(run_id: str, count: int) -> list[str | None]:
    return [f"{run_id}:{seq}" for seq in range(1, count + 1)]


async def _stored_run(run_id: str) -> StoredAgentRun:
    return await StoredAgentRun.objects.aget(run_id=run_id)


async def _thread(http: Any, mount: str, thread_id: str) -> dict[str, Any]:
    response = await http.get(f"/{mount}/threads/{thread_id}/")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_a_draining_mount_answers_a_new_run_with_a_json_503_and_retry_after(
    alice: Any,
) -> None:
    assert await patient.drain() == DrainReport()  # nothing was running
    async with await logged_in(alice) as http:
        for mount in ("patient", "stateless"):
            if mount == "stateless":
                stateless.begin_drain()
            refused = await http.post(f"/{mount}/", json=run_body(thread_id="t-refused"))
            assert refused.status_code == 503
            assert refused.json() == {"error": DRAINING}
            assert refused.headers["Retry-After"] == str(DRAIN_RETRY_AFTER_SECONDS)
        # Everything else still answers: the thread list, and nothing was started or stored.
        listed = await http.get("/patient/threads/")
        assert listed.status_code == 200
        assert listed.json()["threads"] == []
    assert await StoredAgentRun.objects.acount() == 0
    assert patient.draining
    assert stateless.draining
    assert not hasty.draining


async def test_a_run_that_ends_within_drain_seconds_finishes_here_and_streams_to_its_end(
    alice: Any,
) -> None:
    async with await logged_in(alice) as http:
        streaming = asyncio.ensure_future(
            http.post("/patient/", json=run_body(thread_id="t-drain", run_id="r-drain"))
        )
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        draining = asyncio.ensure_future(patient.drain())
        await asyncio.sleep(0.05)
        refused = await http.post("/patient/", json=run_body(thread_id="t-new", run_id="r-new"))
        assert refused.status_code == 503
        GATE.released.set()  # the model goes on, well within the drain's 5 s
        report = await asyncio.wait_for(draining, timeout=10)
        response = await streaming
        thread = await _thread(http, "patient", "t-drain")
    assert report == DrainReport(finished=1, handed_over=0)
    frames = sse_frames(response.text)
    assert frames[-1][1]["type"] == "RUN_FINISHED"
    assert [frame_id for frame_id, _ in frames] == _ids("r-drain", len(frames))
    assert (await _stored_run("r-drain")).status == "complete"
    assert thread["messages"][-1]["content"] == "Working done."
    assert thread["messages"][-1]["status"] == "complete"


async def test_a_run_outlasting_the_drain_is_handed_over_with_its_partial_answer_kept(
    alice: Any,
) -> None:
    async with await logged_in(alice) as http:
        streaming = asyncio.ensure_future(
            http.post("/hasty/", json=run_body(thread_id="t-over", run_id="r-over"))
        )
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        report = await asyncio.wait_for(hasty.drain(), timeout=20)
        response = await streaming
        thread = await _thread(http, "hasty", "t-over")
    assert report == DrainReport(finished=0, handed_over=1)
    *frames, (closing_id, closing) = sse_frames(response.text)
    # The reader's stream ends where the run stopped here: the open message closed (without
    # an id: it is no event of the run), no terminal event, no cancel, and every event of the
    # run numbered in order (a reattach elsewhere goes on from the last).
    assert (closing_id, closing["type"]) == (None, "TEXT_MESSAGE_END")
    assert frames[-1][1]["type"] == "TEXT_MESSAGE_CONTENT"
    assert [frame_id for frame_id, _ in frames] == _ids("r-over", len(frames))
    run = await _stored_run("r-over")
    # Left to the next sweep of another worker: still running, with a heartbeat older than
    # any lease, no worker, and the sequence number the stream reached.
    assert run.status == "running"
    assert run.heartbeat_at == HANDED_OVER_HEARTBEAT
    assert run.worker_id == ""
    assert run.last_seq == len(frames)
    answer = thread["messages"][-1]
    assert answer["role"] == "assistant"
    assert answer["content"] == "Working "
    assert answer["status"] == "interrupted"
    assert thread["activeRun"] == {"runId": "r-over", "lastSeq": len(frames)}
    # Any worker's next sweep takes it (today: ends it errored), however short its lease.
    swept = await asyncio.to_thread(sweep_runs, lease=3600)
    assert [record.run_id for record in swept] == ["r-over"]
    assert (await _stored_run("r-over")).error == SWEPT_ERROR


async def test_the_lifespan_is_answered_and_its_shutdown_drains_every_mount() -> None:
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[dict[str, Any]] = []
    states: list[bool] = []

    async def receive() -> dict[str, Any]:
        message = next(messages)
        if message["type"] == "lifespan.shutdown":
            states.append(patient.draining)
        return message

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        await BodyLimitMiddleware(asgi_app())({"type": "lifespan"}, receive, send)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert sent == [{"type": "lifespan.startup.complete"}, {"type": "lifespan.shutdown.complete"}]
    assert states == [False]  # it took runs until the shutdown...
    assert patient.draining
    assert hasty.draining
    assert stateless.draining


async def test_the_lifespan_can_be_left_to_the_wrapped_application() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    await BodyLimitMiddleware(app, lifespan=False)({"type": "lifespan"}, None, None)
    assert seen == ["lifespan"]


async def test_sigterm_begins_the_drain_at_once_then_calls_the_servers_own_handler() -> None:
    calls: list[int] = []

    def servers_handler(sig: int, frame: Any) -> None:
        calls.append(sig)

    previous = signal.signal(signal.SIGTERM, servers_handler)
    previous_int = signal.getsignal(signal.SIGINT)
    try:
        assert install_signal_hook() is True
        signal.raise_signal(signal.SIGTERM)
        await asyncio.sleep(0.05)  # the drain begins on the loop, right after the signal
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    assert calls == [signal.SIGTERM]
    assert patient.draining
    assert hasty.draining
    await asyncio.gather(patient.drain(), hasty.drain())  # the drains it began are done


async def test_the_signal_hook_needs_the_main_thread() -> None:
    assert await asyncio.to_thread(lambda: install_signal_hook()) is False
