"""Concurrent persisting runs on Django's default SQLite settings (no ``OPTIONS``): none is lost.

Regression: with ``DATABASES`` as ``startproject`` writes it (deferred transactions, sqlite3's
5 s timeout), a store transaction that read first and then wrote failed at once with "database
is locked" while another connection wrote, and its run ended with ``RUN_ERROR`` "The run could
not be stored" (1 of 16 runs in the streaming bench). The collision is a race: before the fix,
48 runs, eight at a time, lost at least one run in each of 20 tries on Python 3.11 and 10 on
3.13 (16 runs: in 5 tries of 8).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.store.models import StoredAgentRun, StoredConversation
from tests.agui.conftest import logged_in, run_body, sse_events

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.agui.urls"),
    pytest.mark.sqlite,
]

RUNS = 48
CONCURRENCY = 8


@pytest.fixture
async def django_default_sqlite() -> AsyncIterator[None]:
    """The test database opened with no ``OPTIONS`` at all, as ``startproject`` configures it.

    Every thread's connection shares these settings; the one already open (the process-wide
    ORM thread's) is closed so that it reconnects with them.
    """
    if connections["default"].vendor != "sqlite":
        pytest.skip("Django's default SQLite settings concern SQLite only.")
    settings_dict = connections["default"].settings_dict
    options = settings_dict["OPTIONS"]
    settings_dict["OPTIONS"] = {}
    await sync_to_async(connections.close_all)()
    try:
        yield
    finally:
        settings_dict["OPTIONS"] = options
        await sync_to_async(connections.close_all)()


async def test_concurrent_persisting_runs_on_djangos_default_sqlite_settings_all_finish(
    django_default_sqlite: None, alice: Any
) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(index: int) -> str:
        async with gate, await logged_in(alice) as http:
            body = run_body(thread_id=f"busy-{index}", run_id=f"run-{index}")
            response = await http.post("/stored/", json=body)
        if response.status_code != 200:
            return f"{response.status_code}: {response.text}"
        last = sse_events(response.text)[-1]
        return "ok" if last["type"] == "RUN_FINISHED" else f"{last['type']}: {last}"

    outcomes = await asyncio.wait_for(
        asyncio.gather(*(one(index) for index in range(RUNS))), timeout=60
    )

    assert [outcome for outcome in outcomes if outcome != "ok"] == []
    # A run's record is finished after its stream ends: wait for every run's last writes.
    await asyncio.wait_for(RunCoordinator.wait_for_all_runs(), timeout=30)
    threads = StoredConversation.objects.filter(owner_id=str(alice.pk))
    assert await threads.acount() == RUNS
    runs = StoredAgentRun.objects.filter(owner_id=str(alice.pk), status="complete")
    assert await runs.acount() == RUNS
