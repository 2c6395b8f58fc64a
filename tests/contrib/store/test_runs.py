"""Run records in the database, and the sweeper that ends runs whose worker died."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pydantic_agent.chat_history import RunFencedError
from django_pydantic_agent.contrib.store.models import StoredAgentRun, StoredMessage
from django_pydantic_agent.contrib.store.runs import (
    SWEPT_ERROR,
    USAGE_SUMS,
    DefaultRunStore,
    asweep_runs,
    run_sweeper,
    sweep_runs,
)
from django_pydantic_agent.persistence.runs import HeldRun, RunStore
from django_pydantic_agent.persistence.usage import UsageTotals

pytestmark = [pytest.mark.django_db(transaction=True)]

VICTIM = Path(__file__).with_name("run_victim.py")


async def test_one_running_run_per_thread_and_its_life() -> None:
    store = DefaultRunStore()
    assert isinstance(store, RunStore)
    _, started = await store.start(owner_id="o", thread_id="t", run_id="r1", worker_id="w")
    assert started
    active, started = await store.start(owner_id="o", thread_id="t", run_id="r2")
    assert (active.run_id, started) == ("r1", False)
    assert (await store.start(owner_id="o", thread_id="t", run_id="r1"))[1] is True
    assert await store.heartbeat(owner_id="o", thread_id="t", run_id="r1", last_seq=3)
    assert (await store.active_run_for_thread(owner_id="o", thread_id="t")).last_seq == 3  # type: ignore[union-attr]
    assert await store.get(owner_id="x", thread_id="t", run_id="r1") is None

    usage = {"input_tokens": 2}
    done = await store.finish(
        owner_id="o", thread_id="t", run_id="r1", status="interrupt", usage=usage, last_seq=5
    )
    assert done is not None
    assert (done.status, done.usage, done.last_seq) == ("interrupt", usage, 5)
    assert await store.active_run_for_thread(owner_id="o", thread_id="t") is None
    assert not await store.heartbeat(owner_id="o", thread_id="t", run_id="r1")
    again = await store.finish(owner_id="o", thread_id="t", run_id="r1", status="errored")
    assert again is not None
    assert again.status == "interrupt"
    assert await store.finish(owner_id="o", thread_id="t", run_id="zz", status="errored") is None
    with pytest.raises(ValueError, match="not a final run status"):
        await store.finish(owner_id="o", thread_id="t", run_id="r1", status="running")
    second, started = await store.start(owner_id="o", thread_id="t", run_id="r2")
    assert (second.run_id, started) == ("r2", True)
    old, started = await store.start(owner_id="o", thread_id="t", run_id="r1")
    assert (old.status, started) == ("interrupt", False)


async def test_two_workers_starting_on_one_thread_at_once_cannot_both_win() -> None:
    store = DefaultRunStore()
    results = await asyncio.gather(
        *(store.start(owner_id="o", thread_id="t", run_id=f"r{i}") for i in range(4))
    )
    assert sum(started for _, started in results) == 1
    winners = {record.run_id for record, _ in results}
    assert len(winners) == 1
    assert await sync_to_async(StoredAgentRun.objects.filter(status="running").count)() == 1


def _finishing_after_the_failed_insert(run_id: str) -> Any:
    """A query wrapper: once a run's INSERT has failed, ``run_id`` ends (its own commit,
    after the INSERT's savepoint rolled back) before the next query runs, as a worker
    finishing that run between the INSERT and the re-read would."""
    failed = [False]

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if failed[0]:
            failed[0] = False
            context["cursor"].execute(
                f"UPDATE {StoredAgentRun._meta.db_table} SET status = 'complete' WHERE run_id = %s",
                [run_id],
            )
        try:
            return execute(sql, params, many, context)
        except Exception:
            if sql.startswith("INSERT") and "storedagentrun" in sql:
                failed[0] = True
            raise

    return wrapper


def test_a_run_started_as_the_threads_last_run_ends_starts_instead_of_failing() -> None:
    """Regression: the previous run finishing between a refused INSERT and the re-read was
    taken for a run id racing itself, and the lookup of that row raised (a 500 in the run
    endpoint of a client that posted its next turn right after RUN_FINISHED)."""
    store = DefaultRunStore()
    store._start_sync("o", "t", "r1", "w")
    with connection.execute_wrapper(_finishing_after_the_failed_insert("r1")):
        record, started = store._start_sync("o", "t", "r2", "w")
    assert (record.run_id, record.status, started) == ("r2", "running", True)
    statuses = dict(StoredAgentRun.objects.values_list("run_id", "status"))
    assert statuses == {"r1": "complete", "r2": "running"}


def test_a_thread_whose_runs_keep_ending_in_the_way_gives_up_with_the_integrity_error() -> None:
    from django.db import IntegrityError

    store = DefaultRunStore()
    table = StoredAgentRun._meta.db_table
    inside = [False]

    ended: list[int] = []
    started = [0]

    def churn(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        """Before each INSERT of ``never``, another run starts; once refused, it ends.

        It ends at the store's next read: on PostgreSQL nothing else runs in a transaction
        whose INSERT failed until it is rolled back to its savepoint.
        """
        if inside[0] or "storedagentrun" not in sql:
            return execute(sql, params, many, context)
        inside[0] = True
        try:
            if ended and sql.startswith("SELECT"):
                context["cursor"].execute(
                    f"UPDATE {table} SET status = 'complete' WHERE id = %s", [ended.pop()]
                )
            elif sql.startswith("INSERT"):
                started[0] += 1
                other = StoredAgentRun.objects.create(
                    owner_id="o", thread_id="t", run_id=f"other-{started[0]}"
                )
                ended.append(other.pk)
            return execute(sql, params, many, context)
        finally:
            inside[0] = False

    with connection.execute_wrapper(churn), pytest.raises(IntegrityError):
        store._start_sync("o", "t", "never", "w")
    assert not StoredAgentRun.objects.filter(run_id="never").exists()
    assert started[0] >= 2, "the store tried again after a run ended in its way"


async def test_the_sweeper_leaves_live_runs_alone() -> None:
    store = DefaultRunStore()
    await store.start(owner_id="o", thread_id="t", run_id="r1")
    assert await asweep_runs(lease=60) == []
    assert await store.sweep(lease=60) == []
    with pytest.raises(ValueError, match="lease"):
        sweep_runs(lease=0)
    later = timezone.now() + timedelta(seconds=61)
    (swept,) = await sync_to_async(sweep_runs)(lease=60, now=later)
    assert (swept.run_id, swept.status, swept.error) == ("r1", "errored", SWEPT_ERROR)


async def test_run_sweeper_sweeps_at_start_and_keeps_going() -> None:
    store = DefaultRunStore()
    await store.start(owner_id="o", thread_id="t", run_id="r1")
    await sync_to_async(StoredAgentRun.objects.update)(
        heartbeat_at=timezone.now() - timedelta(seconds=10)
    )
    task = asyncio.create_task(run_sweeper(lease=5, interval=0.01))
    try:
        for _ in range(200):
            run = await store.get(owner_id="o", thread_id="t", run_id="r1")
            if run is not None and run.status == "errored":
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert run is not None
    assert run.status == "errored"
    with pytest.raises(ValueError, match="interval"):
        await run_sweeper(lease=5, interval=0)


def _database_name() -> str:
    return str(connection.settings_dict["NAME"])


@pytest.mark.django_db(transaction=True)
def test_a_killed_workers_run_is_swept_and_nothing_stays_running(
    request_as: Any, django_user_model: Any
) -> None:
    env = {**os.environ, "DPA_VICTIM_DB": _database_name()}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    victim = subprocess.Popen(
        [sys.executable, str(VICTIM)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert victim.stdout is not None
        line = victim.stdout.readline()
        assert line.strip() == "ready", victim.stderr.read() if victim.stderr else line
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL

    run = StoredAgentRun.objects.get(run_id="r1")
    assert run.status == "running"
    assert run.worker_id == f"pid-{victim.pid}"
    answer = StoredMessage.objects.get(message_id="m1")
    assert (answer.status, answer.content) == ("active", "Half an answer")

    StoredAgentRun.objects.filter(pk=run.pk).update(
        heartbeat_at=timezone.now() - timedelta(seconds=5)
    )
    out = io.StringIO()
    call_command("agent_store_sweep_runs", "--lease", "2", "--dry-run", stdout=out)
    assert out.getvalue().strip() == "Would sweep 1 stale run(s)."
    call_command("agent_store_sweep_runs", "--lease", "2", stdout=out)
    assert "Swept 1 stale run(s) as errored." in out.getvalue()

    run.refresh_from_db()
    assert (run.status, run.error) == ("errored", SWEPT_ERROR)
    assert run.finished_at is not None
    assert not StoredAgentRun.objects.filter(status="running").exists()
    answer.refresh_from_db()
    assert answer.status == "errored"
    assert answer.record["in_progress"] is False  # type: ignore[index]
    assert [c["status"] for c in answer.tool_calls] == ["errored"]  # type: ignore[union-attr]
    assert [s["status"] for s in answer.reasonings] == ["errored"]  # type: ignore[union-attr]
    user = StoredMessage.objects.get(message_id="u1")
    assert user.status == "complete"

    # The thread's owner sees the failed answer as errored.
    from django_pydantic_agent.contrib.store.stores import DefaultConversationStore as Store

    loaded = Store()._fetch("t1", "victim")
    assert loaded is not None
    statuses = {m["id"]: m["status"] for m in loaded.messages}
    assert statuses["m1"] == "errored"
    assert statuses["u1"] == "complete"
    # A second sweep finds nothing.
    call_command("agent_store_sweep_runs", "--lease", "2", stdout=out)
    assert out.getvalue().strip().endswith("Swept 0 stale run(s) as errored.")


def test_the_command_refuses_a_lease_that_is_not_positive() -> None:
    with pytest.raises(CommandError, match=r"--lease=0\.0 is not valid"):
        call_command("agent_store_sweep_runs", "--lease", "0")


def test_the_ledger_sums_every_field_of_the_totals() -> None:
    # usage_totals reads each field of UsageTotals from its sum_<field>: a field without a sum
    # would always read 0.
    assert set(USAGE_SUMS) == {f"sum_{name}" for name in UsageTotals.__dataclass_fields__}


# One worker's beat, and the fence against a worker that stalled past its lease.


async def _stale(run_id: str) -> None:
    """The run's heartbeat as a worker that stopped beating a minute ago left it."""
    old = timezone.now() - timedelta(seconds=60)
    await StoredAgentRun.objects.filter(run_id=run_id).aupdate(heartbeat_at=old)


