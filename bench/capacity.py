"""Capacity of one worker: N concurrent streams of the demo's model, 20 ms a word.

``wave(...)`` starts one uvicorn worker of ``bench.site`` (a fresh one per N), times one run
alone, then has a load generator start N runs at once, each on a new thread of the
``capacity/`` mount (``DefaultConversationStore``, durable runs) asking the example project's
scripted model for its long answer, and reads every stream to its end. The load generator is
a process of its own (``python -m bench.capacity URL N``: httpx, one task per stream, frames
split and timed, not parsed), so its CPU is not the server's; it reports what it used.

Per stream it records the largest gap between two consecutive events; per wave the server's
CPU time (``/proc/<pid>/stat``, the run's last writes included) and its peak RSS over the RSS
it had before. ``profile=`` records the server with py-spy during the wave and splits its
samples into what an event costs (``split``).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

__all__ = ["HEADER", "SPLIT_HEADER", "Wave", "split", "wave"]

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Tell me a long story about this page."
HEADER = (
    "| streams | largest gap p50 / p99 / max ms | first event p99 ms | wave s | one run s "
    "| events | failed | server CPU µs/event | server CPU ms/run | server RSS KiB/stream "
    "| load generator CPU |\n"
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)
SPLIT_HEADER = "| where an event's CPU goes | share of samples |\n| --- | ---: |"
_TICKS = os.sysconf("SC_CLK_TCK")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass(frozen=True, kw_only=True)
class Wave:
    """One wave of ``streams`` concurrent runs (times in seconds)."""

    streams: int
    gaps: list[float]
    firsts: list[float]
    seconds: float
    alone: float
    events: int
    failed: int
    cpu: float
    rss_kib: float
    load_cpu: float

    def row(self) -> str:
        ms = [g * 1000 for g in self.gaps] or [0.0]
        per_event = self.cpu / max(self.events, 1) * 1e6
        return (
            f"| {self.streams} | {_quantile(ms, 0.5):,.0f} / {_quantile(ms, 0.99):,.0f} / "
            f"{max(ms):,.0f} | {_quantile(self.firsts or [0.0], 0.99) * 1000:,.0f} "
            f"| {self.seconds:.1f} | {self.alone:.1f} | {self.events:,} | {self.failed} "
            f"| {per_event:.0f} | {self.cpu / self.streams * 1000:.0f} "
            f"| {self.rss_kib / self.streams:.0f} "
            f"| {self.load_cpu:.1f} s ({self.load_cpu / self.seconds:.0%} of a core) |"
        )


# -- the load generator (its own process) ------------------------------------------------------


async def _stream(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """Post one run on a new thread and read its stream: arrival times of its events."""
    run_id = uuid.uuid4().hex
    body = {
        "threadId": f"capacity-{run_id}",
        "runId": run_id,
        "state": {},
        "messages": [{"id": f"u-{run_id}", "role": "user", "content": PROMPT}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    start = time.perf_counter()
    first = previous = None
    gap = 0.0
    events = 0
    terminal = b""
    buffer = b""
    try:
        async with client.stream("POST", url, json=body) as response:
            status = response.status_code
            async for chunk in response.aiter_raw():
                now = time.perf_counter()
                buffer += chunk
                *frames, buffer = buffer.split(b"\n\n")
                for frame in reversed(frames):
                    if b"data: " not in frame:
                        continue  # a heartbeat comment
                    events += 1
                    if previous is None:
                        first = now - start
                    elif now - previous > gap:
                        gap = now - previous
                    previous = now
                    if b'"RUN_FINISHED"' in frame or b'"RUN_ERROR"' in frame:
                        terminal = frame
    except httpx.HTTPError as exc:
        return {"ok": False, "error": repr(exc), "events": events, "gap": gap, "first": first}
    ok = status == 200 and b'"RUN_FINISHED"' in terminal and b'"cancelled"' not in terminal
    return {
        "ok": ok,
        "error": "" if ok else f"{status} {terminal[-300:]!r}",
        "events": events,
        "gap": gap,
        "first": first,
        "seconds": time.perf_counter() - start,
    }


async def _load(url: str, streams: int) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(300.0)) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(_stream(client, url) for _ in range(streams)))
        seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime
    return {"seconds": seconds, "cpu": cpu, "streams": results}


def load_main(argv: list[str]) -> int:
    """``python -m bench.capacity URL N``: N streams at once; prints the results as JSON."""
    url, streams = argv[0], int(argv[1])
    print(json.dumps(asyncio.run(_load(url, streams))))
    return 0


# -- the wave, seen from the bench ------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no VmRSS.")


def _generate(url: str, streams: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.capacity", url, str(streams)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"The load generator failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _settle(pid: int, seconds: float = 0.5, limit: float = 30.0) -> None:
    """Wait until the server used no CPU for ``seconds`` (its runs' last writes are done)."""
    deadline = time.monotonic() + limit
    before = _cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(seconds)
        after = _cpu_seconds(pid)
        if after - before < 0.02:
            return
        before = after


def wave(streams: int, *, env: dict[str, str] | None = None, profile: Path | None = None) -> Wave:
    """Run one wave of ``streams`` runs on a fresh server (see the module docstring);
    ``profile`` is where py-spy's raw samples of the server go."""
    from bench.live import served

    with served(emulator=False, env=env) as [live]:
        url = f"{live.origin}/capacity/"
        _generate(url, 1)  # warm-up: imports, connections, the first query plans
        _settle(live.pid)
        alone = _generate(url, 1)["streams"][0]["seconds"]
        _settle(live.pid)
        rss = [_rss_kib(live.pid)]
        cpu = _cpu_seconds(live.pid)
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.1):
                rss.append(_rss_kib(live.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        spy = None
        if profile is not None:
            spy = subprocess.Popen(
                [
                    *(str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(live.pid)),
                    *("-r", "200", "--nonblocking", "--threads", "--format", "raw"),
                    *("-o", str(profile)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        try:
            result = _generate(url, streams)
            _settle(live.pid)
        finally:
            stop.set()
            sampler.join()
            if spy is not None:
                spy.send_signal(2)  # SIGINT: py-spy writes what it sampled
                spy.wait(timeout=60)
        cpu = _cpu_seconds(live.pid) - cpu
    runs = result["streams"]
    failed = [r for r in runs if not r["ok"]]
    for r in failed[:3]:
        print(f"capacity: a failed run: {r['error']}", file=sys.stderr)
    return Wave(
        streams=streams,
        gaps=[r["gap"] for r in runs],
        firsts=[r["first"] for r in runs if r["first"] is not None],
        seconds=result["seconds"],
        alone=alone,
        events=sum(r["events"] for r in runs),
        failed=len(failed),
        cpu=cpu,
        rss_kib=max(rss) - rss[0],
        load_cpu=result["cpu"],
    )


# -- where the server's CPU goes (py-spy's raw samples) ----------------------------------------

# Each sample goes to the first of its frames, from the innermost out, that names a part; a
# frame of a library (Django's ORM, pickle, json, pydantic) goes to the part that called it.
_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("relay writes (the live log to the cache)", ("agui/relay.py", "set_many", "delete_many")),
    (
        "heartbeats and cancel polls",
        ("_heartbeat", "on_heartbeat", "_beat", "cancel_requested", "_poll_cancel", "(get) ("),
    ),
    (
        "coalesced storage writes (and folding events into records)",
        (
            "chat_history/_flushing.py",
            "chat_history/fold.py",
            "chat_history/tracking.py",
            "contrib/store/repositories.py",
            "contrib/store/rows.py",
            "chat_history/transactions.py",
            "storage_agent.py",
            "persistence/runs.py",
            "contrib/store/runs.py",
        ),
    ),
    ("encoding (SSE frames, JSON)", ("agui/sse.py", "ag_ui/encoder")),
    (
        "the agent's own events (pydantic-ai, the model, the run's log)",
        ("pydantic_ai/", "agui/inner.py", "chat/agent.py", "chat_history/manager.py"),
    ),
    (
        "starting runs (claim, thread, history)",
        ("agui/engine.py", "agui/runs.py", "agui/input.py", "agui/owners.py", "agui/run.py"),
    ),
    ("sync_to_async hops (handing work to the executor)", ("asgiref/sync.py",)),
    ("HTTP (uvicorn, Django's handler)", ("uvicorn/", "django/core/handlers")),
)


def split(raw: Path) -> list[tuple[str, float]]:
    """The share of ``raw``'s samples (py-spy ``--format raw``) in each part, largest first."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")[1:]  # the first is the thread
        # Frames that name no part (asyncio's own, a library's) go to the first caller that
        # does; a sample with none is the event loop's own (scheduling, selecting) or other.
        part = "the event loop (scheduling, select)" if "asyncio/" in stack else "other"
        if frames and frames[-1].startswith("_worker ("):
            part = "executor threads waiting for work"
        for frame in reversed(frames):
            found = next((name for name, marks in _PARTS if any(m in frame for m in marks)), None)
            if found is not None:
                part = found
                break
        counts[part] += int(count)
    total = sum(counts.values()) or 1
    return [(part, n / total) for part, n in counts.most_common()]


def profile_path() -> Path:
    """A file for py-spy's samples (kept: ``speedscope``/``flamegraph`` tools read it)."""
    return Path(tempfile.mkdtemp(prefix="dpa-capacity-")) / "server.txt"


if __name__ == "__main__":
    sys.exit(load_main(sys.argv[1:]))
