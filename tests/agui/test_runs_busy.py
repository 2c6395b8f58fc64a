"""A run's ``RUN_FINISHED`` goes out only once its record has ended (and what it ends is
stored), so a client that sends its next turn the moment it reads it never finds the thread
busy."""

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


async def test_run_finished_waits_for_the_record_so_the_next_turn_is_never_busy(
    alice: Any,
) -> None:
    held_runs.release = asyncio.Event()
    held_runs.held = asyncio.Event()
    async with await logged_in(alice) as http:
        first = asyncio.ensure_future(http.post("/slow-finish/", json=run_body(run_id="r1")))
        await asyncio.wait_for(held_runs.held.wait(), timeout=10)
        await asyncio.sleep(0.2)
        assert not first.done()  # the record is being ended: RUN_FINISHED waits for it
        held_runs.release.set()
        answer = await asyncio.wait_for(first, timeout=20)
        assert sse_events(answer.text)[-1]["type"] == "RUN_FINISHED"
        response = await http.post("/slow-finish/", json=run_body(run_id="r2"))  # at once
    assert response.status_code == 200, response.text
    assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
    r1 = await held_runs.get(owner_id=str(alice.pk), thread_id="thread-1", run_id="r1")
    assert r1 is not None
    assert r1.status == "complete"
