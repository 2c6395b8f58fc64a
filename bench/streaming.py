"""Streaming over HTTP: one 2,000-delta run, persistence on against off, and django-ag-ui 0.70.

Every figure is the median of ``samples`` runs, each on a new thread, after one warm-up run per
mount and ``SETTLE_SECONDS`` of quiet (the previous run's last writes are done); the client
reads the stream over loopback with httpx and splits frames without parsing them (the
terminal event only), so it costs the server's two cores as little as it can.

The mounts are measured round by round, one run of each per round, and "paired" compares a
mount with persistence off in the same round: on a shared machine whose speed drifts by a
third within one suite, the median of those per-round ratios moves less than the ratio of the
two medians, which is shown too.
"""

from __future__ import annotations

import asyncio
import statistics
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from bench.live import Stream, run_body, stream

__all__ = ["FIRST_EVENT_HEADER", "HEADER", "Row", "first_event_table", "measure_mounts"]

HEADER = (
    "| server | persistence | events | events/s | min to max | vs off | paired vs off "
    "| first byte ms | first event ms | RUN_FINISHED → close ms | runs |\n"
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


@dataclass(frozen=True, kw_only=True)
class Row:
    server: str
    persistence: str
    streams: list[Stream]
    baseline: float | None = None  # events/s of the same server with persistence off
    #: Per round, this mount's events/s over the off mount's in the same round.
    paired: list[float] | None = None

    def median(self, pick: Callable[[Stream], float]) -> float:
        return statistics.median(pick(s) for s in self.streams)

    @property
    def events_per_second(self) -> float:
        return self.median(lambda s: s.events_per_second)

    @property
    def ratio(self) -> float | None:
        """The ratio of the medians: events/s over the off mount's (``None`` for off)."""
        return None if self.baseline is None else self.events_per_second / self.baseline

    @property
    def paired_ratio(self) -> float | None:
        """The median of the per-round ratios (``None`` for off)."""
        return statistics.median(self.paired) if self.paired else None

    def paired_quartiles(self) -> tuple[float, float]:
        """The first and third quartiles of the per-round ratios."""
        assert self.paired
        if len(self.paired) < 2:
            return self.paired[0], self.paired[0]
        low, _, high = statistics.quantiles(self.paired, n=4)
        return low, high

    def row(self) -> str:
        rates = [s.events_per_second for s in self.streams]
        low, high = min(rates), max(rates)
        ratio = "" if self.ratio is None else f"{self.ratio:.2f}\u00d7"
        paired = ""
        if self.paired_ratio is not None:
            q1, q3 = self.paired_quartiles()
            paired = f"{self.paired_ratio:.2f}\u00d7 ({q1:.2f} to {q3:.2f})"
        return (
            f"| {self.server} | {self.persistence} | {self.streams[0].events} "
            f"| {self.events_per_second:,.0f} | {low:,.0f} to {high:,.0f} | {ratio} | {paired} "
            f"| {self.median(lambda s: s.first_byte) * 1000:.1f} "
            f"| {self.median(lambda s: s.first_event) * 1000:.1f} "
            f"| {self.median(lambda s: s.finished_to_close_ms):.2f} | {len(self.streams)} |"
        )


#: A measured run starts this long after the previous run's stream ended: a durable run stores
#: its last writes after its ``RUN_FINISHED``, and those belong to that run, not to the next.
SETTLE_SECONDS = 0.25


async def _runs(client: httpx.AsyncClient, url: str, samples: int) -> list[Stream]:
    streams = []
    for i in range(samples + 1):
        if i:
            await asyncio.sleep(SETTLE_SECONDS)
        thread = f"t-{uuid.uuid4().hex[:12]}"
        result = await stream(client, "POST", url, body=run_body(thread, f"r-{i}"))
        if result.status != 200 or result.terminal_type != "RUN_FINISHED":
            raise RuntimeError(f"{url} answered {result.status}, ending {result.terminal_type!r}.")
        if i:  # the first run warms the mount up
            streams.append(result)
    return streams


async def measure_mounts(
    server: str, mounts: list[tuple[str, str]], *, samples: int, off: str
) -> list[Row]:
    """Rows for ``mounts`` (``(persistence label, url)``), each against the ``off`` label's.

    The mounts are measured in turn, ``samples`` runs each, interleaved round by round so a
    load spike on the shared machine lands on all of them alike; each row but ``off``'s also
    keeps its per-round ratios to ``off`` (``Row.paired``).
    """
    results: dict[str, list[Stream]] = {label: [] for label, _ in mounts}
    async with httpx.AsyncClient(timeout=120.0) as client:
        for label, url in mounts:
            results[label].extend(await _runs(client, url, 0))  # warm-up only
        for _ in range(samples):
            for label, url in mounts:
                results[label].extend(await _runs(client, url, 1))
    baseline = statistics.median(s.events_per_second for s in results[off])
    return [
        Row(
            server=server,
            persistence=label,
            streams=results[label],
            baseline=None if label == off else baseline,
            paired=None
            if label == off
            else [
                on.events_per_second / base.events_per_second
                for on, base in zip(results[label], results[off], strict=True)
            ],
        )
        for label, _ in mounts
    ]


FIRST_EVENT_HEADER = (
    "| mount | first event ms (median) | min | max | over off ms | one request ms | target "
    "| runs |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |"
)


async def first_event_table(
    off_url: str, slow_url: str, lookups_url: str, *, latency_ms: float, samples: int
) -> list[str]:
    """Time to the first event on a new thread: persistence off against a Memory Service
    with ``latency_ms`` per request (target: at most one request time more).

    One request time is what the server's lookups took in these runs (``lookups_url``: the
    GET times of its slow transport, ``latency_ms`` included), median.
    """
    times: dict[str, list[float]] = {off_url: [], slow_url: []}
    async with httpx.AsyncClient(timeout=120.0) as client:
        for url in times:
            await _runs(client, url, 0)
        seen = len((await client.get(lookups_url)).json()["ms"])
        for _ in range(samples):
            for url in times:
                [result] = await _runs(client, url, 1)
                times[url].append(result.first_event * 1000)
        request = statistics.median((await client.get(lookups_url)).json()["ms"][seen:])
    off = statistics.median(times[off_url])
    lines = []
    for label, url in (
        ("persistence off", off_url),
        (f"Memory Service, {latency_ms:g} ms per request", slow_url),
    ):
        values = times[url]
        median = statistics.median(values)
        slow = url != off_url
        over = f"{median - off:.1f}" if slow else ""
        verdict = "met" if median - off <= request else "missed"
        target = f"≤ one request: {verdict}" if slow else ""
        lines.append(
            f"| {label} | {median:.1f} | {min(values):.1f} | {max(values):.1f} | {over} "
            f"| {f'{request:.1f}' if slow else ''} | {target} | {len(values)} |"
        )
    return lines


def run_sync(coro: Any) -> Any:
    return asyncio.run(coro)
