"""A thread whose run has ended on the wire but is still persisting is not busy for long: the
next run waits for the record instead of answering 409."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.agui.conftest import logged_in, run_body, sse_events
from tests.agui.urls_sweeper import held_runs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.agui.urls_sweeper"),
]


async def test_the_next_run_waits_for_the_last_runs_record_instead_of_a_409(alice: Any) -> None:
    held_runs.release = asyncio.Event()
    held_runs.held = asyncio.Event()
    async with await logged_in(alice) as http:
        first = await http.post("/slow-finish/", json=run_body(run_id="r1"))
        assert sse_events(first.text)[-1]["type"] == "RUN_FINISHED"
        # The client has read RUN_FINISHED; the run's record is not finished yet.
        await asyncio.wait_for(held_runs.held.wait(), timeout=10)
        second = asyncio.ensure_future(http.post("/slow-finish/", json=run_body(run_id="r2")))
        await asyncio.sleep(0.2)
        assert not second.done()  # waiting for r1's record, not refused
        held_runs.release.set()
        response = await asyncio.wait_for(second, timeout=20)
    assert response.status_code == 200, response.text
    assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
    r1 = await held_runs.get(owner_id=str(alice.pk), thread_id="thread-1", run_id="r1")
    assert r1 is not None
    assert r1.status == "complete"
