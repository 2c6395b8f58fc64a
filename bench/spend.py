"""``python -m bench.spend``: what a spend budget adds to a run, on SQLite or PostgreSQL.

Three budgets on ``DefaultSpendStore`` (a per-user day, a per-thread total and a site-wide day,
as docs/usage.md configures them). In process, no HTTP and no model latency (``TestModel``, one
model request per run):

- **the gate**: ``SpendGate.refusal``, the read before a run is claimed (one query);
- **a run**: ``agent.run`` with the ``SpendLimits`` capability against the same run without it:
  the harness's read before the model request and its accrual after (one transaction).

``DATABASE_URL`` selects the database (a fresh PostgreSQL database is made and dropped; default
SQLite under ``BENCH_DIR`` or a temporary directory). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

__all__ = ["main"]

HEADER = (
    "| database | runs | run without limits (median ms) | with limits in memory "
    "| with limits on `DefaultSpendStore` | spend check per run (ms) "
    "| the gate alone (median ms) |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
)


async def _median_ms(samples: int, action: Callable[[int], Awaitable[Any]]) -> float:
    times = []
    for index in range(samples):
        start = time.perf_counter()
        await action(index)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def measure(samples: int) -> tuple[float, float, float, float]:
    """Median ms of a run without limits, with limits in memory (the harness's own work), with
    limits on ``DefaultSpendStore``, and of the gate alone."""
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from django_pydantic_agent._harness_spend import Budget, InMemorySpendStore, SpendLimits
    from django_pydantic_agent.agui.spend import SpendGate, per_thread, per_user, spend_metadata
    from django_pydantic_agent.contrib.store.spend_store import DefaultSpendStore

    budgets = [
        Budget[None](usd=Decimal("1000"), window="day", scope=per_user, name="user-day"),
        Budget[None](tokens=10**12, window="total", scope=per_thread, name="thread"),
        Budget[None](usd=Decimal("100000"), window="day", name="site-day"),
    ]
    limits: SpendLimits[None] = SpendLimits(
        budgets=budgets, store=DefaultSpendStore(), price=lambda response: Decimal("0.001")
    )
    in_memory: SpendLimits[None] = SpendLimits(
        budgets=budgets, store=InMemorySpendStore(), price=lambda response: Decimal("0.001")
    )
    agent = Agent(TestModel(custom_output_text="ok"))
    gate = SpendGate(limits)
    metadata = spend_metadata("bench-user", "bench-thread")

    async def bare(index: int) -> None:
        await agent.run("hello", metadata=metadata)

    async def limited(index: int) -> None:
        await agent.run("hello", metadata=metadata, capabilities=[limits])

    async def memory(index: int) -> None:
        await agent.run("hello", metadata=metadata, capabilities=[in_memory])

    async def check(index: int) -> None:
        await gate.refusal(
            deps=None, owner_id="bench-user", thread_id="bench-thread", run_id=f"r{index}"
        )

    for action in (bare, memory, limited, check):  # warm up: imports, connections, rows
        await action(-1)
    # Alternate, so a drift of the machine falls on every column alike.
    without: list[float] = []
    harness: list[float] = []
    stored: list[float] = []
    for _ in range(4):
        without.append(await _median_ms(samples // 4, bare))
        harness.append(await _median_ms(samples // 4, memory))
        stored.append(await _median_ms(samples // 4, limited))
    gate_ms = await _median_ms(samples, check)
    return (
        statistics.median(without),
        statistics.median(harness),
        statistics.median(stored),
        gate_ms,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=400, help="runs measured each way")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    url = os.environ.get("DATABASE_URL", "")
    fresh = None
    if url.startswith("postgres"):
        from bench.report import fresh_postgres

        fresh = fresh_postgres(url)
        os.environ["DATABASE_URL"] = fresh.__enter__()
    try:
        import django

        django.setup()
        from asgiref.sync import async_to_sync
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", verbosity=0)
        without, harness, limited, gate = async_to_sync(measure)(max(4, args.samples))
        vendor = connection.vendor
    finally:
        if fresh is not None:
            from django.db import connections

            connections.close_all()
            fresh.__exit__(None, None, None)
    print(HEADER)
    print(
        f"| {vendor} | {max(4, args.samples)} | {without:.2f} | {harness:.2f} | {limited:.2f} "
        f"| {limited - without:.2f} | {gate:.2f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
