"""Reattach and cancel across workers: the run's log relayed through Django's cache.

Two servers share the database and the cache (``/gated/`` and ``/gated-2/``, ``/hanging-durable/``
and ``/hanging-durable-2/``): a run started on one is not held by the other, exactly as with a
second worker process, so the second answers from the relayed log (or from storage).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ag_ui.core import RunStartedEvent
from ag_ui_validate.pytest_plugin import assert_valid_agui
from django.core.cache import cache
from django.core.cache.backends.locmem import LocMemCache
from django.http import StreamingHttpResponse
from django.test import RequestFactory
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from django_pydantic_agent.agui import AccessPolicy, AGUIServer
from django_pydantic_agent.agui.engine import _RELAY_GRACE_SECONDS
from django_pydantic_agent.agui.relay import RELAY_INTERVAL_SECONDS, RunRelay, run_digest
from django_pydantic_agent.agui.runs import CANCEL_POLL_SECONDS, RunCoordinator
from django_pydantic_agent.agui.sse import encode_event
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from tests.agui.agents import GATE, HANG_LOG
from tests.agui.conftest import logged_in, run_body, sse_frames
from tests.agui.test_runs import active_run, wait_for
from tests.support.transcript import apply_events, visible

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]

_RELAY = "django_pydantic_agent:relay"


def relay_key(user: Any, thread_id: str = "thread-1", run_id: str = "run-1") -> str:
    return f"{_RELAY}:{run_digest(str(user.pk), thread_id, run_id)}"


def coordinator_of(server: AGUIServer) -> RunCoordinator:
    coordinator = server.coordinator
    assert coordinator is not None
    return coordinator


async def _at_least(pending: Any, *, seq: int) -> Any:
    found = await pending
    return found if found and found["lastSeq"] >= seq else None


async def test_another_server_reattaches_from_the_relay_with_no_gap_and_no_duplicate(
    alice: Any,
) -> None:
    from tests.agui.urls import gated_2

    GATE.reset()
    async with await logged_in(alice) as http, await logged_in(alice) as second:
        first = asyncio.ensure_future(http.post("/gated/", json=run_body()))
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        # The second server's thread view reads the last sequence number from the relay.
        running = await wait_for(lambda: _at_least(active_run(second, "/gated-2/"), seq=3))
        after = running["lastSeq"]
        assert coordinator_of(gated_2).manager.get("thread-1", "run-1", owner=str(alice.pk)) is None
        headers = {"Last-Event-ID": f"run-1:{after}"}
        resumed_task = asyncio.ensure_future(
            second.get("/gated-2/runs/thread-1/run-1/", headers=headers)
        )
        whole_task = asyncio.ensure_future(second.get("/gated-2/runs/thread-1/run-1/?after=0"))
        await asyncio.sleep(0.3)  # both readers are following the relayed log
        GATE.released.set()
        original, resumed, whole_relayed = await asyncio.gather(first, resumed_task, whole_task)
    whole = sse_frames(original.text)
    tail = sse_frames(resumed.text)
    reopened = [event for frame_id, event in tail if frame_id is None]
    assert [e["type"] for e in reopened] == ["RUN_STARTED", "TEXT_MESSAGE_START"]
    assert reopened[0]["runId"] == "run-1"
    assert [frame for frame in tail if frame[0] is not None] == whole[after:]
    assert_valid_agui([event for _, event in tail])
    # after=0 replays the whole run, every frame with its id, exactly as the first reader saw.
    assert sse_frames(whole_relayed.text) == whole


async def test_a_reattach_ahead_of_the_relayed_log_waits_for_the_run(alice: Any) -> None:
    # Another worker relays less than the reader says it saw: its relay lags, or it died with
    # events it never relayed. No 400: the stream stays open until the relay catches up, the
    # run is taken over or it ends; here it ends, and the reader gets what is stored.
    GATE.reset()
    async with await logged_in(alice) as http, await logged_in(alice) as second:
        first = asyncio.ensure_future(http.post("/gated/", json=run_body()))
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        await wait_for(lambda: _at_least(active_run(second, "/gated-2/"), seq=3))
        ahead = asyncio.ensure_future(second.get("/gated-2/runs/thread-1/run-1/?after=999"))
        await asyncio.sleep(_RELAY_GRACE_SECONDS + 0.3)
        assert not ahead.done()  # still waiting, not refused
        GATE.released.set()
        await first
        answer = await ahead
        thread = (await second.get("/gated-2/threads/thread-1/")).json()
    assert answer.status_code == 200
    events = [event for _, event in sse_frames(answer.text)]
    assert [e["type"] for e in events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert visible(apply_events(events)) == visible(thread["messages"])
    assert_valid_agui(events)


async def test_without_a_relayed_log_another_server_answers_from_storage(alice: Any) -> None:
    # A per-process cache on the other worker (or an expired log): the record, then storage.
    GATE.reset()
    async with await logged_in(alice) as http, await logged_in(alice) as second:
        first = asyncio.ensure_future(http.post("/gated/", json=run_body()))
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        await wait_for(lambda: _at_least(active_run(second, "/gated-2/"), seq=3))
        await cache.adelete(f"{relay_key(alice)}:head")  # no event comes to write it again
        reattach = asyncio.ensure_future(second.get("/gated-2/runs/thread-1/run-1/?after=2"))
        await asyncio.sleep(_RELAY_GRACE_SECONDS + 0.3)  # it gave up waiting for the log
        GATE.released.set()
        original, resumed = await asyncio.gather(first, reattach)
    events = [event for _, event in sse_frames(resumed.text)]
    assert [e["type"] for e in events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert events[1]["messages"][-1]["content"] == "Working done."
    assert sse_frames(resumed.text)[-1][0] == sse_frames(original.text)[-1][0]
    assert_valid_agui(events)


async def test_a_relayed_log_lost_mid_stream_ends_from_storage(alice: Any) -> None:
    GATE.reset()
    async with await logged_in(alice) as http, await logged_in(alice) as second:
        first = asyncio.ensure_future(http.post("/gated/", json=run_body()))
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        await wait_for(lambda: _at_least(active_run(second, "/gated-2/"), seq=3))
        reattach = asyncio.ensure_future(second.get("/gated-2/runs/thread-1/run-1/"))
        await asyncio.sleep(0.3)
        await cache.adelete(f"{relay_key(alice)}:head")  # evicted while followed
        await asyncio.sleep(0.3)
        GATE.released.set()
        await first
        resumed = await reattach
    events = [event for _, event in sse_frames(resumed.text)]
    types = [e["type"] for e in events]
    # What the log held, the open message closed, then the stored ending.
    assert types[0] == "RUN_STARTED"
    assert types[-3:] == ["TEXT_MESSAGE_END", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert events[-2]["messages"][-1]["content"] == "Working done."
    assert_valid_agui(events)


async def test_a_cancel_posted_to_another_server_stops_a_silent_run_promptly(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hanging model is silent after its first word: no event comes to check the intent,
    # and the run's heartbeat (10 s) is far off. The relay's tick polls the intent.
    from django_pydantic_agent.contrib.store.models import StoredAgentRun

    cancel_reads: list[str] = []
    original_get = LocMemCache.get

    def counting_get(self: LocMemCache, key: str, *args: Any, **kwargs: Any) -> Any:
        if key.startswith("django_pydantic_agent:cancel"):
            cancel_reads.append(key)
        return original_get(self, key, *args, **kwargs)

    monkeypatch.setattr(LocMemCache, "get", counting_get)
    HANG_LOG.clear()
    async with await logged_in(alice) as http, await logged_in(alice) as other_worker:
        started = time.monotonic()
        streaming = asyncio.ensure_future(http.post("/hanging-durable/", json=run_body()))
        await wait_for(lambda: _at_least(active_run(other_worker, "/hanging-durable-2/"), seq=3))
        cancelled = await other_worker.post("/hanging-durable-2/runs/thread-1/run-1/cancel/")
        # Far less than the run's 10 s heartbeat: the intent was polled while the model was silent.
        response = await asyncio.wait_for(streaming, timeout=5)
        await RunCoordinator.wait_for_all_runs()
        elapsed = time.monotonic() - started
        thread = await other_worker.get("/hanging-durable-2/threads/thread-1/")
        again = await other_worker.post("/hanging-durable-2/runs/thread-1/run-1/cancel/")
    assert cancelled.status_code == 202
    events = [event for _, event in sse_frames(response.text)]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "cancelled"}
    assert_valid_agui(events)
    assert HANG_LOG == ["started", "cancelled", "stopped"]
    assert thread.json()["messages"][-1]["status"] == "interrupted"
    assert again.json() == {"runId": "run-1", "status": "interrupted", "cancelled": False}
    row = await StoredAgentRun.objects.aget(thread_id="thread-1", run_id="run-1")
    assert row.status == "interrupted"
    # Polled, but throttled: at most once per CANCEL_POLL_SECONDS while the run lasted.
    assert 1 <= len(cancel_reads) <= elapsed / CANCEL_POLL_SECONDS + 2


async def test_a_strangers_reattach_and_cancel_on_another_server_are_404s(
    alice: Any, bob: Any
) -> None:
    async with await logged_in(alice) as http, await logged_in(bob) as stranger:
        streaming = asyncio.ensure_future(http.post("/hanging-durable/", json=run_body()))
        await wait_for(lambda: _at_least(active_run(http, "/hanging-durable-2/"), seq=3))
        theirs = await stranger.get("/hanging-durable-2/runs/thread-1/run-1/")
        their_cancel = await stranger.post("/hanging-durable-2/runs/thread-1/run-1/cancel/")
        missing = await stranger.get("/hanging-durable-2/runs/thread-1/no-such-run/")
        still_running = await active_run(http, "/hanging-durable-2/")
        await http.post("/hanging-durable-2/runs/thread-1/run-1/cancel/")
        await asyncio.wait_for(streaming, timeout=10)
    for response in (theirs, their_cancel, missing):
        assert response.status_code == 404
        assert response.json() == {"error": "No such run."}
    assert still_running["runId"] == "run-1"


# Off the hot path: the relay writes per interval, not per event.

DELTAS = 2000


async def _many_deltas(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    for index in range(DELTAS):
        yield f"w{index} "


def as_user(request: Any, user: Any) -> Any:
    async def auser() -> Any:
        return user

    request.auser = auser
    request.user = user
    return request


async def test_a_2000_delta_run_makes_a_few_cache_writes_not_one_per_event(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[list[str]] = []
    original_set_many = LocMemCache.set_many

    def counting_set_many(self: LocMemCache, data: dict[str, Any], *args: Any, **kw: Any) -> Any:
        if any(key.startswith(_RELAY) for key in data):
            writes.append(list(data))
        return original_set_many(self, data, *args, **kw)

    monkeypatch.setattr(LocMemCache, "set_many", counting_set_many)
    server = AGUIServer(
        Agent(FunctionModel(stream_function=_many_deltas)),
        conversation_store=DefaultConversationStore(),
        access=AccessPolicy(csrf_exempt=True),
    )
    request = as_user(
        RequestFactory().post("/", data=run_body(), content_type="application/json"), alice
    )
    started = time.monotonic()
    response = await server.run_view(request)
    assert isinstance(response, StreamingHttpResponse)
    body = "".join([bytes(chunk).decode() async for chunk in response])
    await RunCoordinator.wait_for_all_runs()
    elapsed = time.monotonic() - started
    frames = sse_frames(body)
    deltas = [e for _, e in frames if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(deltas) == DELTAS
    # One write per interval with new events (plus the first head), never one per event.
    print(f"{len(frames)} events in {elapsed:.2f} s: {len(writes)} relay writes")
    assert 2 <= len(writes) <= elapsed / RELAY_INTERVAL_SECONDS + 2
    assert len(writes) < len(frames) / 10
    # And the relayed log holds the whole run, every event once, in order.
    coordinator = coordinator_of(server)
    log = await coordinator.relay.follow(str(alice.pk), "thread-1", "run-1")
    assert log is not None
    assert log.terminal
    relayed = [(seq, event) async for seq, event in log.entries()]
    assert [seq for seq, _ in relayed] == list(range(1, len(frames) + 1))
    # Rebuilt on the follower's side, each event encodes to the frame the stream sent.
    assert [sse_frames(encode_event(event))[0][1] for _, event in relayed] == [
        event for _, event in frames
    ]


# The relayed log on its own: a broken log is never replayed.


async def test_a_log_with_a_gap_or_an_unreadable_event_is_reported_lost() -> None:
    relay = RunRelay(interval=0.01)
    key = f"{_RELAY}:{run_digest('o', 't', 'r')}"
    started = RunStartedEvent(thread_id="t", run_id="r")
    await cache.aset_many(
        {f"{key}:head": {"batches": 1, "last_seq": 3, "terminal": False}, f"{key}:1": []}
    )
    not_events = [[(1, "not an event")], [(1, str, {})], [(1, type(started), "values")], [7]]
    for batch in ([(1, started), (3, started)], *not_events, "garbage"):
        await cache.aset(f"{key}:1", batch)
        log = await relay.follow("o", "t", "r")
        assert log is not None
        seen = [seq async for seq, _ in log.entries()]
        assert log.lost
        assert seen in ([], [1])
    await cache.adelete(f"{key}:1")
    assert await relay.follow("o", "t", "r") is None  # a batch is missing: no log at all
    assert await relay.follow("o", "t", "other", grace=0.03) is None
    await cache.adelete_many([f"{key}:head"])


async def test_the_relay_refuses_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        RunRelay(interval=0)


# The relay on its own, over a manager's handles.


class _Script:
    """A runnable agent that yields ``count`` text deltas, pausing at ``pause`` until set."""

    def __init__(self, count: int, pause: asyncio.Event | None = None) -> None:
        self.count = count
        self.pause = pause

    async def run(self, input: Any) -> AsyncIterator[Any]:
        from ag_ui.core import (
            RunFinishedEvent,
            TextMessageContentEvent,
            TextMessageEndEvent,
            TextMessageStartEvent,
        )

        yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
        yield TextMessageStartEvent(message_id="m1", role="assistant")
        if self.pause is not None:
            await self.pause.wait()
        for index in range(self.count):
            yield TextMessageContentEvent(message_id="m1", delta=f"{index} ")
        yield TextMessageEndEvent(message_id="m1")
        yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


def _input(run_id: str) -> Any:
    from ag_ui.core import RunAgentInput

    return RunAgentInput.model_validate(run_body(thread_id="t-relay", run_id=run_id))


async def test_a_failed_cache_write_is_retried_and_a_failing_tick_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from django_pydantic_agent.chat_history import StreamPersistenceManager

    failures = [True]
    original_set_many = LocMemCache.set_many

    def flaky_set_many(self: LocMemCache, data: dict[str, Any], *args: Any, **kw: Any) -> Any:
        if failures and any(key.startswith(_RELAY) for key in data):
            failures.pop()
            raise ConnectionError("the cache is down")
        return original_set_many(self, data, *args, **kw)

    async def broken_tick(handle: Any) -> None:
        raise RuntimeError("tick")

    monkeypatch.setattr(LocMemCache, "set_many", flaky_set_many)
    relay = RunRelay(interval=0.01, on_tick=broken_tick)
    pause = asyncio.Event()
    async with StreamPersistenceManager(lambda: _Script(5, pause)) as manager:
        handle = await manager.run(_input("r-flaky"))
        relay.publish(handle, "owner")
        relay.publish(handle, "owner")  # once is enough
        await asyncio.sleep(0.05)
        pause.set()
        await handle.wait()
        relay.nudge(handle)
        await relay.finish(handle)
        await relay.finish(handle)  # nothing left to finish
    assert "Could not relay run 'r-flaky'" in caplog.text
    assert "The relay's tick failed" in caplog.text
    log = await relay.follow("owner", "t-relay", "r-flaky")
    assert log is not None
    assert [seq async for seq, _ in log.entries()] == list(range(1, handle.last_seq + 1))


async def test_a_relay_that_fell_behind_the_bounded_log_withdraws_it() -> None:
    from django_pydantic_agent.chat_history import StreamPersistenceManager

    relay = RunRelay(interval=30.0)  # no tick comes before the run is over
    pause = asyncio.Event()
    async with StreamPersistenceManager(lambda: _Script(50, pause), max_log_events=5) as manager:
        handle = await manager.run(_input("r-behind"))
        relay.publish(handle, "owner")
        await asyncio.sleep(0.05)  # the first (empty) head is written
        assert await relay.last_seq("owner", "t-relay", "r-behind") is not None
        pause.set()
        await handle.wait()
        await relay.finish(handle)
    # Events 1..48 are gone from memory: followers answer from storage instead.
    assert await relay.follow("owner", "t-relay", "r-behind") is None
    assert await relay.last_seq("owner", "t-relay", "r-behind") is None


async def test_a_follower_waits_for_the_relay_to_catch_up_with_its_reader() -> None:
    relay = RunRelay(interval=0.01)
    key = f"{_RELAY}:{run_digest('o', 't', 'lag')}"
    started = RunStartedEvent(thread_id="t", run_id="lag")
    head = {"batches": 1, "last_seq": 1, "terminal": False}
    await cache.aset_many({f"{key}:head": head, f"{key}:1": [(1, started)]})
    log = await relay.follow("o", "t", "lag")
    assert log is not None
    assert not await log.wait_for(3, seconds=0.05)  # still behind
    await cache.aset(f"{key}:head", {"batches": 1, "last_seq": 3, "terminal": False})
    assert await log.wait_for(3, seconds=1.0)
    await cache.adelete(f"{key}:head")
    assert not await log.wait_for(9, seconds=1.0)  # the log went away
    # A terminal head whose batches never held the terminal event is a lost log.
    await cache.aset(f"{key}:head", {"batches": 1, "last_seq": 1, "terminal": True})
    log = await relay.follow("o", "t", "lag")
    assert log is not None
    assert [seq async for seq, _ in log.entries()] == [1]
    assert log.lost
    await cache.adelete_many([f"{key}:head", f"{key}:1"])


async def test_an_unreadable_cache_means_no_relayed_log(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: LocMemCache, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("the cache is down")

    relay = RunRelay(interval=0.01)
    key = f"{_RELAY}:{run_digest('o', 't', 'down')}"
    await cache.aset(f"{key}:head", {"batches": 1, "last_seq": 1, "terminal": False})
    monkeypatch.setattr(LocMemCache, "get_many", broken)
    assert await relay.follow("o", "t", "down") is None
    monkeypatch.setattr(LocMemCache, "get", broken)
    assert await relay.follow("o", "t", "down") is None
    monkeypatch.undo()
    await cache.adelete(f"{key}:head")


async def test_a_reattach_to_a_dead_workers_run_ends_once_the_sweeper_ends_it(
    alice: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its worker relayed the start of the run, then died: nothing more comes. Once the run's
    # record ends (the sweeper), the follower stops waiting and answers from storage.
    from ag_ui.core import TextMessageStartEvent

    from django_pydantic_agent.agui import relay as relay_module
    from tests.agui.urls import gated_2

    monkeypatch.setattr(relay_module, "ALIVE_CHECK_SECONDS", 0.2)
    store = coordinator_of(gated_2).run_store
    owner = str(alice.pk)
    await store.start(owner_id=owner, thread_id="t-dead", run_id="r-dead", worker_id="dead:1")
    key = relay_key(alice, "t-dead", "r-dead")
    batch = [
        (1, RunStartedEvent(thread_id="t-dead", run_id="r-dead")),
        (2, TextMessageStartEvent(message_id="m-dead", role="assistant")),
    ]
    head = {"batches": 1, "last_seq": 2, "terminal": False}
    await cache.aset_many({f"{key}:head": head, f"{key}:1": batch})
    async with await logged_in(alice) as http:
        reattach = asyncio.ensure_future(http.get("/gated-2/runs/t-dead/r-dead/?after=1"))
        await asyncio.sleep(0.5)
        assert not reattach.done()  # still waiting for the run's next events
        await store.finish(
            owner_id=owner,
            thread_id="t-dead",
            run_id="r-dead",
            status="errored",
            error="The run's worker stopped.",
        )
        response = await asyncio.wait_for(reattach, timeout=10)
    await cache.adelete_many([f"{key}:head", f"{key}:1"])
    events = [event for _, event in sse_frames(response.text)]
    assert [e["type"] for e in events] == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
        "MESSAGES_SNAPSHOT",
        "RUN_ERROR",
    ]
    assert events[-1]["message"] == "The run's worker stopped."
    assert_valid_agui(events)


async def test_a_finished_runs_relayed_log_is_retired_once_the_next_run_finishes() -> None:
    """Finished runs are answered from storage: their batches leave the cache, so a busy worker
    does not crowd run records out of a bounded cache (LocMemCache keeps 300 entries)."""
    from django_pydantic_agent.chat_history import StreamPersistenceManager

    relay = RunRelay(interval=0.01, retire_after=0.0)
    async with StreamPersistenceManager(lambda: _Script(30)) as manager:
        first = await manager.run(_input("r-old"))
        relay.publish(first, "owner")
        await first.wait()
        await relay.finish(first)
        key = f"{_RELAY}:{run_digest('owner', 't-relay', 'r-old')}"
        assert await cache.aget(f"{key}:head") is None, "retired at once with retire_after=0"
        assert await cache.aget(f"{key}:1") is None

    kept = RunRelay(interval=0.01)  # the default keeps a finished log for late followers
    async with StreamPersistenceManager(lambda: _Script(30)) as manager:
        second = await manager.run(_input("r-kept"))
        kept.publish(second, "owner")
        await second.wait()
        await kept.finish(second)
    log = await kept.follow("owner", "t-relay", "r-kept")
    assert log is not None
    assert log.terminal
    key = f"{_RELAY}:{run_digest('owner', 't-relay', 'r-kept')}"
    await cache.adelete_many([f"{key}:head", *(f"{key}:{n}" for n in range(1, 50))])


async def test_only_the_most_recent_finished_logs_wait_to_be_retired() -> None:
    """A burst of short runs keeps at most ``retire_keep`` finished logs in the cache, however
    many finish within ``retire_after``: the relay's share of a bounded cache does not grow
    with throughput, and the newest logs are the ones kept for late followers."""
    from django_pydantic_agent.chat_history import StreamPersistenceManager

    relay = RunRelay(interval=0.01, retire_keep=3)  # retire_after stays at its 2 s
    run_ids = [f"r-burst-{n}" for n in range(6)]
    async with StreamPersistenceManager(lambda: _Script(5)) as manager:
        for run_id in run_ids:
            handle = await manager.run(_input(run_id))
            relay.publish(handle, "owner")
            await handle.wait()
            await relay.finish(handle)
    heads = [f"{_RELAY}:{run_digest('owner', 't-relay', run_id)}:head" for run_id in run_ids]
    found = await cache.aget_many(heads)
    assert [run_id for run_id, head in zip(run_ids, heads, strict=True) if head in found] == [
        "r-burst-3",
        "r-burst-4",
        "r-burst-5",
    ]
    log = await relay.follow("owner", "t-relay", "r-burst-0")
    assert log is None, "a retired log is gone; the reattach answers from storage"
    keys = [f"{head[: -len(':head')]}:{n}" for head in heads for n in range(1, 20)]
    await cache.adelete_many(heads + keys)


def test_retire_keep_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="retire_keep=-1"):
        RunRelay(retire_keep=-1)


class _WithExtras:
    """A runnable agent whose events carry keys AG-UI does not define (its models allow it)."""

    async def run(self, input: Any) -> AsyncIterator[Any]:
        from ag_ui.core import RunFinishedEvent, RunStartedEvent, TextMessageContentEvent

        yield RunStartedEvent(thread_id="t-relay", run_id=input.run_id, trace={"span": 7})
        yield TextMessageContentEvent(message_id="m1", delta="hi", citation="doc-3")
        yield RunFinishedEvent(thread_id="t-relay", run_id=input.run_id, result={"ok": True})


async def test_a_follower_rebuilds_every_field_and_extra_key_of_the_relayed_events() -> None:
    from django_pydantic_agent.chat_history import StreamPersistenceManager

    relay = RunRelay(interval=0.01)
    async with StreamPersistenceManager(lambda: _WithExtras()) as manager:
        handle = await manager.run(_input("r-extras"))
        relay.publish(handle, "owner")
        await handle.wait()
        await relay.finish(handle)
    log = await relay.follow("owner", "t-relay", "r-extras")
    assert log is not None
    rebuilt = [encode_event(event) async for _, event in log.entries()]
    assert rebuilt == [encode_event(entry.event) for entry in handle.logged_since(0)]
    assert '"citation":"doc-3"' in rebuilt[1]
    assert '"trace":{"span":7}' in rebuilt[0]
    key = f"{_RELAY}:{run_digest('owner', 't-relay', 'r-extras')}"
    await cache.adelete_many([f"{key}:head", f"{key}:1"])
