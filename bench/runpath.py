"""The run path's cost at message 10 and at message 1,000 (``DefaultConversationStore``).

One thread grows through the run endpoint over HTTP: each run posts one new user message and
gets a 5-delta answer, so each turn adds two messages. The first 10 turns and the last 10 are
compared (wall time of the whole run, request to the end of the stream).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

import httpx

from bench.live import run_body, stream

__all__ = ["HEADER", "grow"]

HEADER = (
    "| turns | messages in the thread | median ms per run | p95 ms | ratio to the first 10 "
    "| target |\n| --- | --- | ---: | ---: | ---: | --- |"
)


async def grow(url: str, *, messages: int = 1000) -> tuple[list[str], dict[int, int]]:
    """Grow one thread to ``messages`` messages through ``url``; the two table rows."""
    turns = max(20, messages // 2)
    thread = f"grow-{uuid.uuid4().hex[:12]}"
    times: list[float] = []
    refused = {409: 0, 500: 0}
    async with httpx.AsyncClient(timeout=120.0) as client:
        warm = run_body(f"warm-{thread}", "r0")
        await stream(client, "POST", url, body=warm)
        for n in range(turns):
            while True:
                start = time.perf_counter()
                body = run_body(thread, f"r{n}", f"Q{n}")
                result = await stream(client, "POST", url, body=body)
                if result.status not in (409, 500):
                    break
                # 409: the previous run is still finalising; 500: see the docs page.
                refused[result.status] += 1
                await asyncio.sleep(0.005)
            times.append((time.perf_counter() - start) * 1000)
            if result.terminal_type != "RUN_FINISHED":
                raise RuntimeError(
                    f"Turn {n} of {thread}: {result.status}, ended {result.terminal_type!r}."
                )
    first, last = times[:10], times[-10:]

    def p95(values: list[float]) -> float:
        return sorted(values)[min(len(values) - 1, round(0.95 * (len(values) - 1)))]

    ratio = statistics.median(last) / statistics.median(first)
    return [
        f"| 1 to 10 | 2 to 20 | {statistics.median(first):.1f} | {p95(first):.1f} | 1.00\u00d7 | |",
        f"| {turns - 9} to {turns} | {2 * turns - 18} to {2 * turns} "
        f"| {statistics.median(last):.1f} | {p95(last):.1f} | {ratio:.2f}\u00d7 "
        f"| ≤ 1.5\u00d7: {'met' if ratio <= 1.5 else 'missed'} |",
    ], refused
