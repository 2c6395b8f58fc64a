"""Backend outages: telling one from a bug, recovering a connection after it, retrying past it.

A database that restarts, a cache that restarts and a disk that fills are outages, not bugs:
what failed will work again without a change to the code. Each is told apart here
(``is_database_outage``, ``is_cache_outage``) and raised as one ``BackendUnavailableError``
(also a ``ConnectionError``, which ``chat_history`` retries as transient; the database one is
also Django's ``OperationalError``). ``unit_of_work`` runs one synchronous unit of work off the
event loop, as ``sync_to_async`` does, and first closes a connection an earlier outage left
broken: a run's background writes share one worker thread that no request cycle cleans up
after, so without it the thread's connection would stay dead after the database came back.
``retry_outage`` retries a call for a bounded time while its backend is out, and
``OutageLog`` logs an outage once, not once per attempt.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable
from typing import Final, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import DatabaseError, InterfaceError, OperationalError, connections

__all__ = [
    "CACHE_ERRORS",
    "OUTAGE_RETRY_SECONDS",
    "BackendUnavailableError",
    "CacheUnavailableError",
    "DatabaseUnavailableError",
    "OutageLog",
    "StorageUnavailableError",
    "as_unavailable",
    "is_cache_outage",
    "is_database_outage",
    "is_outage",
    "reset_broken_connections",
    "retry_outage",
    "unit_of_work",
]

logger = logging.getLogger("django_pydantic_agent.persistence")

P = ParamSpec("P")
T = TypeVar("T")

#: How long a run's last writes (its final flush, its run record) wait for a backend to return.
OUTAGE_RETRY_SECONDS: Final[float] = 30.0
# PostgreSQL SQLSTATEs of a server going or gone: the connection exception class (08xxx),
# admin_shutdown, crash_shutdown, cannot_connect_now (starting up, shutting down).
_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG})
_RETRY_PAUSES: Final = (0.1, 0.2, 0.5, 1.0)


class BackendUnavailableError(ConnectionError):
    """A backend a store needs (database, cache, file storage) cannot be used now.

    What was being written was not written; the same call succeeds once the backend is back.
    Routes answer it with a 503 and ``Retry-After`` (``StorageUnavailableError`` with a full
    disk: 507). ``backend`` names it for people.
    """

    backend: str = "A backend"


class DatabaseUnavailableError(BackendUnavailableError, OperationalError):
    """The database cannot be reached, or is restarting (also Django's ``OperationalError``)."""

    backend = "The database"


class CacheUnavailableError(BackendUnavailableError):
    """Django's cache (Redis, Memcached) cannot be reached, or is restarting."""

    backend = "The cache"


class StorageUnavailableError(BackendUnavailableError):
    """A file ``Storage`` refused to write (``full``: no space or quota left on it)."""

    backend = "The file storage"

    def __init__(self, message: str, *, full: bool = False) -> None:
        super().__init__(message)
        self.full = full

    @classmethod
    def wrapping(cls, exc: BaseException) -> StorageUnavailableError:
        """The error for a ``Storage`` write that raised ``exc`` (chain it with ``from``)."""
        full = isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS
        what = "is full" if full else f"failed ({type(exc).__name__})"
        return cls(f"The attachment storage {what}; nothing was stored.", full=full)


def _sqlstate(exc: BaseException) -> str | None:
    cause = exc.__cause__
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    return str(code) if code else None


def is_database_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is unreachable or restarting, not that a query failed.

    A lost or refused connection (PostgreSQL's connection exceptions and server shutdown
    codes, or a driver error with no SQLSTATE at all), and ``DatabaseUnavailableError``.
    """
    if isinstance(exc, DatabaseUnavailableError):
        return True
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    cause = exc.__cause__
    if cause is None or not type(cause).__module__.startswith(("psycopg", "psycopg2")):
        return False
    code = _sqlstate(exc)
    return code is None or code.startswith("08") or code in _GONE_SQLSTATES


def _cache_errors() -> tuple[type[Exception], ...]:
    try:
        from redis import exceptions
    except ImportError:  # pragma: no cover - redis is a dependency of the extras
        return (CacheUnavailableError,)
    return (CacheUnavailableError, exceptions.ConnectionError, exceptions.TimeoutError)


#: The exceptions of a cache that cannot be reached (Redis's, and ``CacheUnavailableError``).
CACHE_ERRORS: Final = _cache_errors()


def is_cache_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says Django's cache cannot be reached (Redis down or restarting)."""
    return isinstance(exc, CACHE_ERRORS)


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` is an outage of a backend (``BackendUnavailableError``, database, cache)."""
    return (
        isinstance(exc, BackendUnavailableError) or is_database_outage(exc) or is_cache_outage(exc)
    )


def as_unavailable(exc: BaseException) -> BackendUnavailableError | None:
    """``exc`` as a ``BackendUnavailableError`` when it is an outage, else ``None``."""
    if isinstance(exc, BackendUnavailableError):
        return exc
    detail = " ".join(str(exc).split())  # drivers' messages run over several lines
    if is_database_outage(exc):
        return DatabaseUnavailableError(f"The database is unavailable: {detail}")
    if is_cache_outage(exc):
        return CacheUnavailableError(f"The cache is unavailable: {detail}")
    return None


def reset_broken_connections() -> None:
    """Close this thread's database connections that an error left unusable.

    Only a connection that saw an error is checked (a healthy one costs nothing), and never
    one inside an atomic block (closing it would break the transaction around it). The next
    query then connects again.
    """
    for connection in connections.all(initialized_only=True):
        if connection.connection is None or connection.in_atomic_block:
            continue
        if connection.errors_occurred:
            if connection.is_usable():
                connection.errors_occurred = False  # as Django's own check does
            else:
                connection.close()


def _close_after_outage() -> None:
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and not connection.in_atomic_block:
            try:
                connection.close()
            except DatabaseError:  # pragma: no cover - closing a dead socket
                connection.connection = None


def unit_of_work(func: Callable[P, T]) -> Callable[P, Awaitable[T]]:
    """``sync_to_async(func)`` that survives a database or cache restart.

    Before ``func`` runs, a connection an earlier outage broke is closed (it reconnects);
    an outage ``func`` meets is raised as ``DatabaseUnavailableError`` or
    ``CacheUnavailableError`` (chained), and leaves no broken connection behind.
    """

    def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
        reset_broken_connections()
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            unavailable = as_unavailable(exc)
            if unavailable is None or unavailable is exc:
                raise
            if isinstance(unavailable, DatabaseUnavailableError):
                _close_after_outage()
            raise unavailable from exc

    return sync_to_async(guarded)


class OutageLog:
    """Logs an outage once: a ``WARNING`` line at its first failure, ``INFO`` when it ends.

    ``failed(what, exc)`` returns whether this failure was logged; failures in between are
    logged at ``DEBUG`` only, and none of them with a traceback (an outage is not a bug).
    """

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._failing: set[str] = set()

    def failed(self, what: str, exc: BaseException) -> bool:
        """Note that ``what`` failed with ``exc``."""
        if what in self._failing:
            self._log.debug("%s still fails: %s: %s", what, type(exc).__name__, exc)
            return False
        self._failing.add(what)
        self._log.warning(
            "%s failed (%s: %s); retrying until the backend is back.",
            what,
            type(exc).__name__,
            exc,
        )
        return True

    def recovered(self, what: str) -> None:
        """Note that ``what`` works again (logged once, only after a failure)."""
        if what in self._failing:
            self._failing.discard(what)
            self._log.info("%s works again.", what)


async def retry_outage(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    seconds: float = OUTAGE_RETRY_SECONDS,
    log: logging.Logger = logger,
) -> T:
    """``await call()``, called again while it fails with an outage, for up to ``seconds``.

    One ``WARNING`` line at the first failure and one ``INFO`` line when it succeeds after
    one (``what`` names it); any other error, and the outage still there after ``seconds``,
    is raised.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    attempt = 0
    while True:
        try:
            result = await call()
        except Exception as exc:
            if not is_outage(exc) or loop.time() >= deadline:
                raise
            if attempt == 0:
                log.warning(
                    "%s failed (%s: %s); retrying for up to %s s.",
                    what,
                    type(exc).__name__,
                    exc,
                    seconds,
                )
            pause = _RETRY_PAUSES[min(attempt, len(_RETRY_PAUSES) - 1)]
            attempt += 1
            await asyncio.sleep(min(pause, max(deadline - loop.time(), 0.0)))
            continue
        if attempt:
            log.info("%s succeeded after %d failed attempt(s).", what, attempt)
        return result
