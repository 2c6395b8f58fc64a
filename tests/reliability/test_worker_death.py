"""A worker killed outright at every point of a turn: each client that reloads on another
worker ends with exactly the stored thread.

Two workers of the reliability site on PostgreSQL, with Redis as the cache and
``AGUIServer``'s default heartbeat, lease and sweep. Worker 1 parks runs where their message
says (``agent.py``): before the model's first event, halfway through its reasoning, halfway
through the tool call's arguments, inside the tool, four words into the answer. Once all five
are parked, a sixth run streams a long answer (the kill lands among events its client got and
the cache may not hold yet) and a seventh streams to its end; the moment its client has
``RUN_FINISHED``, worker 1 gets ``SIGKILL``. One kill covers every point.

Each client then reloads on worker 2 at once, as a page does: ``GET threads/<thread>/``, then
``GET runs/<thread>/<run>/?after=<the last id it saw>``, read to the end. Checked per run: every
answer is a 200; each stream has one ``RUN_STARTED`` and ids strictly increasing; the reattach
ends with ``RUN_FINISHED``; what the client shows after both streams, built by AG-UI's rules
(``tests/support/transcript.py``), is the stored thread byte for byte, and its answer is
whole; neither worker logs a traceback. Printed: the time from the kill to each client's first
event on worker 2, and to the stored thread reaching it (a ``MESSAGES_SNAPSHOT``, the resumed
execution's or storage's). ``clients.json`` in the test's directory keeps every frame.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import statistics
import time
import uuid
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from django_pydantic_agent.agui import RunOptions
from tests.reliability.project.agent import LONG_WORDS, PARK_POINTS, answer_words
from tests.reliability.support import (
    Frame,
    SSEConnection,
    Worker,
    log_problems,
    prepare_site,
    run_body,
    serve_site,
)
from tests.support.transcript import apply_events, visible

pytestmark = pytest.mark.reliability

#: Every point a run is at when its worker dies: parked ones, then one streaming its answer
#: (``live``) and one whose stream has just sent ``RUN_FINISHED`` (``end``).
POINTS = (*PARK_POINTS, "live", "end")
#: Answer words the ``live`` client reads before the last run starts.
LIVE_WORDS_READ = 20
#: Seconds the scripted model pauses after each delta.
DELTA_DELAY = 0.01
#: The server options the figure reports: this test leaves each at ``AGUIServer``'s default.
TIMING = ("run_heartbeat_seconds", "run_lease_seconds", "sweep_interval_seconds")


def _defaults() -> dict[str, float]:
    """``RunOptions``' defaults of the timing options (and of the SSE heartbeat)."""
    options = RunOptions()
    return {name: getattr(options, name) for name in (*TIMING, "heartbeat_seconds")}


@dataclass
class Client:
    """One browser tab: its run, what it saw before the kill and after its reload."""

    point: str
    user: str
    run_id: str
    thread_id: str
    marker: str
    first: list[Frame] = field(default_factory=list)
    reload_status: int = 0
    active_run: dict[str, Any] | None = None
    reattach_status: int = 0
    reattach_body: bytes = b""
    tail: list[Frame] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    stored: dict[str, Any] = field(default_factory=dict)

    @property
    def asks(self) -> str:
        words = ["think"]
        if self.point in PARK_POINTS:
            words.append(f"park:{self.point}")
        if self.point == "live":
            words.append("long")
        return " ".join(words)

    @property
    def last_seen(self) -> int:
        return max(frame.seq for frame in self.first if frame.seq is not None)


@pytest.fixture
def site(postgres_database: str, redis_url: str) -> tuple[str, dict[str, str]]:
    prepare_site(postgres_database)
    env = {
        "RELIABILITY_REDIS_URL": redis_url,
        "RELIABILITY_CACHE_PREFIX": f"reliability-death-{uuid.uuid4().hex[:8]}",
        "RELIABILITY_DELTA_DELAY": str(DELTA_DELAY),
        # Empty, whatever the caller exported: the mounts keep AGUIServer's defaults.
        "RELIABILITY_RUN_HEARTBEAT": "",
        "RELIABILITY_RUN_LEASE": "",
        "RELIABILITY_SWEEP_SECONDS": "",
    }
    return postgres_database, env


def _types(frames: list[Frame]) -> list[str]:
    return [frame.type for frame in frames]


def _answer_words_read(frames: list[Frame]) -> int:
    types = _types(frames)
    if "TOOL_CALL_RESULT" not in types:
        return 0
    return types[types.index("TOOL_CALL_RESULT") :].count("TEXT_MESSAGE_CONTENT")


