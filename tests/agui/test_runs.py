"""Durable runs over Django's ASGI app: disconnect survival, reattach, cancel, the busy-thread
policy, owner checks, and the same flows on each store."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui
from asgiref.sync import sync_to_async

from django_pydantic_agent.agui import REDACTED_RUN_ERROR
from django_pydantic_agent.agui.runs import RunCoordinator
from tests.agui.agents import GATE, HANG_LOG
from tests.agui.conftest import (
    asgi_app,
    drive_until_disconnect,
    logged_in,
    run_body,
    session_id,
    sse_frames,
    streamed_events,
)
from tests.support.servers import serve_asgi

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


def anonymous(session: str | None = None) -> httpx.AsyncClient:
    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=asgi_app()), base_url="http://testserver"
    )
    if session is not None:
        http.cookies.set("sessionid", session)
    return http


async def wait_for(predicate: Any, *, seconds: float = 10.0) -> Any:
    """Poll the async ``predicate()`` until it returns something truthy; return that."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = await predicate()
        if found:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError("timed out")


async def active_run(http: httpx.AsyncClient, prefix: str, thread_id: str = "thread-1") -> Any:
    response = await http.get(f"{prefix}threads/{thread_id}/")
    return response.json().get("activeRun") if response.status_code == 200 else None


# Every frame carries id: <run_id>:<seq>.


async def test_every_frame_of_a_run_carries_its_run_id_and_sequence_number(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await http.post("/stored/", json=run_body())
    frames = sse_frames(response.text)
    assert [frame_id for frame_id, _ in frames] == [
        f"run-1:{seq}" for seq in range(1, len(frames) + 1)
    ]
    events = [event for _, event in frames]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert_valid_agui(events)


async def test_run_finished_carries_the_token_usage_and_the_run_record_keeps_it(
    alice: Any,
) -> None:
    from django_pydantic_agent.contrib.store.models import StoredAgentRun

    async with await logged_in(alice) as http:
        response = await http.post("/stored/", json=run_body())
    finished = next(e for _, e in sse_frames(response.text) if e["type"] == "RUN_FINISHED")
    [usage] = finished["usage"]
    assert usage["inputTokens"] > 0
    assert usage["outputTokens"] > 0
    assert usage["model"]
    await RunCoordinator.wait_for_all_runs()
    row = await StoredAgentRun.objects.aget(thread_id="thread-1", run_id="run-1")
    assert row.status == "complete"
    assert row.usage["tokens"][0]["input_tokens"] == usage["inputTokens"]
    assert row.last_seq == len(sse_frames(response.text))


async def test_a_finished_run_is_not_held_in_memory_by_the_worker(alice: Any) -> None:
    from django_pydantic_agent.chat_history import RunHandle

    async with await logged_in(alice) as http:
        for n in (1, 2, 3):
            body = run_body(thread_id="kept", run_id=f"run-{n}")
            response = await http.post("/stored/", json=body)
            assert sse_frames(response.text)[-1][1]["type"] == "RUN_FINISHED"

    async def released() -> bool:
        gc.collect()
        return not [
            o for o in gc.get_objects() if isinstance(o, RunHandle) and o.thread_id == "kept"
        ]

    # Each run's handle holds its whole event log: a worker that kept them would grow with
    # every run it served. Once stored, a finished run is answered from storage instead.
    # (Not wait_for_all_runs(): a test's drain would let go of them whatever the worker does.)
    await wait_for(released)
    async with await logged_in(alice) as http:
        again = await http.get("/stored/runs/kept/run-2/")
    assert [e["type"] for _, e in sse_frames(again.text)] == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "RUN_FINISHED",
    ]


# A disconnect stops the reading, not the run: on every store the run persists as complete.


async def _stored_session(key: str) -> str:
    """What the session row holds now (a failure's explanation for the session stores)."""
    from django.contrib.sessions.backends.db import SessionStore

    def read() -> str:
        stored = SessionStore(key)
        return f"session {key!r} holds {dict(stored.items())!r}"

    return await sync_to_async(read)()


