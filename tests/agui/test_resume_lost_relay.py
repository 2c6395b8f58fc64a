"""A run resumed on a worker that cannot read the old execution's relayed log: the cache was
cleared, the log's keys were evicted, or the cache is per-process (``LocMemCache``) and the
old worker's log lives in a cache the new worker does not share.

``tests/agui/test_resume.py`` shares one in-memory cache between both mounts, so the relayed
log is always there; here it is gone between the hand-over (or the worker's death) and the
reattach. The run must go on all the same, as its next execution numbered from
``resumes * EPOCH_STRIDE + 1``: the reattached client gets ``RUN_STARTED``, a
``MESSAGES_SNAPSHOT`` of what is stored, the new answer and ``RUN_FINISHED``, and ends with
exactly the stored thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache, caches
from django.test import override_settings
from django.utils import timezone

from django_pydantic_agent.agui import DrainReport
from django_pydantic_agent.agui.relay import RunRelay, run_digest
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.chat_history.manager import EPOCH_STRIDE
from django_pydantic_agent.contrib.store.models import StoredAgentRun
from tests.agui.agents import GATE
from tests.agui.conftest import logged_in, run_body, sse_frames
from tests.agui.urls_drain import hasty, patient
from tests.support.transcript import apply_events, visible

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.agui.urls_drain"),
]

Frames = list[tuple[str | None, Any]]
# How long a reattach may take: a run that is not taken over would keep it open for ever.
_PATIENCE = 15.0


@pytest.fixture(autouse=True)
def _fresh() -> None:
    cache.clear()
    GATE.reset()


@pytest.fixture
def own_cache() -> Iterator[None]:
    """``patient/`` relays through a cache of its own: a ``LocMemCache`` of another process."""
    assert patient.coordinator is not None
    relay: RunRelay = patient.coordinator.relay
    caches_setting = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "other-worker": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "other-worker",
        },
    }
    with override_settings(CACHES=caches_setting):
        relay.cache_alias = "other-worker"
        try:
            yield
        finally:
            relay.cache_alias = "default"
            caches["other-worker"].clear()


async def _evict_relay(thread_id: str, run_id: str) -> None:
    """Delete the run's relayed log (head and batches), as a bounded cache evicts it."""
    record = await StoredAgentRun.objects.aget(run_id=run_id)
    key = f"django_pydantic_agent:relay:{run_digest(record.owner_id, thread_id, run_id)}"
    head = await cache.aget(f"{key}:head")
    assert head is not None  # the log was relayed, and is evicted now
    batches = [f"{key}:{n}" for n in range(1, head["batches"] + 1)]
    await cache.adelete_many([f"{key}:head", *batches])


async def _clear(thread_id: str, run_id: str) -> None:
    await cache.aclear()


async def _nothing(thread_id: str, run_id: str) -> None:
    """The relayed log stays in the shared cache, but ``patient/`` reads another one."""


def _seen(frames: Frames) -> int:
    return max(int(frame_id.rpartition(":")[2]) for frame_id, _ in frames if frame_id)


