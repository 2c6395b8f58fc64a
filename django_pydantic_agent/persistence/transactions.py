"""Write transactions that hold SQLite's write lock before their first read.

On SQLite, Django begins a transaction with a plain (deferred) ``BEGIN`` unless
``OPTIONS["transaction_mode"]`` says otherwise: the transaction reads under a shared lock and
asks for the write lock at its first write, and SQLite refuses that upgrade at once, without
waiting out the ``timeout``, while another connection writes ("database is locked").
``write_transaction`` begins such a transaction with ``BEGIN IMMEDIATE`` instead, so a second
writer waits at its ``BEGIN``; every write transaction of the package goes through it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

__all__ = ["write_transaction"]


def _begins_deferred(connection: Any) -> bool:
    """Whether ``transaction.atomic()`` would begin a deferred transaction on ``connection``.

    Only a SQLite connection outside any atomic block, whose ``transaction_mode`` is unset.
    The connection is opened first: opening it sets ``transaction_mode`` from ``OPTIONS``.
    """
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        return False
    connection.ensure_connection()
    return getattr(connection, "transaction_mode", None) is None


@contextmanager
def write_transaction(using: str | None = None) -> Iterator[None]:
    """``transaction.atomic(using=using)`` for a transaction that writes.

    On a SQLite connection without ``OPTIONS["transaction_mode"]``, an outermost block
    begins with ``BEGIN IMMEDIATE``: it holds the write lock from the start, so a concurrent
    writer makes it wait (up to the connection's ``timeout``) instead of failing at its first
    write. On any other database, with a configured mode, or inside an atomic block, it is
    exactly ``transaction.atomic()``. Synchronous, as the ORM is: call it off the event loop.
    """
    alias = using or DEFAULT_DB_ALIAS
    connection = connections[alias]
    with ExitStack() as stack:
        if _begins_deferred(connection):
            # Django's SQLite backend reads the attribute when it begins the transaction.
            connection.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]
            try:
                stack.enter_context(transaction.atomic(using=alias))
            finally:
                connection.transaction_mode = None  # type: ignore[attr-defined]
        else:
            stack.enter_context(transaction.atomic(using=alias))
        yield
