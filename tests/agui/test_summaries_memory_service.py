"""On the Memory Service stores, a compaction summary is not stored: the capability works within
each run, the thread keeps every message, and ``modelView.summary`` is ``null``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import httpx
import pytest
from django.test import RequestFactory

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install "django-pydantic-agent[harness]"',
)

from django_pydantic_agent.agui import AGUIServer
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.memory_service import DRMemoryServiceClient
from django_pydantic_agent.persistence.memory_service import MemoryServiceConversationStore
from tests.agui.conftest import run_body, sse_frames
from tests.agui.test_runs_memory_service import as_user, body_of
from tests.contrib.store.urls_summaries import SUMMARISED, summarising_agent
from tests.support.emulator import no_faults_armed

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
async def server(live_server: Any) -> AsyncIterator[AGUIServer]:
    SUMMARISED.clear()
    with no_faults_armed():
        async with httpx.AsyncClient(timeout=30.0) as pool:
            client = DRMemoryServiceClient(
                endpoint=f"{live_server.url}/api/v2", api_token="token-sum", http_client=pool
            )
            store = MemoryServiceConversationStore(client, f"sum-{uuid4().hex}")
            yield AGUIServer(summarising_agent(), conversation_store=store, csrf_exempt=True)
            await RunCoordinator.wait_for_all_runs()


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
