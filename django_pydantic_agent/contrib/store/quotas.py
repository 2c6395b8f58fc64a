"""The limits every store of this app applies: key lengths, quotas and the owner lock.

Below the stores and the ORM repositories, which both refuse a thread over quota the same way.
"""

from __future__ import annotations

import hashlib

from django.db import connection

from django_pydantic_agent.persistence import StoreLimitError

__all__ = [
    "MAX_KEY",
    "check_key",
    "check_quota",
    "count",
    "lock_owner",
    "refuse_new_thread",
]

MAX_KEY = 255
"""The longest owner id, thread id or name a row keeps."""


def check_key(name: str, value: str) -> None:
    if not isinstance(value, str) or not value or len(value) > MAX_KEY:
        raise ValueError(
            f"{name}={value!r} is not valid: pass a non-empty string of at most "
            f"{MAX_KEY} characters."
        )


def check_quota(name: str, value: int | None, what: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(
            f"{name}={value!r} is not valid: pass a positive integer, the most {what} one "
            "owner may keep, or None for no limit."
        )
    return value


def count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def lock_owner(scope: str, owner_id: str) -> None:
    """Serialise quota checks of one owner until the end of the current transaction.

    PostgreSQL takes a transaction-level advisory lock keyed by ``scope`` and owner. SQLite
    needs none: it has one writer at a time, and a transaction that read the count and then
    writes either sees every committed row or fails (``transaction_mode="IMMEDIATE"`` makes
    it wait instead). Other databases get no lock: the quota is then best effort.
    """
    if connection.vendor != "postgresql":
        return
    digest = hashlib.sha256(f"django_pydantic_agent:{scope}:{owner_id}".encode()).digest()
    key = int.from_bytes(digest[:8], "big", signed=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])


def refuse_new_thread(owner_id: str, limit: int) -> None:
    """Raise ``StoreLimitError`` if the owner already keeps ``limit`` threads."""
    from django_pydantic_agent.contrib.store.models import StoredConversation

    if StoredConversation.objects.filter(owner_id=owner_id).count() >= limit:
        raise StoreLimitError(
            f"This conversation store keeps at most {count(limit, 'thread')} per owner "
            f"(max_threads_per_owner={limit}), and that many are stored already: delete a "
            "thread to start a new one."
        )