async def test_one_beat_renews_every_run_of_its_worker_in_two_queries() -> None:
    store = DefaultRunStore()
    runs = []
    for n in range(3):
        await store.start(owner_id="o", thread_id=f"t{n}", run_id=f"r{n}", worker_id="w1")
        runs.append(HeldRun("o", f"t{n}", f"r{n}", 0))
    await store.start(owner_id="o", thread_id="other", run_id="x", worker_id="w2")
    for run_id in ("r0", "r1", "r2", "x"):
        await _stale(run_id)

    def beat() -> set[HeldRun]:
        with CaptureQueriesContext(connection) as queries:
            lost = async_to_sync(store.beat)(worker_id="w1", runs=runs)
        assert len(queries) == 2, [q["sql"] for q in queries]
        return lost

    assert await sync_to_async(beat)() == set()
    fresh = timezone.now() - timedelta(seconds=5)
    rows = {row.run_id: row async for row in StoredAgentRun.objects.all()}
    assert all(rows[f"r{n}"].heartbeat_at > fresh for n in range(3))
    assert rows["x"].heartbeat_at < fresh  # another worker's run is not this worker's to renew


async def test_the_beat_names_the_runs_another_worker_took_over_or_that_ended() -> None:
    store = DefaultRunStore()
    runs = [HeldRun("o", f"t{n}", f"r{n}", 0) for n in range(3)]
    for run in runs:
        await store.start(
            owner_id="o",
            thread_id=run.thread_id,
            run_id=run.run_id,
            worker_id="w1",
            resume_input={"input": {}},
        )
    await _stale("r0")
    taken, _ = await store.take_over(lease=8, worker_id="w2", max_resumes=2)
    assert [record.run_id for record in taken] == ["r0"]
    await store.finish(owner_id="o", thread_id="t1", run_id="r1", status="complete")
    assert await store.beat(worker_id="w1", runs=runs) == {runs[0], runs[1]}


