"""A worker that stalls past its run's lease (its event loop stood still: SIGSTOP, a long
synchronous call) finds its run taken over by another worker when it comes back: it stops
the run without writing anything more, and the new execution alone ends it.

Two mounts on the same tables stand for the two workers: ``hasty/`` runs the turn and stalls
(its run's heartbeat is set a minute back, as a stalled worker leaves it), ``patient/`` takes
it over when the client reattaches there. The gated model then goes on in both.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone

from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.store.models import StoredAgentRun
from tests.agui.agents import GATE
from tests.agui.conftest import logged_in, run_body, sse_frames
from tests.support.transcript import apply_events, visible

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.agui.urls_drain"),
]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    cache.clear()
    GATE.reset()


async def _resumed(run_id: str) -> None:
    for _ in range(200):
        if await StoredAgentRun.objects.filter(run_id=run_id, resumes=1).aexists():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the run was not taken over")


async def test_a_stalled_worker_stops_its_taken_over_run_without_writing(
    alice: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with await logged_in(alice) as http:
        first = asyncio.ensure_future(
            http.post("/hasty/", json=run_body(thread_id="t-fence", run_id="r-fence"))
        )
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        old = timezone.now() - timedelta(seconds=60)
        await StoredAgentRun.objects.filter(run_id="r-fence").aupdate(heartbeat_at=old)
        tail = asyncio.ensure_future(http.get("/patient/runs/t-fence/r-fence/?after=2"))
        await _resumed("r-fence")
        GATE.released.set()  # the stalled worker's model goes on, and so does the new one's
        stalled, resumed = await asyncio.gather(first, tail)
        await RunCoordinator.wait_for_all_runs()
        thread = (await http.get("/patient/threads/t-fence/")).json()
    old_frames = sse_frames(stalled.text)
    new_frames = sse_frames(resumed.text)
    # The stalled worker's reader got no ending: it reattaches and finds the new execution.
    assert not [e for _, e in old_frames if e["type"] in ("RUN_FINISHED", "RUN_ERROR")]
    assert [e["type"] for _, e in new_frames][-1] == "RUN_FINISHED"
    run = await StoredAgentRun.objects.aget(run_id="r-fence")
    assert (run.status, run.resumes) == ("complete", 1)
    # Nothing the stalled execution streamed after the take-over was written: its cut answer
    # is as the take-over found it (interrupted), the new execution's answer is whole.
    answers = [(m.get("content"), m["status"]) for m in thread["messages"] if m["role"] != "user"]
    assert answers[-1] == ("Working done.", "complete")
    assert all(status == "interrupted" for _, status in answers[:-1])
    assert "Working done." not in [content for content, _ in answers[:-1]]
    assert visible(apply_events(e for _, e in old_frames + new_frames)) == visible(
        thread["messages"]
    )
    taken = [r for r in caplog.records if "taken over by another worker" in r.getMessage()]
    assert len(taken) == 1
    assert taken[0].exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
