"""The cache-backed run store: one running run per thread, heartbeats, finish, stale takeover."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.cache import caches

from django_pydantic_agent.persistence.runs import (
    CacheRunStore,
    RunRecord,
    RunStatus,
    RunStore,
    check_terminal,
)


@pytest.fixture
def store() -> CacheRunStore:
    caches["default"].clear()
    return CacheRunStore(lease=30)


async def test_a_second_run_on_a_busy_thread_gets_the_active_one(store: CacheRunStore) -> None:
    assert isinstance(store, RunStore)
    first, started = await store.start(owner_id="o", thread_id="t", run_id="r1", worker_id="w1")
    assert started
    assert (first.status, first.worker_id, first.last_seq) == ("running", "w1", 0)
    active, started = await store.start(owner_id="o", thread_id="t", run_id="r2")
    assert not started
    assert active.run_id == "r1"
    # Another owner's thread of the same id is another thread.
    _, started = await store.start(owner_id="other", thread_id="t", run_id="r2")
    assert started
    again, started = await store.start(owner_id="o", thread_id="t", run_id="r1")
    assert (again.run_id, started) == ("r1", True)


async def test_heartbeat_finish_and_lookups(store: CacheRunStore) -> None:
    await store.start(owner_id="o", thread_id="t", run_id="r1")
    assert await store.heartbeat(owner_id="o", thread_id="t", run_id="r1", last_seq=7)
    got = await store.get(owner_id="o", thread_id="t", run_id="r1")
    assert got is not None
    assert got.last_seq == 7
    assert (await store.active_run_for_thread(owner_id="o", thread_id="t")) == got
    assert await store.get(owner_id="stranger", thread_id="t", run_id="r1") is None

    usage = {"input_tokens": 3, "output_tokens": 5}
    done = await store.finish(
        owner_id="o", thread_id="t", run_id="r1", status="complete", usage=usage, last_seq=9
    )
    assert done is not None
    assert (done.status, done.usage, done.last_seq) == ("complete", usage, 9)
    assert done.finished_at is not None
    assert await store.active_run_for_thread(owner_id="o", thread_id="t") is None
    assert not await store.heartbeat(owner_id="o", thread_id="t", run_id="r1")
    # Finishing twice keeps the first outcome; an unknown run is None.
    same = await store.finish(owner_id="o", thread_id="t", run_id="r1", status="errored")
    assert same is not None
    assert same.status == "complete"
    assert await store.finish(owner_id="o", thread_id="t", run_id="nope", status="errored") is None
    _, started = await store.start(owner_id="o", thread_id="t", run_id="r2")
    assert started
    assert await store.sweep() == []


async def test_a_stale_run_is_taken_over_and_ended_as_errored(store: CacheRunStore) -> None:
    old, _ = await store.start(owner_id="o", thread_id="t", run_id="r1")
    store._write(replace(old, heartbeat_at=old.heartbeat_at - timedelta(seconds=31)))
    new, started = await store.start(owner_id="o", thread_id="t", run_id="r2")
    assert started
    assert new.run_id == "r2"
    ended = await store.get(owner_id="o", thread_id="t", run_id="r1")
    assert ended is not None
    assert (ended.status, ended.error) == ("errored", "The run's worker stopped.")


async def test_a_stale_run_read_before_its_thread_is_used_again_is_ended(
    store: CacheRunStore,
) -> None:
    """A cache cannot be swept: a dead worker's run ends when a reattach or a thread read
    looks at it, so no reader waits on it forever."""
    old, _ = await store.start(owner_id="o", thread_id="t", run_id="r1")
    fresh = await store.get(owner_id="o", thread_id="t", run_id="r1")
    assert fresh is not None
    assert fresh.running, "a run within its lease is left alone"
    store._write(replace(old, heartbeat_at=old.heartbeat_at - timedelta(seconds=31)))
    assert await store.active_run_for_thread(owner_id="o", thread_id="t") is None
    ended = await store.get(owner_id="o", thread_id="t", run_id="r1")
    assert ended is not None
    assert (ended.status, ended.error) == ("errored", "The run's worker stopped.")
    assert ended.finished_at is not None
    _, started = await store.start(owner_id="o", thread_id="t", run_id="r2")
    assert started, "the thread is free again"


async def test_a_claim_whose_record_expired_is_taken_over(store: CacheRunStore) -> None:
    await store.start(owner_id="o", thread_id="t", run_id="r1")
    caches["default"].delete(store._run_key("o", "t", "r1"))
    assert await store.active_run_for_thread(owner_id="o", thread_id="t") is None
    _, started = await store.start(owner_id="o", thread_id="t", run_id="r2")
    assert started


def test_only_final_statuses_end_a_run() -> None:
    assert check_terminal("interrupt") == RunStatus.INTERRUPT
    with pytest.raises(ValueError, match="not a final run status"):
        check_terminal("running")
    record = RunRecord(owner_id="o", thread_id="t", run_id="r")
    assert record.running
    assert record.stale(10, now=record.heartbeat_at + timedelta(seconds=11))
    assert not record.stale(10, now=record.heartbeat_at + timedelta(seconds=9))