async def test_an_old_execution_can_neither_end_nor_hand_over_the_new_one() -> None:
    store = DefaultRunStore()
    await store.start(
        owner_id="o", thread_id="t", run_id="r", worker_id="w1", resume_input={"input": {}}
    )
    await _stale("r")
    [taken], _ = await store.take_over(lease=8, worker_id="w2", max_resumes=2)
    assert taken.resumes == 1
    # The stalled worker comes back and ends what it thinks is its run: refused.
    assert not await store.hand_over(owner_id="o", thread_id="t", run_id="r", epoch=0)
    ended = await store.finish(owner_id="o", thread_id="t", run_id="r", status="errored", epoch=0)
    assert ended is not None
    assert (ended.status, ended.worker_id) == ("running", "w2")
    done = await store.finish(owner_id="o", thread_id="t", run_id="r", status="complete", epoch=1)
    assert done is not None
    assert done.status == "complete"


async def test_the_fence_refuses_every_write_of_an_old_execution() -> None:
    store = DefaultRunStore()
    await store.start(
        owner_id="o", thread_id="t", run_id="r", worker_id="w1", resume_input={"input": {}}
    )

    def write(epoch: int) -> None:
        with transaction.atomic():
            store.fence(HeldRun("o", "t", "r", epoch))()

    await sync_to_async(write)(0)  # the current execution writes
    await _stale("r")
    await store.take_over(lease=8, worker_id="w2", max_resumes=2)
    with pytest.raises(RunFencedError, match=r"Run 'r' was taken over by another worker"):
        await sync_to_async(write)(0)
    await sync_to_async(write)(1)  # the new execution writes on
