"""The mount's sweeper: runs whose worker died end ``errored``, at start-up and periodically,
once per interval across every worker sharing the cache."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from ag_ui.core import RunStartedEvent, TextMessageContentEvent, TextMessageStartEvent
from ag_ui_validate.pytest_plugin import assert_valid_agui
from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.utils import timezone

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, RunOptions
from django_pydantic_agent.agui.runs import WORKER_ID, RunCoordinator
from django_pydantic_agent.chat_history import (
    ChatCreate,
    MessageCreate,
    MessageToolCallCreate,
    MessageUpdate,
)
from django_pydantic_agent.contrib.store.models import StoredAgentRun
from django_pydantic_agent.contrib.store.repositories import (
    OrmChatRepository,
    OrmMessageRepository,
)
from django_pydantic_agent.contrib.store.runs import SWEPT_ERROR, DefaultRunStore
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import NullConversationStore
from django_pydantic_agent.persistence.runs import CacheRunStore, RunRecord
from tests.agui.agents import text_agent
from tests.agui.conftest import logged_in, sse_frames
from tests.agui.urls_sweeper import never, sweeping

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.agui.urls_sweeper"),
]


@pytest.fixture(autouse=True)
def _no_sweep_lease() -> None:
    """Every test starts with no worker holding the sweep lease (the cache outlives tests)."""
    cache.clear()


class CountingRunStore(DefaultRunStore):
    """The ORM run store, counting the sweeps that actually ran."""

    def __init__(self) -> None:
        self.sweeps: list[list[RunRecord]] = []

    async def sweep(self, *, lease: float = 60.0) -> list[RunRecord]:
        swept = await super().sweep(lease=lease)
        self.sweeps.append(swept)
        return swept


def coordinator(run_store: Any, **options: Any) -> RunCoordinator:
    return RunCoordinator(lambda *args: None, run_store=run_store, **options)


async def dead_run(owner_id: str, *, thread_id: str = "thread-1", run_id: str = "run-1") -> None:
    """What a worker killed mid-answer leaves: a ``running`` run with an old heartbeat, and a
    half-written answer with an open tool call."""
    runs = DefaultRunStore()
    await runs.start(owner_id=owner_id, thread_id=thread_id, run_id=run_id, worker_id="gone:1")
    chats = OrmChatRepository(owner_id=owner_id)
    messages = OrmMessageRepository(chats)
    chat = await chats.create_chat(ChatCreate(thread_id=thread_id, user_uuid=chats.user_uuid))
    async with messages.transaction():
        await messages.create_message(
            MessageCreate(
                chat_uuid=chat.chat_uuid,
                agui_id=f"user-{run_id}",
                content="Tell me a story",
                status="complete",
                in_progress=False,
                run_id=run_id,
            )
        )
        answer = await messages.create_message(
            MessageCreate(
                chat_uuid=chat.chat_uuid,
                agui_id=f"answer-{run_id}",
                role="assistant",
                run_id=run_id,
            )
        )
        await messages.create_message_tool_call(
            MessageToolCallCreate(
                message_uuid=answer.message_uuid, tool_call_id=f"call-{run_id}", run_id=run_id
            )
        )
    await messages.update_message(
        answer.message_uuid, MessageUpdate(content_delta="Once upon a", content_offset=0)
    )
    await runs.heartbeat(owner_id=owner_id, thread_id=thread_id, run_id=run_id, last_seq=7)
    await StoredAgentRun.objects.filter(thread_id=thread_id, run_id=run_id).aupdate(
        heartbeat_at=timezone.now() - timedelta(minutes=5)
    )


async def run_status(run_id: str = "run-1") -> str:
    return (await StoredAgentRun.objects.aget(run_id=run_id)).status


async def wait_for_status(status: str, run_id: str = "run-1", *, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if await run_status(run_id) == status:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"run {run_id!r} is still {await run_status(run_id)!r}")


# At start-up: the mount's first request starts the sweeper, which sweeps at once.


async def test_the_first_request_sweeps_a_run_a_dead_worker_left_running(alice: Any) -> None:
    await dead_run(str(alice.pk))
    async with await logged_in(alice) as http:
        await http.get("/sweeping/threads/")
        await wait_for_status("errored")
        thread = (await http.get("/sweeping/threads/thread-1/")).json()
        reattach = await http.get("/sweeping/runs/thread-1/run-1/")
    run = await StoredAgentRun.objects.aget(run_id="run-1")
    assert (run.error, run.finished_at is not None) == (SWEPT_ERROR, True)
    # The thread reads back sane: no active run, the cut-off answer errored, what streamed kept.
    assert thread["activeRun"] is None
    user, answer = thread["messages"]
    assert (user["status"], answer["status"]) == ("complete", "errored")
    assert answer["content"] == "Once upon a"
    assert answer["error"] == SWEPT_ERROR
    book = answer["chatHistory"]
    assert book["runOutcome"] == {"run_id": "run-1", "type": "error", "message": SWEPT_ERROR}
    assert [call["status"] for call in book["toolCalls"]] == ["errored"]
    assert "runOutcome" not in user["chatHistory"]
    # A reattach to the swept run answers from storage and ends with RUN_ERROR.
    events = [event for _, event in sse_frames(reattach.text)]
    assert [e["type"] for e in events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_ERROR"]
    assert events[-1]["message"] == SWEPT_ERROR
    assert "gone:1" not in reattach.text
    assert_valid_agui(events)
    # The next run on the thread is accepted: the dead run no longer holds it.
    assert (
        await DefaultRunStore().active_run_for_thread(owner_id=str(alice.pk), thread_id="thread-1")
        is None
    )


async def test_a_reattach_following_a_dead_workers_relayed_log_ends_once_it_is_swept(
    alice: Any,
) -> None:
    from django_pydantic_agent.agui.relay import run_digest

    owner = str(alice.pk)
    await dead_run(owner)
    # What the dead worker had relayed to the shared cache before it was killed.
    key = f"django_pydantic_agent:relay:{run_digest(owner, 'thread-1', 'run-1')}"
    logged = [
        RunStartedEvent(thread_id="thread-1", run_id="run-1"),
        TextMessageStartEvent(message_id="answer-run-1", role="assistant"),
        TextMessageContentEvent(message_id="answer-run-1", delta="Once upon a"),
    ]
    await cache.aset_many(
        {
            f"{key}:head": {"batches": 1, "last_seq": 3, "terminal": False},
            f"{key}:1": [(seq, raw) for seq, raw in enumerate(logged, start=1)],
        }
    )
    async with await logged_in(alice) as http:
        # The "never" mount does not sweep, so the reattach follows the relayed log...
        reattach = asyncio.ensure_future(http.get("/never/runs/thread-1/run-1/?after=1"))
        await asyncio.sleep(0.5)
        assert not reattach.done()
        # ...until another worker's sweeper ends the run.
        assert [run.run_id for run in await sweeping.sweep() or []] == ["run-1"]
        resumed = await asyncio.wait_for(reattach, timeout=20)
    frames = sse_frames(resumed.text)
    types = [event["type"] for _, event in frames]
    assert types == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "MESSAGES_SNAPSHOT",
        "RUN_ERROR",
    ]
    assert frames[-1][1]["message"] == SWEPT_ERROR
    snapshot = frames[-2][1]["messages"]
    assert [m["content"] for m in snapshot if m["role"] == "assistant"] == ["Once upon a"]
    assert_valid_agui([event for _, event in frames])


async def test_a_live_run_is_left_alone(alice: Any) -> None:
    await DefaultRunStore().start(owner_id=str(alice.pk), thread_id="thread-1", run_id="run-1")
    store = CountingRunStore()
    sweeper = coordinator(store)
    assert await sweeper.sweep() == []
    assert await run_status() == "running"
    assert store.sweeps == [[]]


# Periodically: every interval, not only at start-up.


async def test_the_sweeper_keeps_sweeping_every_interval(alice: Any) -> None:
    store = CountingRunStore()
    sweeper = coordinator(store, sweep_interval_seconds=0.05, lease_seconds=30)
    await dead_run(str(alice.pk), thread_id="thread-1", run_id="run-1")
    try:
        assert sweeper.start_sweeper()
        assert sweeper.start_sweeper()  # idempotent: still one task
        await wait_for_status("errored", "run-1")
        # A worker dies later: a later sweep finds its run (the lease rounds up to 1 s).
        await dead_run(str(alice.pk), thread_id="thread-2", run_id="run-2")
        await wait_for_status("errored", "run-2")
    finally:
        await sweeper.aclose()
    assert [len(swept) for swept in store.sweeps if swept] == [1, 1]
    assert len(store.sweeps) >= 2
    await sweeper.aclose()  # closing twice is fine


async def test_a_failing_sweep_is_logged_and_retried(caplog: Any) -> None:
    class Broken(DefaultRunStore):
        calls = 0

        async def sweep(self, *, lease: float = 60.0) -> list[RunRecord]:
            Broken.calls += 1
            if Broken.calls == 1:
                raise RuntimeError("database went away")
            return []

    sweeper = coordinator(Broken(), sweep_interval_seconds=0.01)
    try:
        sweeper.start_sweeper()
        deadline = time.monotonic() + 20
        while Broken.calls < 2 and time.monotonic() < deadline:
            cache.clear()  # as if the interval's lease had expired
            await asyncio.sleep(0.01)
    finally:
        await sweeper.aclose()
    assert Broken.calls >= 2
    [record] = [r for r in caplog.records if "Sweeping stale runs failed" in r.getMessage()]
    assert str(record.exc_info[1]) == "database went away"  # type: ignore[index]


# Across workers: one sweep per interval, whoever takes the lease first.


async def test_two_workers_sharing_a_cache_sweep_once_per_interval(alice: Any) -> None:
    first_store, second_store = CountingRunStore(), CountingRunStore()
    first = coordinator(first_store, sweep_interval_seconds=60)
    second = coordinator(second_store, sweep_interval_seconds=60)
    await dead_run(str(alice.pk))
    swept = await first.sweep()
    assert [run.run_id for run in swept or []] == ["run-1"]
    assert await second.sweep() is None
    assert await first.sweep() is None  # the interval is not over for the winner either
    assert len(first_store.sweeps) + len(second_store.sweeps) == 1
    assert cache.get(first.sweep_lease_key) == WORKER_ID
    assert first.sweep_lease_key == second.sweep_lease_key
    # Both sweepers running: still one sweep for the interval.
    cache.clear()
    await dead_run(str(alice.pk), thread_id="thread-2", run_id="run-2")
    try:
        first.start_sweeper()
        second.start_sweeper()
        await wait_for_status("errored", "run-2")
        for _ in range(20):
            await asyncio.sleep(0)
    finally:
        await first.aclose()
        await second.aclose()
    assert len(first_store.sweeps) + len(second_store.sweeps) == 2


# Turned off, and outside an event loop.


async def test_sweep_interval_zero_never_sweeps(alice: Any) -> None:
    await dead_run(str(alice.pk))
    async with await logged_in(alice) as http:
        thread = (await http.get("/never/threads/thread-1/")).json()
    assert never.start_sweeper() is False
    assert never.coordinator is not None
    assert never.coordinator._sweeper is None
    assert await run_status() == "running"
    # The dead run still reads as the thread's active run until something sweeps it.
    assert thread["activeRun"] == {"runId": "run-1", "lastSeq": 7}
    swept = await sweeping.sweep()  # the explicit hook works on any mount
    assert [run.run_id for run in swept or []] == ["run-1"]


def test_no_sweeper_starts_outside_an_event_loop() -> None:
    assert sweeping.start_sweeper() is False


async def test_a_server_without_durable_runs_has_no_sweeper() -> None:
    server = AGUIServer(
        text_agent(),
        conversation_store=NullConversationStore(),
        access=AccessPolicy(csrf_exempt=True),
    )
    assert server.coordinator is None
    assert server.start_sweeper() is False
    assert await server.sweep() is None
    await server.aclose()


async def test_the_lifespan_hooks_start_and_stop_the_sweeper() -> None:
    server = AGUIServer(
        text_agent(),
        conversation_store=DefaultConversationStore(),
        access=AccessPolicy(csrf_exempt=True),
    )
    assert server.start_sweeper() is True
    assert server.coordinator is not None
    task = server.coordinator._sweeper
    assert task is not None
    assert not task.done()
    await server.aclose()
    assert task.cancelled()


async def test_a_sweeper_left_on_another_event_loop_is_replaced() -> None:
    sweeper = coordinator(DefaultRunStore(), sweep_interval_seconds=60)
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever)
    thread.start()

    async def start() -> asyncio.Task[None] | None:
        sweeper.start_sweeper()
        return sweeper._sweeper

    async def settle(task: asyncio.Task[None]) -> None:
        await asyncio.wait({task})

    def on_other(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, other).result(timeout=10)

    try:
        old = on_other(start())
        assert old is not None
        assert sweeper.start_sweeper()  # this loop's sweeper replaces the other loop's
        assert sweeper._sweeper is not old
        on_other(settle(old))
        assert old.cancelled()
        await sweeper.aclose()
        # aclose() from this loop cancels a sweeper running on another loop too.
        moved = on_other(start())
        await sweeper.aclose()
        on_other(settle(moved))
        assert moved.cancelled()
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(timeout=10)
        other.close()
    await sweeper.aclose()


# The options.


def test_the_options_read_back_and_reach_the_coordinator() -> None:
    assert sweeping.runs.sweep_interval_seconds == 30.0
    # The defaults: a dead worker's run is taken over within 10 s (docs/reliability.md).
    assert sweeping.runs.run_lease_seconds == 8.0
    assert sweeping.runs.run_heartbeat_seconds == 2.0
    assert sweeping.coordinator is not None
    assert sweeping.coordinator.sweep_interval_seconds == 30.0
    assert sweeping.coordinator.lease_seconds == 8.0
    server = AGUIServer(
        text_agent(),
        conversation_store=DefaultConversationStore(),
        access=AccessPolicy(csrf_exempt=True),
        runs=RunOptions(run_heartbeat_seconds=1, run_lease_seconds=4),
    )
    assert server.coordinator is not None
    assert server.coordinator.lease_seconds == 4.0
    assert server.coordinator.manager._heartbeat_interval == 1.0


def test_a_cache_run_store_takes_the_mounts_lease() -> None:
    from django_pydantic_agent.persistence import DjangoSessionConversationStore

    server = AGUIServer(
        text_agent(),
        conversation_store=DjangoSessionConversationStore(),
        access=AccessPolicy(csrf_exempt=True),
        runs=RunOptions(run_lease_seconds=90),
    )
    assert isinstance(server.run_store, CacheRunStore)
    assert server.run_store.lease == 90


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"run_lease_seconds": 2}, ValueError, r"run_lease_seconds=2 must exceed"),
        ({"run_lease_seconds": 5, "run_heartbeat_seconds": 5}, ValueError, "must exceed"),
        ({"run_lease_seconds": 0}, ValueError, r"run_lease_seconds=0 is not allowed"),
        ({"run_heartbeat_seconds": 0}, ValueError, r"run_heartbeat_seconds=0 is not allowed"),
        ({"sweep_interval_seconds": -1}, ValueError, r"sweep_interval_seconds=-1"),
        ({"sweep_interval_seconds": "60"}, TypeError, r"sweep_interval_seconds='60'"),
        ({"run_lease_seconds": True}, TypeError, r"run_lease_seconds=True"),
    ],
)
def test_bad_sweeper_options_fail_at_construction(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        AGUIServer(
            text_agent(),
            conversation_store=DefaultConversationStore(),
            access=AccessPolicy(csrf_exempt=True),
            runs=RunOptions(**options),
        )


def test_the_lease_error_names_the_fix() -> None:
    with pytest.raises(ValueError, match=r"such as 6") as caught:
        AGUIServer(
            text_agent(),
            conversation_store=DefaultConversationStore(),
            access=AccessPolicy(csrf_exempt=True),
            runs=RunOptions(run_lease_seconds=2),
        )
    assert "sweep live runs" in str(caught.value)


async def test_the_sweeper_closes_its_old_database_connections() -> None:
    from django.db import connection

    sweeper = coordinator(DefaultRunStore())

    def connect() -> Any:
        connection.ensure_connection()
        return connection.connection

    before = await sync_to_async(connect)()
    assert await sweeper.sweep() == []
    # CONN_MAX_AGE=0: the sweeping thread's connection is closed after the sweep.
    assert await sync_to_async(lambda: connection.connection)() is None
    assert before is not None


@pytest.mark.django_db(transaction=True)
def test_a_connection_inside_a_transaction_is_never_closed_under_it() -> None:
    from django.db import connection, transaction

    from django_pydantic_agent.agui.runs import _close_old_connections

    with transaction.atomic():
        connection.ensure_connection()
        _close_old_connections()
        assert connection.connection is not None
        assert not connection.needs_rollback
    _close_old_connections()
    assert connection.connection is None
