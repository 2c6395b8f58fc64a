"""``DefaultSpendStore``: the harness's ``BatchSpendStore`` on ``StoredSpendCounter`` rows.

The same sequence of writes gives the same totals as the harness's own ``InMemorySpendStore``
(differential); what only ours does: it is shared by every connection to the database, its
increments never lose one another under concurrent writers, and a window that expired starts
again.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from django_pydantic_agent._harness_spend import (
    BatchSpendStore,
    Budget,
    InMemorySpendStore,
    SpendEntry,
    SpendLimitExceeded,
    SpendLimits,
    Spent,
)
from django_pydantic_agent.contrib.store.models import StoredSpendCounter
from django_pydantic_agent.contrib.store.spend_store import DefaultSpendStore, stored_spend_key

pytestmark = pytest.mark.django_db(transaction=True)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _writes() -> list[list[SpendEntry]]:
    day = timedelta(days=2)
    return [
        [
            SpendEntry(
                key="d|day|*|2026-12-05", usd=Decimal("0.001"), tokens=10, requests=1, ttl=day
            )
        ],
        [
            SpendEntry(key="d|day|*|2026-12-05", usd=Decimal("0.000000002"), tokens=5, requests=1),
            SpendEntry(key="m|month|*|2026-12", usd=Decimal("2.5"), tokens=7, unpriced=1),
        ],
        [SpendEntry(key="d|day|*|2026-12-05", usd=Decimal("-0.0005"))],
        [SpendEntry(key="x" * 300, tokens=3, requests=2)],
    ]


async def test_the_same_writes_give_the_same_totals_as_the_harness_in_memory_store() -> None:
    ours, reference = DefaultSpendStore(), InMemorySpendStore(dedup_retain=None)
    assert isinstance(ours, BatchSpendStore)
    for entries in _writes():
        assert await ours.add_many(entries) == await reference.add_many(entries)
    keys = ["d|day|*|2026-12-05", "m|month|*|2026-12", "x" * 300, "never-written"]
    assert await ours.get_many(keys) == await reference.get_many(keys)
    assert (await ours.get_many(["never-written"]))["never-written"] == Spent()
    assert await ours.get_many([]) == {}
    assert await ours.add_many([]) == {}


async def test_a_fresh_instance_reads_what_another_wrote_exactly() -> None:
    await DefaultSpendStore().add_many(
        [SpendEntry(key="k", usd=Decimal("0.000000001"), tokens=1, requests=1)] * 3
    )

    spent = (await DefaultSpendStore().get_many(["k"]))["k"]

    assert spent == Spent(usd=Decimal("0.000000003"), tokens=3, requests=3)


async def test_amounts_are_held_in_billionths_of_a_dollar_as_the_redis_store_holds_them() -> None:
    spent = await DefaultSpendStore().add_many([SpendEntry(key="k", usd=Decimal("0.0000000015"))])

    assert spent["k"].usd == Decimal("0.000000002")


async def test_a_key_longer_than_the_column_is_stored_as_its_digest() -> None:
    key = "budget|day|" + "s" * 400 + "|2026-12-05"
    await DefaultSpendStore().add_many([SpendEntry(key=key, tokens=4)])

    row = await StoredSpendCounter.objects.aget()
    assert row.key == stored_spend_key(key)
    assert row.key.startswith("sha256:")
    assert len(row.key) <= 255


async def test_an_expired_window_reads_as_zero_and_starts_again_on_its_next_write() -> None:
    clock = Clock()
    store = DefaultSpendStore(clock=clock)
    hour = timedelta(hours=1)
    await store.add_many([SpendEntry(key="k", usd=Decimal(3), requests=1, ttl=hour)])

    clock.now += 2 * hour
    assert (await store.get_many(["k"]))["k"] == Spent()
    after = await store.add_many([SpendEntry(key="k", usd=Decimal(1), requests=1, ttl=hour)])

    assert after["k"] == Spent(usd=Decimal(1), requests=1)
    assert await StoredSpendCounter.objects.acount() == 1


async def test_prune_deletes_only_expired_counters() -> None:
    clock = Clock()
    store = DefaultSpendStore(clock=clock)
    await store.add_many(
        [
            SpendEntry(key="short", tokens=1, ttl=timedelta(minutes=1)),
            SpendEntry(key="long", tokens=1, ttl=timedelta(days=1)),
            SpendEntry(key="forever", tokens=1),
        ]
    )
    clock.now += timedelta(hours=1)

    assert await store.prune() == 1
    assert {row.key async for row in StoredSpendCounter.objects.all()} == {"long", "forever"}


def test_concurrent_writers_on_their_own_connections_lose_no_increment() -> None:
    """Eight threads, each with its own database connection, add to one counter at once."""
    if connection.vendor == "sqlite" and connection.settings_dict["NAME"].startswith("file:"):
        pytest.skip("SQLite's in-memory test database is one connection; run on PostgreSQL.")
    writers, each = 8, 15
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write() -> None:
        store = DefaultSpendStore()
        try:
            barrier.wait()
            for _ in range(each):
                asyncio.run(
                    store.add_many(
                        [
                            SpendEntry(
                                key="race|day|*|d", usd=Decimal("0.01"), tokens=2, requests=1
                            ),
                            SpendEntry(key="race|month|*|m", usd=Decimal("0.01"), requests=1),
                        ]
                    )
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    totals = asyncio.run(DefaultSpendStore().get_many(["race|day|*|d", "race|month|*|m"]))
    assert totals["race|day|*|d"] == Spent(
        usd=Decimal("0.01") * writers * each, tokens=2 * writers * each, requests=writers * each
    )
    assert totals["race|month|*|m"].requests == writers * each


async def test_spend_limits_refuses_the_next_request_once_a_worker_spent_the_day() -> None:
    """Two ``SpendLimits`` (two workers) over the store: what one spends, the other sees."""
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    def limits() -> SpendLimits[None]:
        return SpendLimits(
            budgets=[Budget(usd=Decimal("0.02"), window="day")],
            store=DefaultSpendStore(),
            price=lambda response: Decimal("0.01"),
        )

    first = Agent(TestModel(custom_output_text="ok"), capabilities=[limits()])
    second = Agent(TestModel(custom_output_text="ok"), capabilities=[limits()])
    await first.run("one")
    await second.run("two")

    with pytest.raises(SpendLimitExceeded, match=r"spent \$0\.02 of \$0\.02"):
        await first.run("three")
    row = await StoredSpendCounter.objects.aget()
    assert (row.requests, row.usd_nanos) == (2, 20_000_000)


def test_a_read_is_one_query_and_a_response_one_update_per_window_and_one_read() -> None:
    store = DefaultSpendStore()
    entries = [SpendEntry(key=f"k{n}", usd=Decimal(1), requests=1) for n in range(3)]
    store._add_sync(entries)  # the rows exist: the steady state of a day's window

    with CaptureQueriesContext(connection) as reads:
        store._get_sync(["k0", "k1", "k2"])
    with CaptureQueriesContext(connection) as writes:
        store._add_sync(entries)

    assert len(reads) == 1
    statements = [
        q["sql"].split()[0] for q in writes if q["sql"].split()[0] in ("UPDATE", "SELECT")
    ]
    assert statements == ["UPDATE", "UPDATE", "UPDATE", "SELECT"]
