"""Stream behaviour: heartbeats, reasoning filter, error redaction and client disconnects."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from django_pydantic_agent.agui import REDACTED_RUN_ERROR, SSE_HEARTBEAT
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.agui.sse import with_heartbeat
from tests.agui.agents import BURST_DELTAS, HANG_LOG, SECRET_ERROR
from tests.agui.conftest import (
    asgi_app,
    drive_until_disconnect,
    event_types,
    logged_in,
    run_body,
    session_id,
    sse_events,
    streamed_events,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


async def test_heartbeat_fills_silence_and_the_stream_stays_valid(
    client: httpx.AsyncClient,
) -> None:
    response = await client.post("/slow/", json=run_body())
    assert response.status_code == 200
    frames = response.text.split("\n\n")
    pings = [i for i, frame in enumerate(frames) if frame == SSE_HEARTBEAT.strip("\n")]
    assert len(pings) >= 3
    first_delta = next(i for i, f in enumerate(frames) if "TEXT_MESSAGE_CONTENT" in f)
    # The pings arrive during the model's pause, between the two text deltas.
    assert any(i > first_delta for i in pings)
    events = sse_events(response.text)
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == (
        "Thinking hard."
    )
    assert_valid_agui(events)


async def test_heartbeat_never_pads_a_busy_stream() -> None:
    async def frames() -> Any:
        for i in range(3):
            yield f"data: {i}\n\n"

    out = [frame async for frame in with_heartbeat(frames(), interval=5)]
    assert SSE_HEARTBEAT not in out
    assert "".join(out) == "data: 0\n\ndata: 1\n\ndata: 2\n\n"


async def test_a_burst_goes_out_in_one_write_but_a_lone_frame_and_the_end_go_at_once() -> None:
    async def frames() -> Any:
        yield "data: first\n\n"
        await asyncio.sleep(0.1)  # quiet, then a burst of 20 frames, then the end
        for i in range(20):
            yield f"data: {i}\n\n"
            await asyncio.sleep(0)

    async def read(coalesce: float) -> list[str]:
        stream = with_heartbeat(frames(), interval=5, coalesce=coalesce)
        # A held end would take the whole minute: wait_for fails the test long before.
        return await asyncio.wait_for(_collect(stream), timeout=5)

    burst = "".join(f"data: {i}\n\n" for i in range(20))
    # Without coalescing the writer keeps up with the pump: nearly one write per frame.
    plain = await read(0.0)
    assert plain[0] == "data: first\n\n"
    assert "".join(plain[1:]) == burst
    assert len(plain) > 10
    # 50 ms: the first frame goes at once, and so does the first of the burst after 100 ms
    # of quiet; the rest of the burst waits, and goes out with the end.
    coalesced = await read(0.05)
    assert coalesced[0] == "data: first\n\n"
    assert "".join(coalesced[1:]) == burst
    assert len(coalesced) <= 3
    # A minute: the burst is held back, but the end of the stream is not.
    held = await read(60.0)
    assert held[0] == "data: first\n\n"
    assert "".join(held[1:]) == burst
    assert len(held) == 2
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def _collect(stream: Any) -> list[str]:
    return [frame async for frame in stream]


async def test_heartbeat_reraises_the_upstream_error_and_leaks_no_task() -> None:
    async def frames() -> Any:
        yield "data: 0\n\n"
        raise ValueError("upstream broke")

    stream = with_heartbeat(frames(), interval=5)
    assert await stream.__anext__() == "data: 0\n\n"
    with pytest.raises(ValueError, match="upstream broke"):
        await stream.__anext__()
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_closing_the_heartbeat_stream_cancels_the_pending_read() -> None:
    closed = []

    async def frames() -> Any:
        try:
            yield "data: 0\n\n"
            await asyncio.sleep(30)
        finally:
            closed.append(True)

    stream = with_heartbeat(frames(), interval=0.01)
    assert await stream.__anext__() == "data: 0\n\n"
    assert await stream.__anext__() == SSE_HEARTBEAT
    await stream.aclose()  # type: ignore[attr-defined]
    assert closed == [True]
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_forward_reasoning_false_drops_reasoning_events(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await http.post("/quiet/", json=run_body())
    types = event_types(response.text)
    assert not [t for t in types if t.startswith("REASONING")]
    assert "Adding two numbers" not in response.text
    assert "TOOL_CALL_RESULT" in types
    assert types[-1] == "RUN_FINISHED"
    assert_valid_agui(sse_events(response.text))


async def test_run_error_is_redacted_and_logged(alice: Any, caplog: Any) -> None:
    caplog.set_level(logging.ERROR, logger="django_pydantic_agent.agui")
    async with await logged_in(alice) as http:
        response = await http.post("/failing/", json=run_body())
    assert response.status_code == 200
    events = sse_events(response.text)
    assert events[-1] == {
        "type": "RUN_ERROR",
        "message": REDACTED_RUN_ERROR,
        "timestamp": events[-1]["timestamp"],
    }
    assert SECRET_ERROR not in response.text
    assert_valid_agui(events)
    [record] = [r for r in caplog.records if r.name == "django_pydantic_agent.agui"]
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == SECRET_ERROR
    assert "'run-1'" in record.getMessage()


async def test_run_error_message_exposed_when_asked(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await http.post("/failing-exposed/", json=run_body())
    events = sse_events(response.text)
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["message"] == SECRET_ERROR


async def test_client_disconnect_cancels_the_run_cleanly(caplog: Any) -> None:
    caplog.set_level(logging.WARNING)
    HANG_LOG.clear()
    sent = await drive_until_disconnect("/hanging/", run_body())
    assert sent[0]["status"] == 200
    # The stream runs a few events ahead of the writer, so the disconnect lands at the model's
    # wait (cancelled) or closes its stream before it resumed; either way it stops there.
    assert HANG_LOG in (["started", "cancelled", "stopped"], ["started", "stopped"])
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_disconnect_on_a_cancel_on_disconnect_mount_keeps_what_streamed(
    caplog: Any,
) -> None:
    caplog.set_level(logging.WARNING)
    HANG_LOG.clear()
    sent = await drive_until_disconnect("/hanging-stored/", run_body(text="Keep me"))
    assert sent[0]["status"] == 200
    # The anonymous session was created before streaming: its cookie left with the headers.
    session = session_id(sent)
    await RunCoordinator.wait_for_all_runs()
    await RunCoordinator.aclose_all()  # the mount's sweeper, started by its first request
    # on_disconnect="cancel": the disconnect stopped the model's stream, and no task is left.
    # The cancel lands at the model's wait, or, when the run was polling its cancel intent
    # then, closes the model's stream before it resumed: either way it never goes on.
    assert HANG_LOG in (["started", "cancelled", "stopped"], ["started", "stopped"])
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    [answer_id] = [
        e["messageId"] for e in streamed_events(sent) if e["type"] == "TEXT_MESSAGE_START"
    ]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=asgi_app()), base_url="http://testserver"
    ) as http:
        http.cookies.set("sessionid", session)
        response = await http.get("/hanging-stored/threads/thread-1/")
    assert response.status_code == 200
    messages = response.json()["messages"]
    assert [(m["id"], m["role"], m["content"]) for m in messages] == [
        ("user-run-1", "user", "Keep me"),
        (answer_id, "assistant", "Working "),
    ]
    assert messages[-1]["status"] == "interrupted"
    assert response.json()["activeRun"] is None


async def test_heartbeat_zero_turns_heartbeats_off(client: httpx.AsyncClient) -> None:
    response = await client.post("/no-heartbeat/", json=run_body())
    assert response.status_code == 200
    assert SSE_HEARTBEAT not in response.text
    assert event_types(response.text)[-1] == "RUN_FINISHED"


async def test_one_cancel_stops_a_busy_heartbeat_stream() -> None:
    # Regression: on Python 3.11, asyncio.wait_for swallows a cancel that lands while a frame
    # is already queued, so a client disconnect (or Stop) was ignored under load and the run
    # went on to its end.
    async def endless() -> AsyncIterator[str]:
        n = 0
        while True:
            n += 1
            yield f"frame {n}"
            await asyncio.sleep(0)

    async def consume() -> None:
        async for _ in with_heartbeat(endless(), 0.01):
            pass

    for _ in range(5):
        task = asyncio.get_running_loop().create_task(consume())
        await asyncio.sleep(0.01)
        task.cancel()
        done, _pending = await asyncio.wait({task}, timeout=1.0)
        if not done:  # try to clean up before failing, so the leak guard does not hide the cause
            for _ in range(1000):
                if task.done():
                    break
                task.cancel()
                await asyncio.sleep(0.001)
        assert done, "The stream kept running after it was cancelled once."
        assert task.cancelled()


@pytest.mark.parametrize("path", ["/burst/", "/burst-stored/"])
async def test_a_fast_run_reaches_the_client_whole_in_few_writes(path: str) -> None:
    """A model streaming 300 deltas at once, on mounts coalescing for a minute: every event
    arrives, numbered in order, and the run still ends at once, in a few writes (a full buffer
    or batch and the end cut a hold short); with coalescing off, nearly one per event."""
    sent = await drive_until_disconnect(path, run_body(), until=b"never in a stream")
    writes = [m for m in sent if m["type"] == "http.response.body" and m.get("body")]
    events = streamed_events(sent)
    assert [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"] == [
        f"w{i} " for i in range(BURST_DELTAS)
    ]
    assert_valid_agui(events)
    body = b"".join(m["body"] for m in writes).decode()
    ids = [line.removeprefix("id: ") for line in body.splitlines() if line.startswith("id: ")]
    assert ids == [f"run-1:{seq}" for seq in range(1, len(events) + 1)]
    assert len(writes) <= 10
    plain = await drive_until_disconnect("/burst-plain/", run_body(), until=b"never in a stream")
    plain_writes = [m for m in plain if m["type"] == "http.response.body" and m.get("body")]
    assert len(plain_writes) > len(events) / 2