@pytest.mark.parametrize("prefix", ["/anon/", "/session/", "/scoped/", "/scoped-session/"])
async def test_a_disconnect_stops_only_the_reading_and_the_run_completes(prefix: str) -> None:
    sent = await drive_until_disconnect(prefix, run_body(), until=b"TOOL_CALL_START")
    seen = [e["type"] for e in streamed_events(sent)]
    assert "RUN_FINISHED" not in seen
    await RunCoordinator.wait_for_all_runs()
    async with anonymous(session_id(sent)) as http:
        thread = await http.get(f"{prefix}threads/thread-1/")
        finished = await http.get(f"{prefix}runs/thread-1/run-1/")
    assert thread.status_code == 200, await _stored_session(session_id(sent))
    messages = thread.json()["messages"]
    assert messages[-1]["content"] == "The sum is 5."
    assert {m["status"] for m in messages} == {"complete"}
    assert thread.json()["activeRun"] is None
    # Reattaching to the finished run answers from storage: a snapshot and its terminal event.
    events = [e for _, e in sse_frames(finished.text)]
    assert [e["type"] for e in events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert events[1]["messages"][-1]["content"] == "The sum is 5."
    assert_valid_agui(events)


# Reattach: a second connection gets exactly what the first had not seen, then the live tail.


async def test_a_second_connection_reattaches_with_no_gap_and_no_duplicate(alice: Any) -> None:
    GATE.reset()
    async with await logged_in(alice) as http, await logged_in(alice) as second:
        first = asyncio.ensure_future(http.post("/gated/", json=run_body()))
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        running = await wait_for(
            lambda: _at_least(active_run(second, "/gated/"), seq=3), seconds=10
        )
        after = running["lastSeq"]
        assert running["runId"] == "run-1"
        reattach = asyncio.ensure_future(
            second.get("/gated/runs/thread-1/run-1/", headers={"Last-Event-ID": f"run-1:{after}"})
        )
        await asyncio.sleep(0.05)
        GATE.released.set()
        original, resumed = await asyncio.gather(first, reattach)
    whole = sse_frames(original.text)
    tail = sse_frames(resumed.text)
    # The resumed stream opens the run again (no ids: the client saw those), re-opens the
    # message still streaming, then continues exactly after ``after``.
    reopened = [event for frame_id, event in tail if frame_id is None]
    assert [e["type"] for e in reopened] == ["RUN_STARTED", "TEXT_MESSAGE_START"]
    assert reopened[0]["runId"] == "run-1"
    assert [frame for frame in tail if frame[0] is not None] == whole[after:]
    assert_valid_agui([event for _, event in tail])


async def _at_least(pending: Any, *, seq: int) -> Any:
    found = await pending
    return found if found and found["lastSeq"] >= seq else None


async def test_after_beyond_the_log_or_from_another_run_is_a_400(alice: Any) -> None:
    GATE.reset()
    async with await logged_in(alice) as http, await logged_in(alice) as second:
        first = asyncio.ensure_future(http.post("/gated/", json=run_body()))
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        await wait_for(lambda: active_run(second, "/gated/"))
        beyond = await second.get("/gated/runs/thread-1/run-1/?after=999")
        other = await second.get(
            "/gated/runs/thread-1/run-1/", headers={"Last-Event-ID": "run-0:2"}
        )
        garbled = await second.get("/gated/runs/thread-1/run-1/?after=two")
        GATE.released.set()
        await first
    assert beyond.status_code == 400
    assert "beyond run 'run-1'" in beyond.json()["error"]
    assert other.status_code == 400
    assert garbled.status_code == 400
    assert "sequence number" in garbled.json()["error"]


# Cancel: any worker, idempotent, only that run; the stream ends with outcome cancelled.


async def test_cancel_stops_the_run_with_outcome_cancelled_and_records_interrupted(
    alice: Any,
) -> None:
    HANG_LOG.clear()
    async with await logged_in(alice) as http, await logged_in(alice) as other_tab:
        streaming = asyncio.ensure_future(http.post("/hanging-durable/", json=run_body()))
        await wait_for(lambda: active_run(other_tab, "/hanging-durable/"))
        cancelled = await other_tab.post("/hanging-durable/runs/thread-1/run-1/cancel/")
        response = await asyncio.wait_for(streaming, timeout=10)
        await RunCoordinator.wait_for_all_runs()
        again = await other_tab.post("/hanging-durable/runs/thread-1/run-1/cancel/")
        thread = await other_tab.get("/hanging-durable/threads/thread-1/")
    assert cancelled.status_code == 202
    assert cancelled.json() == {"runId": "run-1", "status": "cancelling", "cancelled": True}
    events = [e for _, e in sse_frames(response.text)]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"] == {"type": "cancelled"}
    assert_valid_agui(events)
    assert HANG_LOG == ["started", "cancelled", "stopped"]
    # Idempotent: a second cancel changes nothing and says the run already ended.
    assert again.status_code == 200
    assert again.json() == {"runId": "run-1", "status": "interrupted", "cancelled": False}
    messages = thread.json()["messages"]
    assert messages[-1]["content"] == "Working "
    assert messages[-1]["status"] == "interrupted"
    assert thread.json()["activeRun"] is None


async def test_a_cancel_intent_in_the_cache_reaches_a_run_this_process_did_not_cancel(
    alice: Any,
) -> None:
    # Another worker only writes the intent: the owner sees it on its next event or heartbeat.
    from tests.agui.urls import hanging_durable

    coordinator = hanging_durable.coordinator
    assert coordinator is not None
    async with await logged_in(alice) as http, await logged_in(alice) as other_tab:
        streaming = asyncio.ensure_future(http.post("/hanging-durable/", json=run_body()))
        await wait_for(lambda: active_run(other_tab, "/hanging-durable/"))
        key = coordinator._cancel_key(str(alice.pk), "thread-1", "run-1")
        from django.core.cache import cache

        await cache.aset(key, True)
        handle = coordinator.manager.get("thread-1", "run-1", owner=str(alice.pk))
        assert handle is not None
        # Ask as the heartbeat does (the hanging model yields no further event).
        await coordinator.manager._check_cancel(handle, coordinator)
        response = await asyncio.wait_for(streaming, timeout=10)
    events = [e for _, e in sse_frames(response.text)]
    assert events[-1]["outcome"] == {"type": "cancelled"}


async def test_a_strangers_run_is_a_404_exactly_like_a_missing_one(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http, await logged_in(bob) as stranger:
        streaming = asyncio.ensure_future(http.post("/hanging-durable/", json=run_body()))
        await wait_for(lambda: active_run(http, "/hanging-durable/"))
        theirs = await stranger.get("/hanging-durable/runs/thread-1/run-1/")
        their_cancel = await stranger.post("/hanging-durable/runs/thread-1/run-1/cancel/")
        missing = await stranger.get("/hanging-durable/runs/thread-1/no-such-run/")
        missing_cancel = await stranger.post("/hanging-durable/runs/nope/run-1/cancel/")
        their_thread = await stranger.get("/hanging-durable/threads/thread-1/")
        still_running = await active_run(http, "/hanging-durable/")
        await http.post("/hanging-durable/runs/thread-1/run-1/cancel/")
        await asyncio.wait_for(streaming, timeout=10)
    for response in (theirs, their_cancel, missing, missing_cancel):
        assert response.status_code == 404
        assert response.json() == {"error": "No such run."}
    assert their_thread.status_code == 404
    # The stranger's cancel did not stop the run.
    assert still_running["runId"] == "run-1"


# A second run on a busy thread.


async def test_a_second_run_on_a_busy_thread_is_a_409_by_default(alice: Any) -> None:
    async with await logged_in(alice) as http, await logged_in(alice) as other_tab:
        streaming = asyncio.ensure_future(http.post("/hanging-durable/", json=run_body()))
        await wait_for(lambda: active_run(other_tab, "/hanging-durable/"))
        second = await other_tab.post("/hanging-durable/", json=run_body(run_id="run-2"))
        retried = await other_tab.post("/hanging-durable/", json=run_body(run_id="run-1"))
        await other_tab.post("/hanging-durable/runs/thread-1/run-1/cancel/")
        await asyncio.wait_for(streaming, timeout=10)
        await RunCoordinator.wait_for_all_runs()
        replayed = await other_tab.post("/hanging-durable/", json=run_body(run_id="run-1"))
    assert second.status_code == 409
    assert "is running run 'run-1'" in second.json()["error"]
    # The same run posted again while it runs reads the same run (an idempotent retry).
    assert retried.status_code == 200
    assert [e["type"] for _, e in sse_frames(retried.text)][-1] == "RUN_FINISHED"
    # Once it ran, its id cannot start a second run.
    assert replayed.status_code == 409
    assert "already ran" in replayed.json()["error"]


async def test_the_next_turn_right_after_run_finished_waits_for_the_last_writes(
    alice: Any,
) -> None:
    from tests.agui.urls import LAGGING_RUNS

    LAGGING_RUNS.hold()
    try:
        async with await logged_in(alice) as http:
            first = await http.post("/lagging/", json=run_body())
            # The client read RUN_FINISHED; the run's record is not final yet.
            still_running = await active_run(http, "/lagging/")
            second = await http.post("/lagging/", json=run_body(run_id="run-2", text="And 3 + 4?"))
            await RunCoordinator.wait_for_all_runs()
            thread = await http.get("/lagging/threads/thread-1/")
    finally:
        LAGGING_RUNS.release()
    assert [e for _, e in sse_frames(first.text)][-1]["type"] == "RUN_FINISHED"
    assert still_running is not None
    assert still_running["runId"] == "run-1"
    # The next turn waited for the first run to end instead of finding the thread busy.
    assert second.status_code == 200, second.text
    assert [e for _, e in sse_frames(second.text)][-1]["type"] == "RUN_FINISHED"
    users = [m["content"] for m in thread.json()["messages"] if m["role"] == "user"]
    assert users == ["What is 2 + 3?", "And 3 + 4?"]


async def test_the_next_turn_on_another_worker_right_after_run_finished_waits_too(
    alice: Any,
) -> None:
    """The previous run ended for its readers on worker 1 (its relayed log holds the terminal
    event) while its record is still being finished: worker 2 waits instead of a 409."""
    from tests.agui.urls import LAGGING_RUNS

    LAGGING_RUNS.hold(linger=0.3)  # the record ends well after worker 2 first reads it
    try:
        async with await logged_in(alice) as http:
            first = await http.post("/lagging/", json=run_body())
            body = run_body(run_id="run-2", text="And 3 + 4?")
            second = await http.post("/lagging-2/", json=body)
            await RunCoordinator.wait_for_all_runs()
    finally:
        LAGGING_RUNS.release()
    assert [e for _, e in sse_frames(first.text)][-1]["type"] == "RUN_FINISHED"
    assert second.status_code == 200, second.text
    assert [e for _, e in sse_frames(second.text)][-1]["type"] == "RUN_FINISHED"


async def test_the_next_turn_that_read_the_previous_run_as_running_just_before_it_ended_starts(
    alice: Any,
) -> None:
    """The claim read the previous run's record a moment before it was finished, and its run
    is no longer on this worker: the record is read again instead of answering 409."""
    from tests.agui.urls import STALE_RUNS

    async with await logged_in(alice) as http:
        first = await http.post("/stale-start/", json=run_body())
        await RunCoordinator.wait_for_all_runs()
        STALE_RUNS.stale()
        second = await http.post("/stale-start/", json=run_body(run_id="run-2", text="And?"))
        await RunCoordinator.wait_for_all_runs()
    assert [e for _, e in sse_frames(first.text)][-1]["type"] == "RUN_FINISHED"
    assert second.status_code == 200, second.text
    assert [e for _, e in sse_frames(second.text)][-1]["type"] == "RUN_FINISHED"


async def test_interrupt_policy_cancels_the_running_run_and_starts_the_new_one(
    alice: Any,
) -> None:
    async with await logged_in(alice) as http, await logged_in(alice) as other_tab:
        first = asyncio.ensure_future(http.post("/hanging-interrupt/", json=run_body()))
        await wait_for(lambda: active_run(other_tab, "/hanging-interrupt/"))
        body = run_body(run_id="run-2", text="Never mind, something else.")
        second = asyncio.ensure_future(other_tab.post("/hanging-interrupt/", json=body))
        first_response = await asyncio.wait_for(first, timeout=10)
        running = await wait_for(
            lambda: _running(active_run(other_tab, "/hanging-interrupt/"), "run-2")
        )
        await other_tab.post("/hanging-interrupt/runs/thread-1/run-2/cancel/")
        second_response = await asyncio.wait_for(second, timeout=10)
    assert running["runId"] == "run-2"
    assert [e for _, e in sse_frames(first_response.text)][-1]["outcome"] == {"type": "cancelled"}
    assert second_response.status_code == 200
    assert next(e["type"] for _, e in sse_frames(second_response.text)) == "RUN_STARTED"


async def _running(pending: Any, run_id: str) -> Any:
    found = await pending
    return found if found and found["runId"] == run_id else None


# A crash: errored records and a redacted RUN_ERROR.


async def test_a_crash_ends_with_a_redacted_run_error_and_errored_records(alice: Any) -> None:
    from django_pydantic_agent.contrib.store.models import StoredAgentRun
    from tests.agui.agents import SECRET_ERROR

    async with await logged_in(alice) as http:
        response = await http.post("/failing-stored/", json=run_body())
        await RunCoordinator.wait_for_all_runs()
        thread = await http.get("/failing-stored/threads/thread-1/")
    events = [e for _, e in sse_frames(response.text)]
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["message"] == REDACTED_RUN_ERROR
    assert SECRET_ERROR not in response.text
    assert SECRET_ERROR not in thread.text
    # What streamed before the failure is kept.
    assert thread.json()["messages"][-1]["content"] == "Partial "
    row = await StoredAgentRun.objects.aget(thread_id="thread-1", run_id="run-1")
    assert row.status == "errored"
    assert SECRET_ERROR not in row.error


# Over a real socket (uvicorn): the browser goes away, the run still completes.


@pytest.fixture
def base_url(transactional_db: None) -> Iterator[str]:
    with serve_asgi(asgi_app()) as url:
        yield url


@pytest.mark.e2e
def test_a_disconnect_over_a_real_socket_leaves_a_complete_run(base_url: str) -> None:
    with httpx.Client(base_url=base_url, timeout=10) as http:
        with http.stream("POST", "/anon/", json=run_body()) as response:
            session = response.cookies["sessionid"]
            for chunk in response.iter_text():
                if "TOOL_CALL_START" in chunk:
                    break  # the browser goes away mid-run
        http.cookies.set("sessionid", session)
        deadline = time.monotonic() + 10
        while True:
            thread = http.get("/anon/threads/thread-1/").json()
            messages = thread.get("messages") or [{}]
            last = messages[-1]
            stored = last.get("content") == "The sum is 5." and last.get("status") == "complete"
            # The run's record ends just after its last message is stored (and its usage
            # recorded): the thread shows no active run once both are done.
            if stored and thread.get("activeRun") is None:
                break
            assert time.monotonic() < deadline, thread
            time.sleep(0.05)
    assert thread["messages"][-1]["content"] == "The sum is 5."
    assert thread["activeRun"] is None


# Reattaching to runs this worker does not hold: answered from storage.


async def test_a_finished_run_reattaches_with_its_stored_ending(alice: Any) -> None:
    async with await logged_in(alice) as http:
        streaming = asyncio.ensure_future(http.post("/hanging-durable/", json=run_body()))
        await wait_for(lambda: active_run(http, "/hanging-durable/"))
        await http.post("/hanging-durable/runs/thread-1/run-1/cancel/")
        await asyncio.wait_for(streaming, timeout=10)
        await http.post("/failing-stored/", json=run_body(thread_id="t-fail"))
        await RunCoordinator.wait_for_all_runs()
        cancelled = await http.get("/hanging-durable/runs/thread-1/run-1/")
        failed = await http.get("/failing-stored/runs/t-fail/run-1/")
    cancelled_events = [e for _, e in sse_frames(cancelled.text)]
    assert cancelled_events[-1]["type"] == "RUN_FINISHED"
    assert cancelled_events[-1]["outcome"] == {"type": "cancelled"}
    assert cancelled_events[1]["messages"][-1]["content"] == "Working "
    failed_events = [e for _, e in sse_frames(failed.text)]
    assert failed_events[-1]["type"] == "RUN_ERROR"
    assert REDACTED_RUN_ERROR in failed_events[-1]["message"]
    assert_valid_agui(cancelled_events)
    assert_valid_agui(failed_events)


async def test_a_run_on_another_worker_is_followed_until_it_ends(alice: Any) -> None:
    # Another worker runs it: this one only sees its record, so it waits for the record to
    # end, then answers from storage.
    from tests.agui.urls import persisting

    coordinator = persisting.coordinator
    assert coordinator is not None
    store = coordinator.run_store
    owner = str(alice.pk)
    await store.start(owner_id=owner, thread_id="elsewhere", run_id="r9", worker_id="other:1")
    async with await logged_in(alice) as http:
        reattach = asyncio.ensure_future(http.get("/stored/runs/elsewhere/r9/"))
        await asyncio.sleep(0.2)
        assert not reattach.done()
        await store.finish(
            owner_id=owner, thread_id="elsewhere", run_id="r9", status="complete", last_seq=7
        )
        response = await asyncio.wait_for(reattach, timeout=10)
    frames = sse_frames(response.text)
    assert [e["type"] for _, e in frames] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert frames[-1][0] == "r9:7"
    assert frames[1][1]["messages"] == []


# A reader that saw the terminal event: it comes again, without an id (no duplicate).


async def test_a_finished_run_reattached_after_its_last_event_repeats_the_end_without_an_id(
    alice: Any,
) -> None:
    async with await logged_in(alice) as http:
        first = await http.post("/stored/", json=run_body())
        await RunCoordinator.wait_for_all_runs()
        last_id = sse_frames(first.text)[-1][0]
        assert last_id is not None
        after = last_id.rpartition(":")[2]
        again = await http.get(f"/stored/runs/thread-1/run-1/?after={after}")
    frames = sse_frames(again.text)
    assert [e["type"] for _, e in frames] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert [frame_id for frame_id, _ in frames] == [None, None, None]
    assert_valid_agui([e for _, e in frames])


async def test_a_replay_after_the_terminal_event_is_the_start_and_the_end_again() -> None:
    from ag_ui.core import RunFinishedEvent, RunStartedEvent

    from django_pydantic_agent.agui.engine import replay
    from django_pydantic_agent.agui.sse import run_frames
    from django_pydantic_agent.chat_history.manager import StreamPersistenceManager

    class TwoEvents:
        async def run(self, input: Any) -> Any:
            yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
            yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)

    from ag_ui.core import RunAgentInput

    body = RunAgentInput.model_validate(run_body())
    async with StreamPersistenceManager(TwoEvents) as manager:
        handle = await manager.run(body)
        await handle.wait()
        frames = sse_frames(
            "".join([frame async for frame in run_frames(replay(handle, 2), handle.run_id)])
        )
    assert [(frame_id, e["type"]) for frame_id, e in frames] == [
        (None, "RUN_STARTED"),
        (None, "RUN_FINISHED"),
    ]


async def test_a_relayed_replay_after_the_terminal_event_repeats_the_end_without_ids() -> None:
    """The cross-worker path (``relay.replay_batches``) follows the same rule as ``replay``."""
    from ag_ui.core import (
        RunFinishedEvent,
        RunStartedEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
    )

    from django_pydantic_agent.agui.relay import replay_batches
    from django_pydantic_agent.agui.sse import run_frames

    log = [
        RunStartedEvent(thread_id="t", run_id="r"),
        TextMessageStartEvent(message_id="m", role="assistant"),
        TextMessageContentEvent(message_id="m", delta="hi"),
        TextMessageEndEvent(message_id="m"),
        RunFinishedEvent(thread_id="t", run_id="r"),
    ]

    async def entries() -> Any:  # the log in two batches, as a follower reads it
        numbered = list(enumerate(log, start=1))
        yield numbered[:2]
        yield numbered[2:]

    async def read(after: int) -> list[Any]:
        frames = run_frames(replay_batches(entries(), after), "r")
        return sse_frames("".join([frame async for frame in frames]))

    frames = await read(5)
    assert [(frame_id, e["type"]) for frame_id, e in frames] == [
        (None, "RUN_STARTED"),
        (None, "RUN_FINISHED"),
    ]
    middle = await read(3)
    assert [(frame_id, e["type"]) for frame_id, e in middle] == [
        (None, "RUN_STARTED"),
        (None, "TEXT_MESSAGE_START"),
        ("r:4", "TEXT_MESSAGE_END"),
        ("r:5", "RUN_FINISHED"),
    ]
