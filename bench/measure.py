"""Timing helpers shared by ``bench.scenarios`` and ``bench.predecessor``.

Imports only Django, so the predecessor script can use it from another virtualenv.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

__all__ = ["HEADER", "Figure", "measure", "message"]

#: The Markdown table header matching ``Figure.row``.
HEADER = (
    "| scenario | operation | median ms | p95 ms | queries | WAL KiB | samples |\n"
    "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
)


@dataclass(frozen=True, kw_only=True)
class Figure:
    """One measured operation: median and p95 wall time, queries and WAL written per operation.

    ``wal_kib`` (PostgreSQL only, else ``None``) is the mean write-ahead log volume of one
    operation: what the database really wrote, whatever the query count.
    """

    scenario: str
    operation: str
    median_ms: float
    p95_ms: float
    queries: float
    samples: int
    wal_kib: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    def row(self) -> str:
        wal = "n/a" if self.wal_kib is None else f"{self.wal_kib:.1f}"
        return (
            f"| {self.scenario} | {self.operation} | {self.median_ms:.2f} | {self.p95_ms:.2f} "
            f"| {self.queries:g} | {wal} | {self.samples} |"
        )


def _wal_position() -> str | None:
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_insert_lsn()::text")
        return str(cursor.fetchone()[0])


def _wal_bytes(start: str, end: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", [end, start])
        return int(cursor.fetchone()[0])


@contextmanager
def _queries() -> Iterator[CaptureQueriesContext]:
    with CaptureQueriesContext(connection) as ctx:
        yield ctx


def measure(scenario: str, operation: str, samples: int, action: Callable[[int], object]) -> Figure:
    timings: list[float] = []
    queries: list[int] = []
    wal: list[int] = []
    for i in range(samples):
        wal_start = _wal_position()
        with _queries() as ctx:
            start = time.perf_counter()
            action(i)
            timings.append((time.perf_counter() - start) * 1000)
        queries.append(len(ctx.captured_queries))
        wal_end = _wal_position()
        if wal_start is not None and wal_end is not None:
            wal.append(_wal_bytes(wal_start, wal_end))
    ordered = sorted(timings)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return Figure(
        scenario=scenario,
        operation=operation,
        median_ms=statistics.median(timings),
        p95_ms=p95,
        queries=statistics.mean(queries),
        samples=samples,
        wal_kib=statistics.mean(wal) / 1024 if wal else None,
    )


def message(i: int) -> dict[str, Any]:
    """The ``i``-th message of a benchmark thread: about 300 characters of word-like text.

    Seeded pseudo-random words rather than a repeated phrase, so the database's compression
    (PostgreSQL's TOAST) does not make whole-thread rewrites look cheaper than real prose.
    """
    rng = random.Random(i)
    words = (
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(50)
    )
    role = "user" if i % 2 == 0 else "assistant"
    return {"id": f"msg-{i}", "role": role, "content": " ".join(words)}
