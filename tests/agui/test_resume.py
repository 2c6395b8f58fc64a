"""A run whose worker drained (or died) is resumed by another worker: the same run id, a new
execution numbered from its own epoch that opens with a snapshot of what is stored, its partial
answer kept ``interrupted`` and the turn answered again.

Two mounts on the same tables stand for two workers: ``hasty/`` drains and hands its run over,
``patient/`` takes it over when the client reattaches there.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.core.cache import cache

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, DrainReport, RunOptions
from django_pydantic_agent.chat_history.manager import EPOCH_STRIDE
from django_pydantic_agent.contrib.store.models import StoredAgentRun
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence.runs import CacheRunStore
from tests.agui.agents import GATE, text_agent
from tests.agui.conftest import logged_in, run_body, sse_frames
from tests.agui.urls_drain import hasty
from tests.support.transcript import apply_events, visible

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.agui.urls_drain"),
]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    cache.clear()
    GATE.reset()


async def _handed_over(http: Any, thread_id: str, run_id: str) -> list[tuple[str | None, Any]]:
    """Start a run on ``hasty/``, drain it once the model is mid-answer; the reader's frames."""
    streaming = asyncio.ensure_future(
        http.post("/hasty/", json=run_body(thread_id=thread_id, run_id=run_id))
    )
    await asyncio.wait_for(GATE.reached.wait(), timeout=10)
    assert await hasty.drain() == DrainReport(handed_over=1)
    response = await streaming
    hasty.drain_state.end()
    return sse_frames(response.text)


async def test_a_handed_over_run_goes_on_where_the_client_reattaches(alice: Any) -> None:
    async with await logged_in(alice) as http:
        first = await _handed_over(http, "t-resume", "r-resume")
        seen = max(int(frame_id.rpartition(":")[2]) for frame_id, _ in first if frame_id)
        GATE.reset()
        GATE.released.set()  # the model answers the turn again without waiting
        response = await http.get(f"/patient/runs/t-resume/r-resume/?after={seen}")
        thread = (await http.get("/patient/threads/t-resume/")).json()
    assert response.status_code == 200
    tail = sse_frames(response.text)
    types = [event["type"] for _, event in tail]
    # The run's next execution, from its start: RUN_STARTED, the thread as stored when it
    # resumed (the old answer, interrupted), the new answer, RUN_FINISHED; every frame with an
    # id of epoch 1, none of which a reader of the first execution could have seen.
    assert types[:3] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "TEXT_MESSAGE_START"]
    assert types.count("RUN_STARTED") == 1
    assert types[-1] == "RUN_FINISHED"
    base = EPOCH_STRIDE
    assert [frame_id for frame_id, _ in tail] == [
        f"r-resume:{base + n}" for n in range(1, len(tail) + 1)
    ]
    snapshot = tail[1][1]["messages"]
    assert [(m["role"], m.get("content")) for m in snapshot] == [
        ("user", "What is 2 + 3?"),
        ("assistant", "Working "),
    ]
    new_answer = "".join(e["delta"] for _, e in tail if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert new_answer == "Working done."
    run = await StoredAgentRun.objects.aget(run_id="r-resume")
    assert (run.status, run.resumes, run.last_seq) == ("complete", 1, base + len(tail))
    answers = [(m["content"], m["status"]) for m in thread["messages"] if m["role"] == "assistant"]
    assert answers == [("Working ", "interrupted"), ("Working done.", "complete")]
    assert thread["activeRun"] is None
    # What the client shows after both streams is exactly what the thread stores.
    shown = apply_events([event for _, event in first + tail])
    assert visible(shown) == visible(thread["messages"])


async def test_a_run_is_resumed_at_most_max_resumes_times_then_ends_errored(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await _handed_over(http, "t-bounded", "r-bounded")
        await StoredAgentRun.objects.filter(run_id="r-bounded").aupdate(
            resumes=hasty.runs.max_resumes
        )
        response = await http.get("/patient/runs/t-bounded/r-bounded/")
    types = [event["type"] for _, event in sse_frames(response.text)]
    assert types[-1] == "RUN_ERROR"
    run = await StoredAgentRun.objects.aget(run_id="r-bounded")
    assert run.status == "errored"


def test_resume_is_the_default_where_the_run_store_can_take_runs_over() -> None:
    stored = AGUIServer(
        text_agent(),
        conversation_store=DefaultConversationStore(),
        access=AccessPolicy(csrf_exempt=True),
    )
    assert stored.runs.on_worker_loss == "resume"
    cached = AGUIServer(
        text_agent(),
        conversation_store=DefaultConversationStore(),
        run_store=CacheRunStore(),
        access=AccessPolicy(csrf_exempt=True),
    )
    assert cached.runs.on_worker_loss == "error"
    with pytest.raises(ValueError, match="on_worker_loss='resume' needs a run store"):
        AGUIServer(
            text_agent(),
            conversation_store=DefaultConversationStore(),
            run_store=CacheRunStore(),
            runs=RunOptions(on_worker_loss="resume"),
            access=AccessPolicy(csrf_exempt=True),
        )
    with pytest.raises(ValueError, match="max_resumes=-1"):
        AGUIServer(
            text_agent(),
            conversation_store=DefaultConversationStore(),
            runs=RunOptions(max_resumes=-1),
            access=AccessPolicy(csrf_exempt=True),
        )