def _reached(point: str, frames: list[Frame]) -> bool:
    """Whether the client has seen its run get to ``point``."""
    types = _types(frames)
    return {
        "start": "RUN_STARTED" in types,
        "reasoning": "REASONING_MESSAGE_CONTENT" in types,
        "args": "TOOL_CALL_ARGS" in types,
        "tool": "TOOL_CALL_END" in types,
        "answer": _answer_words_read(frames) > 0,
        "live": _answer_words_read(frames) >= LIVE_WORDS_READ,
        "end": "RUN_FINISHED" in types,
    }[point]


#: What a client must not have seen yet at each parked point (the run got no further).
_NOT_YET = {
    "start": "REASONING_MESSAGE_START",
    "reasoning": "TEXT_MESSAGE_START",
    "args": "TOOL_CALL_END",
    "tool": "TOOL_CALL_RESULT",
    "answer": "RUN_FINISHED",
    "live": "RUN_FINISHED",
}


async def _first_stream(worker: Worker, client: Client, reached: asyncio.Event) -> None:
    """Post the client's run and read its stream until it ends or its worker dies."""
    body = run_body(client.thread_id, client.run_id, client.marker, asks=client.asks)
    connection = await SSEConnection.open(worker, "POST", "/agent/", user=client.user, body=body)
    assert await connection.read_head() == 200
    try:
        async with aclosing(connection.frames()) as frames:
            async for frame in frames:
                client.first.append(frame)
                if _reached(client.point, client.first):
                    reached.set()
    except (asyncio.IncompleteReadError, ConnectionError, AssertionError):
        pass  # the worker died mid-stream (a frame cut in two was never seen)
    connection.drop(reset=True)


async def _until_parked(folder: Path, client: Client, reached: asyncio.Event) -> None:
    """Wait until the model parked the run and its client saw it get there."""
    await asyncio.wait_for(reached.wait(), timeout=30)
    if client.point in PARK_POINTS:
        deadline = time.monotonic() + 30
        while not (folder / client.marker).exists():
            assert time.monotonic() < deadline, f"{client.point} never parked"
            await asyncio.sleep(0.05)


async def _reload(worker: Worker, client: Client) -> None:
    """What a reloading page does on ``worker``: read the thread, reattach with the last id
    it saw, read to the end; then the thread as stored once the run has ended."""
    async with httpx.AsyncClient(
        base_url=worker.url, headers={"X-User": client.user}, timeout=30
    ) as http:
        thread = await http.get(f"/agent/threads/{client.thread_id}/")
        client.reload_status = thread.status_code
        if thread.status_code == 200:
            client.active_run = thread.json()["activeRun"]
        path = f"/agent/runs/{client.thread_id}/{client.run_id}/?after={client.last_seen}"
        connection = await SSEConnection.open(worker, "GET", path, user=client.user)
        client.reattach_status = await connection.read_head()
        if client.reattach_status != 200:
            client.reattach_body = await connection.body()
            await connection.close()
            return
        async with aclosing(connection.frames()) as frames:
            async for frame in frames:
                client.tail.append(frame)
                client.arrivals.append(time.monotonic())
        await connection.close()
        deadline = time.monotonic() + 30
        while True:
            stored = await http.get(f"/agent/threads/{client.thread_id}/")
            assert stored.status_code == 200, stored.text
            client.stored = stored.json()
            if client.stored["activeRun"] is None or time.monotonic() > deadline:
                return
            await asyncio.sleep(0.1)


def _increasing(frames: list[Frame]) -> bool:
    ids = [frame.seq for frame in frames if frame.seq is not None]
    return all(a < b for a, b in itertools.pairwise(ids))


def _expected_answer(client: Client) -> str:
    words = answer_words(client.marker)
    if client.point == "live":
        words = [*(f"word{i} " for i in range(LONG_WORDS)), *words]
    return "".join(words)


def _problems(client: Client) -> list[str]:
    """What went wrong for one client (nothing, when all is well)."""
    name = client.point
    first, tail = _types(client.first), _types(client.tail)
    found = []
    if client.reload_status != 200:
        found.append(f"{name}: GET threads/ answered {client.reload_status}")
    if client.reattach_status != 200:
        found.append(
            f"{name}: the reattach after={client.last_seen} answered {client.reattach_status} "
            f"{client.reattach_body!r}"
        )
        return found
    if not _reached(name, client.first) or _NOT_YET.get(name, "") in first:
        found.append(f"{name}: the kill did not land at its point: {first}")
    if name == "end" and first[-1] != "RUN_FINISHED":
        found.append(f"{name}: its first stream did not end: {first}")
    for label, types, frames in (("first", first, client.first), ("reattach", tail, client.tail)):
        if types.count("RUN_STARTED") != 1:
            found.append(f"{name}: {label} stream has {types.count('RUN_STARTED')} RUN_STARTED")
        if not _increasing(frames):
            ids = [frame.seq for frame in frames]
            found.append(f"{name}: {label} stream's ids do not increase: {ids}")
    if not tail or tail[-1] != "RUN_FINISHED":
        found.append(f"{name}: the reattach ends with {tail[-1:]}: {tail}")
    # The client shows the message it posted, then what the events of both streams build.
    posted = run_body(client.thread_id, client.run_id, client.marker, asks=client.asks)
    events = [frame.event for frame in client.first + client.tail]
    shown = visible(apply_events(events, posted["messages"]))
    stored = visible(client.stored.get("messages", []))
    if shown != stored:
        found.append(f"{name}: the client shows\n  {shown}\nbut the thread stores\n  {stored}")
    answers = [m for m in client.stored.get("messages", []) if m["role"] == "assistant"]
    if not answers or answers[-1].get("content") != _expected_answer(client):
        found.append(f"{name}: the stored answer is not whole: {answers[-1:]}")
    return found


