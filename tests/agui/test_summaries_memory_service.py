"""On the Memory Service stores, a compaction summary is not stored: the capability works within
each run, the thread keeps every message, and ``modelView.summary`` is ``null``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from django.test import RequestFactory

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from django_pydantic_agent.agui import AGUIServer
from django_pydantic_agent.agui.runs import RunCoordinator
from tests.agui.conftest import run_body, sse_frames
from tests.agui.test_runs_memory_service import as_user, body_of, served_on_memory_service
from tests.contrib.store.urls_summaries import SUMMARISED, summarising_agent

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
async def server(live_server: Any) -> AsyncIterator[AGUIServer]:
    SUMMARISED.clear()
    async with served_on_memory_service(live_server, summarising_agent()) as served:
        yield served


async def test_the_memory_service_summarises_within_each_run_and_stores_no_summary(
    server: AGUIServer, alice: Any
) -> None:
    factory = RequestFactory()
    for n in range(5):
        body = run_body(run_id=f"run-{n}", text=f"Turn {n}")
        posted = as_user(factory.post("/", data=body, content_type="application/json"), alice)
        frames = sse_frames(await body_of(await server.run_view(posted)))
        assert frames[-1][1]["type"] == "RUN_FINISHED"
        await RunCoordinator.wait_for_all_runs()
    # The fourth and the fifth run each passed the trigger and summarised: nothing was reused.
    assert len(SUMMARISED) == 2
    thread = await server.thread_view(as_user(factory.get("/"), alice), thread_id="thread-1")
    stored = json.loads(thread.content)  # type: ignore[attr-defined]
    assert [m["content"] for m in stored["messages"] if m["role"] == "user"] == [
        f"Turn {n}" for n in range(5)
    ]
    assert stored["modelView"]["summary"] is None
