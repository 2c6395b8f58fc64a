"""Durable runs over HTTP (reattach, cancel), upload RSS, and the sweeper on stale runs."""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import httpx

from bench.live import Live, run_body, stream

__all__ = ["cancel_latency", "cancel_row", "reattach_rows", "sweep_row", "upload_rows"]

REATTACH_HEADER = (
    "| run | first replayed event ms | whole replay ms | events | samples |\n"
    "| --- | ---: | ---: | ---: | ---: |"
)
CANCEL_HEADER = (
    "| cancel posted to | RUN_FINISHED cancelled after ms (median) | max ms | samples |\n"
    "| --- | ---: | ---: | ---: |"
)
UPLOAD_HEADER = "| server process | RSS MiB |\n| --- | ---: |"
SWEEP_HEADER = (
    "| database | stale runs | sweep_runs s | ms per run | queries | queries per run |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: |"
)


def _ids() -> tuple[str, str]:
    return f"t-{uuid.uuid4().hex[:12]}", f"r-{uuid.uuid4().hex[:8]}"


async def reattach_rows(live: Live, *, samples: int) -> list[str]:
    """Time from ``GET runs/...`` to its first event, for a live run and a finished one."""
    origin = live.origin
    live_first: list[float] = []
    live_whole: list[float] = []
    finished_first: list[float] = []
    finished_whole: list[float] = []
    events = {"live": 0, "finished": 0}
    async with (
        httpx.AsyncClient(timeout=120.0) as client,
        httpx.AsyncClient(timeout=120.0) as other,
    ):
        for _ in range(samples):
            thread, run = _ids()
            runs = f"{origin}/slow/runs/{thread}/{run}/"

            async def reattach(n: int, runs: str = runs) -> None:
                if n == 50:
                    result = await stream(other, "GET", f"{runs}?after=25", stop_after=1)
                    live_first.append(result.first_event * 1000)
                    live_whole.append(result.closed * 1000)
                    await other.post(f"{runs}cancel/")

            await stream(
                client, "POST", f"{origin}/slow/", body=run_body(thread, run), on_event=reattach
            )
            thread, run = _ids()
            await stream(client, "POST", f"{origin}/default/", body=run_body(thread, run))
            await asyncio.sleep(0.2)  # the run's last flush and its record
            result = await stream(client, "GET", f"{origin}/default/runs/{thread}/{run}/")
            finished_first.append(result.first_event * 1000)
            finished_whole.append(result.closed * 1000)
            events["finished"] = result.events
    med = statistics.median
    return [
        f"| live (reattach after event 25 of a streaming run) | {med(live_first):.1f} "
        f"| first event only | 1 | {len(live_first)} |",
        f"| finished (answered from storage: RUN_STARTED, MESSAGES_SNAPSHOT, RUN_FINISHED) "
        f"| {med(finished_first):.1f} | {med(finished_whole):.1f} | {events['finished']} "
        f"| {len(finished_first)} |",
    ]


async def cancel_latency(run_on: Live, cancel_on: Live, *, samples: int) -> list[float]:
    """Milliseconds from posting cancel (to ``cancel_on``) to RUN_FINISHED cancelled."""
    latencies = []
    async with (
        httpx.AsyncClient(timeout=120.0) as client,
        httpx.AsyncClient(timeout=120.0) as other,
    ):
        for _ in range(samples):
            thread, run = _ids()
            posted: list[float] = []

            async def cancel(
                n: int, thread: str = thread, run: str = run, posted: list[float] = posted
            ) -> None:
                if n == 20:
                    posted.append(time.perf_counter())
                    response = await other.post(
                        f"{cancel_on.origin}/slow/runs/{thread}/{run}/cancel/"
                    )
                    if response.status_code not in (200, 202):
                        raise RuntimeError(
                            f"cancel answered {response.status_code}: {response.text}"
                        )

            start = time.perf_counter()
            result = await stream(
                client,
                "POST",
                f"{run_on.origin}/slow/",
                body=run_body(thread, run),
                on_event=cancel,
            )
            if result.outcome != "cancelled":
                raise RuntimeError(f"The run ended {result.terminal_type} {result.outcome!r}.")
            latencies.append((start + result.terminal - posted[0]) * 1000)
    return latencies


def cancel_row(label: str, latencies: list[float]) -> str:
    median = statistics.median(latencies)
    return f"| {label} | {median:.1f} | {max(latencies):.1f} | {len(latencies)} |"


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/status has no {field}.")


def upload_rows(live: Live, *, megabytes: int) -> list[str]:
    """Peak RSS of the server process while it receives one ``megabytes`` MB upload."""
    idle = _rss_kib(live.pid)
    peak = [idle]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak.append(_rss_kib(live.pid))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    with tempfile.TemporaryFile() as payload:
        chunk = os.urandom(1024 * 1024)
        for _ in range(megabytes):
            payload.write(chunk)
        payload.seek(0)
        sampler.start()
        try:
            response = httpx.post(
                f"{live.origin}/default/attachments/",
                files={"file": ("big.bin", payload, "application/octet-stream")},
                timeout=120.0,
            )
        finally:
            done.set()
            sampler.join()
    if response.status_code >= 300:
        raise RuntimeError(f"The upload answered {response.status_code}: {response.text[:200]}")
    after = _rss_kib(live.pid)
    mib = 1024
    return [
        f"| idle, before the upload | {idle / mib:.1f} |",
        f"| peak while receiving a {megabytes} MB file | {max(peak) / mib:.1f} |",
        f"| growth at the peak | {(max(peak) - idle) / mib:.1f} |",
        f"| after the upload | {after / mib:.1f} |",
    ]


def sweep_row(runs: int) -> str:
    """Create ``runs`` stale ``running`` runs (one per thread), time ``sweep_runs`` on them."""
    from django.db import connection
    from django.utils import timezone

    from django_pydantic_agent.contrib.store.models import StoredAgentRun
    from django_pydantic_agent.contrib.store.runs import sweep_runs

    old = timezone.now() - timedelta(hours=1)
    StoredAgentRun.objects.bulk_create(
        [
            StoredAgentRun(
                owner_id="bench-sweep",
                thread_id=f"sweep-{i}",
                run_id=f"run-{i}",
                heartbeat_at=old,
                started_at=old,
            )
            for i in range(runs)
        ],
        batch_size=1000,
    )
    store_logger = logging.getLogger("django_pydantic_agent.contrib.store")
    level = store_logger.level
    store_logger.setLevel(logging.ERROR)  # one WARNING per swept run otherwise
    try:
        # Counted by a wrapper, not CaptureQueriesContext: Django's query log keeps only the
        # last 9,000 queries, fewer than a sweep of thousands of runs makes.
        counted = [0]

        def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            counted[0] += 1
            return execute(sql, params, many, context)

        with connection.execute_wrapper(count):
            start = time.perf_counter()
            swept = sweep_runs(lease=60)
            elapsed = time.perf_counter() - start
    finally:
        store_logger.setLevel(level)
    if len(swept) != runs:
        raise RuntimeError(f"sweep_runs swept {len(swept)} of {runs} stale runs.")
    vendor = connection.vendor
    queries = counted[0]
    return (
        f"| {vendor} | {runs:,} | {elapsed:.2f} | {elapsed * 1000 / runs:.2f} | {queries:,} "
        f"| {queries / runs:.1f} |"
    )


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)
