"""A worker killed mid-run (SIGKILL) on a site that does not resume runs
(``on_worker_loss="error"``): swept as ``errored``, reattached to ``RUN_ERROR``. (Runs that
resume are ``test_worker_death.py``'s.)

Worker 1 streams a long answer; once the client has read some of it, the worker gets SIGKILL:
no shutdown, no finalisation, the run record stays ``running`` with its last heartbeat. Worker
2 starts on the same database. The client reattaches there with the last sequence number it
saw; the stream stays open while the record says ``running`` (no relayed log to follow: the
site's cache is per process). Once the lease has passed, ``manage.py agent_store_sweep_runs
--lease 1`` finalises the run as ``errored``, and with it every record the run left in
progress. Then the reattached stream opens with ``RUN_STARTED`` and ends with the stored
messages and ``RUN_ERROR``, nothing is ``running`` or in progress any more, and the thread
takes a new run. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path

import httpx
import pytest

from django_pydantic_agent.contrib.store.runs import SWEPT_ERROR
from tests.reliability.support import (
    Frame,
    SSEConnection,
    log_problems,
    prepare_site,
    run_body,
    serve_site,
    stored_state,
    sweep,
)

pytestmark = pytest.mark.reliability

LEASE = 1.0
#: Both workers end a dead worker's runs instead of resuming them.
NO_RESUME = {"RELIABILITY_ON_WORKER_LOSS": "error"}
#: Answer deltas the client reads before the worker is killed.
READ_BEFORE_KILL = 8


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgresql":
        url: str = request.getfixturevalue("postgres_database")
        return url
    return str(tmp_path / "crash.sqlite3")


async def _until_broken(frames: AsyncIterator[Frame]) -> list[Frame]:
    """The frames still readable from a stream whose server died (it ends or breaks)."""
    rest: list[Frame] = []
    try:
        async for frame in frames:
            rest.append(frame)
    except (asyncio.IncompleteReadError, ConnectionError, AssertionError):
        pass
    return rest


def _text(frames: list[Frame]) -> str:
    return "".join(f.event["delta"] for f in frames if f.type == "TEXT_MESSAGE_CONTENT")


def _answer(frames: list[Frame]) -> list[Frame]:
    """The frames after the tool's result: the streamed answer."""
    types = [f.type for f in frames]
    return frames[types.index("TOOL_CALL_RESULT") + 1 :] if "TOOL_CALL_RESULT" in types else []


async def test_a_killed_workers_run_is_swept_and_its_reattach_ends_with_run_error(
    database: str, tmp_path: Path
) -> None:
    backend = "postgresql" if "://" in database else "sqlite"
    prepare_site(database)
    body = run_body("crash-thread", "crash-run", "slow")
    with serve_site(database, tmp_path / "worker-1.log", **NO_RESUME) as first:
        stream = await SSEConnection.open(first, "POST", "/agent/", user="alice", body=body)
        assert await stream.read_head() == 200
        seen: list[Frame] = []
        async with aclosing(stream.frames()) as frames:
            async for frame in frames:
                seen.append(frame)
                if len(_text(_answer(seen)).split()) >= READ_BEFORE_KILL:
                    break
            first.kill()
            seen += await _until_broken(frames)
        stream.drop(reset=True)
    assert seen[-1].type not in ("RUN_FINISHED", "RUN_ERROR")  # the stream broke mid-answer
    after = seen[-1].seq
    assert after is not None
    dead = [run for run in stored_state(database)["runs"] if run["run_id"] == "crash-run"]
    assert [run["status"] for run in dead] == ["running"]  # nobody finalised it

    with serve_site(database, tmp_path / "worker-2.log", **NO_RESUME) as second:
        path = f"/agent/runs/crash-thread/crash-run/?after={after}"
        reattach = await SSEConnection.open(second, "GET", path, user="alice")
        assert await reattach.read_head() == 200
        # Attached: the stream waits while the record says running. Which execution it will
        # read (this one's end, or a resumed one's start) is not known yet, so nothing is sent.
        await asyncio.sleep(LEASE)  # the killed worker's last heartbeat is now stale
        swept = await asyncio.to_thread(sweep, database, LEASE)
        async with aclosing(reattach.frames()) as frames:
            opened = [frame async for frame in frames]
        await reattach.close()
        assert [f.type for f in opened] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_ERROR"]
        tail = opened[1:]
        assert tail[-1].event["message"] == SWEPT_ERROR
        assert all(f.seq is None or f.seq > after for f in tail)  # no event id seen twice
        snapshot = tail[0].event["messages"]
        assert snapshot[0]["content"] == "ask slow"

        headers = {"X-User": "alice"}
        async with httpx.AsyncClient(base_url=second.url, headers=headers, timeout=30) as http:
            messages = (await http.get("/agent/threads/crash-thread/")).json()["messages"]
            assert [m["role"] for m in messages][:3] == ["user", "assistant", "tool"]
            assert not any(m["chatHistory"].get("inProgress") for m in messages)
            kept = messages[-1]["content"] if len(messages) == 4 else ""
            if len(messages) == 4:
                assert messages[-1]["status"] == "errored"
            # What was kept and what the client read are both the start of the same answer.
            read = _text(_answer(seen))
            assert read.startswith(kept) or kept.startswith(read), (read, kept)
            # The thread is free again: a new run on it goes through.
            again = await http.post(
                "/agent/",
                json=run_body("crash-thread", "after-crash", "again"),
                headers={"Accept": "text/event-stream"},
            )
            assert again.status_code == 200
            assert '"type":"RUN_FINISHED"' in again.text.replace(" ", "")
        assert log_problems(second.log) == []

    state = stored_state(database)
    statuses = {run["run_id"]: run["status"] for run in state["runs"]}
    assert statuses == {"crash-run": "errored", "after-crash": "complete"}
    assert not [row for row in state["messages"] if row["status"] in ("running", "active")]
    assert swept == "Swept 1 stale run(s) as errored."
    print(
        f"FIGURE crash backend={backend} killed_runs=1 swept=1 "
        f"reattach_terminal={tail[-1].type} running_after_sweep=0 "
        f"answer_chars_read={len(read)} "
        f"answer_chars_kept={len(kept)} thread_usable_after=1"
    )