def _assert_resumed(first: Frames, tail: Frames, thread: dict[str, Any], run_id: str) -> None:
    """``tail`` is the run's next execution from its start, and the client ends with what the
    thread stores."""
    types = [event["type"] for _, event in tail]
    assert types[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"], types
    assert types.count("RUN_STARTED") == 1
    assert types[-1] == "RUN_FINISHED", types
    # Every frame of the new execution carries an id numbered from its own epoch.
    assert [frame_id for frame_id, _ in tail] == [
        f"{run_id}:{EPOCH_STRIDE + n}" for n in range(1, len(tail) + 1)
    ]
    new_answer = "".join(e["delta"] for _, e in tail if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert new_answer == "Working done."
    answers = [(m["content"], m["status"]) for m in thread["messages"] if m["role"] == "assistant"]
    assert answers[-1] == ("Working done.", "complete")
    assert thread["activeRun"] is None
    assert visible(apply_events(e for _, e in first + tail)) == visible(thread["messages"])


@pytest.mark.parametrize(
    ("lose", "fixtures"),
    [
        pytest.param(_clear, (), id="cache-cleared"),
        pytest.param(_evict_relay, (), id="relay-evicted"),
        pytest.param(_nothing, ("own_cache",), id="per-process-cache"),
    ],
)
async def test_a_handed_over_run_whose_relayed_log_is_gone_goes_on(
    alice: Any,
    request: pytest.FixtureRequest,
    lose: Callable[[str, str], Any],
    fixtures: tuple[str, ...],
) -> None:
    for name in fixtures:
        request.getfixturevalue(name)
    async with await logged_in(alice) as http:
        streaming = asyncio.ensure_future(
            http.post("/hasty/", json=run_body(thread_id="t-lost", run_id="r-lost"))
        )
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        assert await hasty.drain() == DrainReport(handed_over=1)
        first = sse_frames((await streaming).text)
        hasty.drain_state.end()
        await lose("t-lost", "r-lost")
        GATE.reset()
        GATE.released.set()  # the model answers the turn again without waiting
        reattach = http.get(f"/patient/runs/t-lost/r-lost/?after={_seen(first)}")
        response = await asyncio.wait_for(reattach, timeout=_PATIENCE)
        thread = (await http.get("/patient/threads/t-lost/")).json()
    assert response.status_code == 200
    tail = sse_frames(response.text)
    _assert_resumed(first, tail, thread, "r-lost")
    snapshot = tail[1][1]["messages"]
    assert [(m["role"], m.get("content")) for m in snapshot] == [
        ("user", "What is 2 + 3?"),
        ("assistant", "Working "),
    ]
    answers = [(m["content"], m["status"]) for m in thread["messages"] if m["role"] == "assistant"]
    assert answers == [("Working ", "interrupted"), ("Working done.", "complete")]
    run = await StoredAgentRun.objects.aget(run_id="r-lost")
    assert (run.status, run.resumes, run.last_seq) == ("complete", 1, EPOCH_STRIDE + len(tail))


async def _taken_over(run_id: str) -> None:
    for _ in range(200):
        if await StoredAgentRun.objects.filter(run_id=run_id, resumes=1).aexists():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the run was not taken over by the reattach")


@pytest.mark.parametrize(
    ("lose", "fixtures"),
    [
        pytest.param(_clear, (), id="cache-cleared"),
        pytest.param(_nothing, ("own_cache",), id="per-process-cache"),
    ],
)
async def test_a_dead_workers_run_whose_relayed_log_is_gone_goes_on(
    alice: Any,
    request: pytest.FixtureRequest,
    lose: Callable[[str, str], Any],
    fixtures: tuple[str, ...],
) -> None:
    for name in fixtures:
        request.getfixturevalue(name)
    async with await logged_in(alice) as http:
        first = asyncio.ensure_future(
            http.post("/hasty/", json=run_body(thread_id="t-dead", run_id="r-dead"))
        )
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        # The worker died: its heartbeat stopped a minute ago, and its relayed log is gone.
        old = timezone.now() - timedelta(seconds=60)
        await StoredAgentRun.objects.filter(run_id="r-dead").aupdate(heartbeat_at=old)
        await lose("t-dead", "r-dead")
        # The client saw RUN_STARTED, TEXT_MESSAGE_START and "Working " (ids 1 to 3).
        tail = asyncio.ensure_future(http.get("/patient/runs/t-dead/r-dead/?after=3"))
        await _taken_over("r-dead")
        GATE.released.set()
        dead, resumed = await asyncio.wait_for(asyncio.gather(first, tail), timeout=_PATIENCE)
        await RunCoordinator.wait_for_all_runs()
        thread = (await http.get("/patient/threads/t-dead/")).json()
    assert resumed.status_code == 200
    old_frames = [(i, e) for i, e in sse_frames(dead.text) if i is None or _seq(i) <= 3]
    _assert_resumed(old_frames, sse_frames(resumed.text), thread, "r-dead")
    run = await StoredAgentRun.objects.aget(run_id="r-dead")
    assert (run.status, run.resumes) == ("complete", 1)


def _seq(frame_id: str) -> int:
    return int(frame_id.rpartition(":")[2])
