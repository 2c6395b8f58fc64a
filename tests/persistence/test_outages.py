"""persistence.outages: an outage told from a bug, a broken connection recovered, bounded retries.

The PostgreSQL case is real: the server ends the test's connection (``pg_terminate_backend``,
what a restart does to every client), and the next unit of work must connect again.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
import pytest
import redis
from django.db import DatabaseError, OperationalError, connection, connections
from psycopg import errors

from django_pydantic_agent.persistence.outages import (
    BackendUnavailableError,
    CacheUnavailableError,
    DatabaseUnavailableError,
    OutageLog,
    StorageUnavailableError,
    is_cache_outage,
    is_database_outage,
    is_outage,
    retry_outage,
    unit_of_work,
)


def _django_error(cause: BaseException, kind: type[Exception] = OperationalError) -> Exception:
    error = kind(str(cause))
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("cause", "outage"),
    [
        (psycopg.OperationalError("server closed the connection unexpectedly"), True),
        (psycopg.OperationalError("connection failed: Connection refused"), True),
        (errors.AdminShutdown("terminating connection due to administrator command"), True),
        (errors.CannotConnectNow("the database system is starting up"), True),
        (errors.ConnectionFailure("connection failure"), True),
        (errors.LockNotAvailable("canceling statement due to lock timeout"), False),
        (errors.UndefinedTable("relation does not exist"), False),
    ],
)
def test_a_lost_or_refused_connection_is_an_outage_a_failed_query_is_not(
    cause: BaseException, outage: bool
) -> None:
    assert is_database_outage(_django_error(cause)) is outage
    assert is_outage(_django_error(cause)) is outage


def test_sqlite_busy_and_foreign_errors_are_not_outages() -> None:
    import sqlite3

    assert not is_database_outage(_django_error(sqlite3.OperationalError("database is locked")))
    assert not is_database_outage(OperationalError("no cause"))
    assert not is_database_outage(ValueError("not a database error"))


def test_the_outage_errors_are_what_each_side_catches() -> None:
    database = DatabaseUnavailableError("gone")
    # chat_history retries a ConnectionError; Django code catches an OperationalError.
    assert isinstance(database, ConnectionError | OperationalError | DatabaseError)
    assert is_database_outage(database)
    assert is_cache_outage(redis.exceptions.ConnectionError("refused"))
    assert is_cache_outage(redis.exceptions.TimeoutError("timed out"))
    assert is_cache_outage(CacheUnavailableError("gone"))
    assert not is_cache_outage(redis.exceptions.ResponseError("WRONGTYPE"))
    assert isinstance(StorageUnavailableError("x"), BackendUnavailableError)


def test_a_full_disk_is_told_from_another_storage_failure() -> None:
    import errno

    full = StorageUnavailableError.wrapping(OSError(errno.ENOSPC, "No space left on device"))
    other = StorageUnavailableError.wrapping(RuntimeError("bucket unreachable"))
    assert full.full
    assert str(full) == "The attachment storage is full; nothing was stored."
    assert not other.full
    assert str(other) == "The attachment storage failed (RuntimeError); nothing was stored."


async def test_retry_outage_retries_an_outage_and_logs_it_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failures = [CacheUnavailableError("down")] * 3

    async def call() -> str:
        if failures:
            raise failures.pop()
        return "done"

    log = logging.getLogger("tests.outages")
    with caplog.at_level(logging.INFO, logger="tests.outages"):
        assert await retry_outage(call, what="Ending run 'r1'", seconds=5, log=log) == "done"
    assert caplog.messages == [
        "Ending run 'r1' failed (CacheUnavailableError: down); retrying for up to 5 s.",
        "Ending run 'r1' succeeded after 3 failed attempt(s).",
    ]
    assert not any(record.exc_info for record in caplog.records)


async def test_retry_outage_raises_a_bug_at_once_and_an_outage_after_its_bound() -> None:
    calls = 0

    async def bug() -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError):
        await retry_outage(bug, what="x", seconds=5)
    assert calls == 1

    async def down() -> None:
        raise DatabaseUnavailableError("still down")

    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(DatabaseUnavailableError):
        await retry_outage(down, what="x", seconds=0.3)
    assert loop.time() - started < 2


def test_outage_log_logs_the_first_failure_and_the_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outages = OutageLog(logging.getLogger("tests.outages"))
    with caplog.at_level(logging.INFO, logger="tests.outages"):
        outages.recovered("Relaying")  # nothing failed: nothing to say
        assert outages.failed("Relaying", CacheUnavailableError("down"))
        assert not outages.failed("Relaying", CacheUnavailableError("down"))
        outages.recovered("Relaying")
        assert outages.failed("Relaying", CacheUnavailableError("down again"))
    assert caplog.messages == [
        "Relaying failed (CacheUnavailableError: down); retrying until the backend is back.",
        "Relaying works again.",
        "Relaying failed (CacheUnavailableError: down again); retrying until the backend is back.",
    ]


@pytest.mark.postgresql
@pytest.mark.django_db(transaction=True)
async def test_unit_of_work_connects_again_after_the_server_ended_its_connection() -> None:
    def backend_pid() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    def terminate(pid: int) -> None:
        # Another connection ends this one, as a server restart ends every client's.
        settings: dict[str, Any] = connection.get_connection_params()
        with psycopg.connect(**settings, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])

    work = unit_of_work(backend_pid)
    first = await work()
    await asyncio.to_thread(terminate, first)
    with pytest.raises(DatabaseUnavailableError) as raised:
        await work()
    assert isinstance(raised.value, ConnectionError)
    second = await work()  # the broken connection was closed: this one is new
    assert second != first
    await unit_of_work(connections.close_all)()


@pytest.mark.django_db(transaction=True)
async def test_a_connection_that_saw_an_error_but_still_works_is_kept() -> None:
    def saw_an_error() -> int:
        connection.ensure_connection()
        connection.errors_occurred = True  # a failed query that left the connection usable
        return id(connection.connection)

    def current() -> tuple[int, bool]:
        return id(connection.connection), connection.errors_occurred

    first = await unit_of_work(saw_an_error)()
    # Checked once, kept, and not checked again at every unit of work after.
    assert await unit_of_work(current)() == (first, False)
