"""persistence.transactions: a write transaction waits for another writer instead of failing.

On SQLite with Django's default settings (no ``transaction_mode``), a transaction that reads
and then writes while another connection holds the write lock fails at its first write, at
once ("database is locked"); ``write_transaction`` begins it ``BEGIN IMMEDIATE``, so it waits.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_pydantic_agent.persistence.transactions import _begins_deferred, write_transaction

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sqlite_options() -> Iterator[Any]:
    """``use(options)`` reopens this thread's SQLite connection with ``OPTIONS=options``."""
    if connection.vendor != "sqlite":
        pytest.skip("Transaction modes are SQLite's.")
    original = connection.settings_dict["OPTIONS"]

    def use(options: dict[str, Any]) -> None:
        connection.close()
        connection.settings_dict["OPTIONS"] = options

    yield use
    connection.close()
    connection.settings_dict["OPTIONS"] = original


@contextmanager
def another_writer(hold: float) -> Iterator[None]:
    """Another connection to the database holds SQLite's write lock for ``hold`` seconds."""
    name = connection.settings_dict["NAME"]
    locked = threading.Event()

    def write() -> None:
        other = sqlite3.connect(name, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            locked.set()
            time.sleep(hold)
            other.execute("COMMIT")
        finally:
            other.close()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert locked.wait(5)
        yield
    finally:
        thread.join()


def read_then_write(name: str) -> None:
    Group.objects.filter(name=name).exists()
    Group.objects.create(name=name)


@pytest.mark.sqlite
def test_on_djangos_defaults_a_read_then_write_transaction_fails_at_once(
    sqlite_options: Any,
) -> None:
    """What ``write_transaction`` is for: ``transaction.atomic()`` alone gives up, no wait."""
    sqlite_options({})
    with another_writer(hold=1.0):
        start = time.monotonic()
        with pytest.raises(OperationalError, match="database is locked"), transaction.atomic():
            read_then_write("deferred")
        assert time.monotonic() - start < 0.9
    assert not Group.objects.filter(name="deferred").exists()


@pytest.mark.sqlite
def test_on_djangos_defaults_it_waits_for_the_other_writer_and_commits(
    sqlite_options: Any,
) -> None:
    sqlite_options({})
    with another_writer(hold=0.3):
        start = time.monotonic()
        with write_transaction():
            read_then_write("immediate")
        waited = time.monotonic() - start
    assert waited >= 0.2
    assert Group.objects.filter(name="immediate").exists()
    assert connection.transaction_mode is None  # as the settings have it


@pytest.mark.sqlite
def test_it_begins_immediate_only_where_django_would_begin_deferred(sqlite_options: Any) -> None:
    sqlite_options({})
    with CaptureQueriesContext(connection) as queries, write_transaction():
        read_then_write("outer")
        with write_transaction():  # nested: a savepoint, as transaction.atomic() makes
            read_then_write("inner")
    statements = [query["sql"] for query in queries.captured_queries]
    assert statements[0] == "BEGIN IMMEDIATE"
    assert not any(s.startswith("BEGIN") for s in statements[1:])
    assert any(s.startswith("SAVEPOINT") for s in statements)

    # A mode the settings chose is kept, DEFERRED included.
    sqlite_options({"transaction_mode": "DEFERRED"})
    with CaptureQueriesContext(connection) as queries, write_transaction():
        read_then_write("chosen")
    assert queries.captured_queries[0]["sql"] == "BEGIN DEFERRED"
    assert connection.transaction_mode == "DEFERRED"


def test_inside_an_atomic_block_it_is_a_savepoint_of_it() -> None:
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries, write_transaction():
            Group.objects.create(name="nested")
        assert not any(q["sql"].startswith("BEGIN") for q in queries.captured_queries)
        transaction.set_rollback(True)
    assert not Group.objects.filter(name="nested").exists()


@pytest.mark.sqlite
def test_an_error_rolls_back_and_restores_the_connection(sqlite_options: Any) -> None:
    def fail_inside() -> None:
        with write_transaction():
            Group.objects.create(name="rolled back")
            raise RuntimeError("boom")

    sqlite_options({})
    with pytest.raises(RuntimeError):
        fail_inside()
    assert not Group.objects.filter(name="rolled back").exists()
    assert connection.transaction_mode is None


@pytest.mark.sqlite
def test_a_begin_that_times_out_restores_the_connection(sqlite_options: Any) -> None:
    sqlite_options({"timeout": 0.1})
    with (
        another_writer(hold=0.6),
        pytest.raises(OperationalError, match="locked"),
        write_transaction(),
    ):
        read_then_write("never")  # the BEGIN fails first
    assert connection.transaction_mode is None
    assert not connection.in_atomic_block


def test_other_databases_begin_as_django_does() -> None:
    for vendor in ("postgresql", "mysql", "oracle"):
        assert not _begins_deferred(types.SimpleNamespace(vendor=vendor, in_atomic_block=False))
    with write_transaction():
        Group.objects.create(name="any database")
    assert Group.objects.filter(name="any database").exists()