def _reconciled_at(client: Client) -> float | None:
    """When the client got the thread as stored (a ``MESSAGES_SNAPSHOT``, the resumed
    execution's or storage's), if it did."""
    for frame, arrival in zip(client.tail, client.arrivals, strict=True):
        if frame.type == "MESSAGES_SNAPSHOT":
            return arrival
    return None


def _seconds(values: list[float]) -> str:
    if not values:
        return "median=- max=-"
    return f"median={statistics.median(values):.2f} max={max(values):.2f}"


@pytest.mark.timeout(300)
async def test_every_client_ends_with_the_stored_thread_after_a_kill(
    site: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    database, env = site
    parked = tmp_path / "parked"
    parked.mkdir()
    clients = [
        Client(
            point=point,
            user=("alice", "bob")[index % 2],
            run_id=f"run-{point}",
            thread_id=f"t-{point}",
            marker=f"m-{point}",
        )
        for index, point in enumerate(POINTS)
    ]
    reached = {client.point: asyncio.Event() for client in clients}
    with (
        serve_site(database, tmp_path / "1.log", RELIABILITY_PARK_DIR=str(parked), **env) as one,
        serve_site(database, tmp_path / "2.log", **env) as two,
    ):
        readers = {}
        for client in clients:
            if client.point in PARK_POINTS:
                readers[client.point] = asyncio.ensure_future(
                    _first_stream(one, client, reached[client.point])
                )
        for client in clients[: len(PARK_POINTS)]:
            await _until_parked(parked, client, reached[client.point])
        live, end = clients[-2:]
        readers["live"] = asyncio.ensure_future(_first_stream(one, live, reached["live"]))
        await asyncio.wait_for(reached["live"].wait(), timeout=30)
        readers["end"] = asyncio.ensure_future(_first_stream(one, end, reached["end"]))
        await asyncio.wait_for(reached["end"].wait(), timeout=30)
        killed_at = time.monotonic()
        one.process.kill()
        await asyncio.to_thread(one.process.wait, 10)
        await asyncio.wait_for(asyncio.gather(*readers.values()), timeout=30)
        await asyncio.wait_for(
            asyncio.gather(*(_reload(two, client) for client in clients)), timeout=250
        )
    first_event = [c.arrivals[0] - killed_at for c in clients if c.arrivals]
    reconciled = [at - killed_at for c in clients if (at := _reconciled_at(c)) is not None]
    ahead = [c.point for c in clients if c.active_run and c.last_seen > c.active_run["lastSeq"]]
    for c in clients:
        at = _reconciled_at(c)
        print(
            f"  {c.point}: saw up to {c.last_seen}; activeRun on worker 2 {c.active_run}; "
            f"reattach {c.reattach_status}, {len(c.tail)} events, first after "
            f"{c.arrivals[0] - killed_at if c.arrivals else float('nan'):.2f} s, snapshot after "
            f"{at - killed_at if at else float('nan'):.2f} s"
        )
    defaults = _defaults()
    print(
        f"FIGURE worker-death runs={len(clients)} points={','.join(POINTS)} "
        f"snapshots={len(reconciled)} ahead_of_relay={ahead} "
        f"kill_to_first_event_s {_seconds(first_event)} "
        f"kill_to_snapshot_s {_seconds(reconciled)} "
        f"heartbeat_s={defaults['run_heartbeat_seconds']:g} "
        f"lease_s={defaults['run_lease_seconds']:g} "
        f"sweep_s={defaults['sweep_interval_seconds']:g} "
        f"sse_heartbeat_s={defaults['heartbeat_seconds']:g} delta_delay_s={DELTA_DELAY:g}"
    )
    # Every frame each client got, and the thread as stored, for a failure's diagnosis.
    report = {"killed_at": killed_at, "clients": [dataclasses.asdict(c) for c in clients]}
    (tmp_path / "clients.json").write_text(json.dumps(report, default=repr, indent=1))
    problems = [problem for client in clients for problem in _problems(client)]
    assert problems == [], "\n".join(problems)
    assert log_problems(tmp_path / "1.log") == []
    assert log_problems(tmp_path / "2.log") == []
