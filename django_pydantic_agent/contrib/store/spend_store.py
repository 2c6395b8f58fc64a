"""``DefaultSpendStore``: the pydantic-ai-harness ``BatchSpendStore`` on the Django ORM.

``SpendLimits(store=DefaultSpendStore())`` keeps its budget counters in ``StoredSpendCounter``
rows, so every worker sharing the database enforces one budget. Each response's windows are
applied in one transaction, each as one ``UPDATE ... SET n = n + delta`` (atomic on PostgreSQL
and SQLite alike: no read-modify-write, so concurrent workers never lose an increment). Needs
the ``harness`` extra and the ``django_pydantic_agent.contrib.store`` app installed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError
from django.db.models import F, Q

from django_pydantic_agent.contrib.store._harness_extra import harness_missing
from django_pydantic_agent.persistence.transactions import write_transaction

try:
    from django_pydantic_agent._harness_spend import SpendEntry, Spent
except ModuleNotFoundError as exc:
    raise harness_missing(exc, "DefaultSpendStore") from None

from django_pydantic_agent.contrib.store.models.usage import (
    SPEND_KEY_MAX_LENGTH,
    StoredSpendCounter,
)

__all__ = ["DefaultSpendStore", "stored_spend_key"]

#: Dollars to the integer billionths a counter holds (``RedisSpendStore``'s unit).
_NANOS = Decimal(1_000_000_000)
#: How often a write starts again after a concurrent first write of the same key won.
_ATTEMPTS = 3


def _utc_now() -> datetime:
    from django.utils import timezone

    return timezone.now()


def stored_spend_key(key: str) -> str:
    """The ``StoredSpendCounter.key`` of a harness budget key: the key itself, or
    ``sha256:<hex>`` when it is longer than the column."""
    if len(key) <= SPEND_KEY_MAX_LENGTH:
        return key
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def _to_nanos(usd: Decimal) -> int:
    with localcontext() as context:
        context.prec = 40
        return int((usd * _NANOS).to_integral_value(rounding=ROUND_HALF_UP))


def _spent(row: StoredSpendCounter | None) -> Spent:
    if row is None:
        return Spent()
    with localcontext() as context:
        context.prec = 40
        usd = Decimal(row.usd_nanos) / _NANOS
    return Spent(
        usd=usd,
        tokens=row.tokens,
        requests=row.requests,
        unpriced_requests=row.unpriced_requests,
    )


class DefaultSpendStore:
    """Budget counters in ``StoredSpendCounter`` rows, shared by every worker of the database.

    Implements the harness's ``BatchSpendStore``: ``get_many`` reads every key in one query,
    ``add_many`` applies every window of a response in one transaction and returns the new
    totals. A counter past its ``SpendEntry.ttl`` reads as zero and starts again on its next
    write; ``prune()`` deletes such rows. ``SpendEntry.token`` is not remembered: each entry is
    applied once per call (the durable journal is what replays an accrual). ``clock`` supplies
    the time expiry is measured against; ``using`` names the database alias.

    The budget it enforces is a brake, not a reservation: runs that pass the check together
    can each spend one response past the ceiling (docs/usage.md).
    """

    def __init__(
        self, *, clock: Callable[[], datetime] = _utc_now, using: str | None = None
    ) -> None:
        self._clock = clock
        self._using = using

    def __repr__(self) -> str:
        return f"DefaultSpendStore(using={self._using!r})"

    def _rows(self) -> Any:
        return StoredSpendCounter.objects.using(self._using)

    async def get_many(self, keys: Sequence[str]) -> Mapping[str, Spent]:
        """What each key has accumulated; a key never written, or expired, reads as zero."""
        if not keys:
            return {}
        return await sync_to_async(self._get_sync)(list(keys))

    def _get_sync(self, keys: list[str]) -> dict[str, Spent]:
        names = {key: stored_spend_key(key) for key in keys}
        now = self._clock()
        live = Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        rows = {row.key: row for row in self._rows().filter(live, key__in=set(names.values()))}
        return {key: _spent(rows.get(name)) for key, name in names.items()}

    async def add_many(self, entries: Sequence[SpendEntry]) -> Mapping[str, Spent]:
        """Apply every entry in one transaction and return each key's new total.

        Either every window of the response is counted or none is. Entries sharing a key are
        applied in order, and the key's total is read after the last.
        """
        if not entries:
            return {}
        return await sync_to_async(self._add_sync)(list(entries))

    def _add_sync(self, entries: list[SpendEntry]) -> dict[str, Spent]:
        now = self._clock()
        with write_transaction(using=self._using):
            for entry in entries:
                self._apply(entry, now)
            names = {entry.key: stored_spend_key(entry.key) for entry in entries}
            rows = {row.key: row for row in self._rows().filter(key__in=set(names.values()))}
        return {key: _spent(rows.get(name)) for key, name in names.items()}

    def _apply(self, entry: SpendEntry, now: datetime) -> None:
        name = stored_spend_key(entry.key)
        nanos = _to_nanos(entry.usd)
        expires_at = None if entry.ttl is None else now + entry.ttl
        rows = self._rows().filter(key=name)
        live = Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        for _ in range(_ATTEMPTS):
            # The row's own value plus the delta, in the database: concurrent writers queue on
            # the row and none of them loses another's increment.
            if rows.filter(live).update(
                usd_nanos=F("usd_nanos") + nanos,
                tokens=F("tokens") + entry.tokens,
                requests=F("requests") + entry.requests,
                unpriced_requests=F("unpriced_requests") + entry.unpriced,
                expires_at=expires_at,
                updated_at=now,
            ):
                return
            start = {
                "usd_nanos": nanos,
                "tokens": entry.tokens,
                "requests": entry.requests,
                "unpriced_requests": entry.unpriced,
                "expires_at": expires_at,
                "updated_at": now,
            }
            # An expired window starts again. Only while it is still expired: a worker that
            # restarted it first has made it live, and this write then adds to it instead.
            if rows.filter(expires_at__lte=now).update(**start):
                return
            try:
                with write_transaction(using=self._using):
                    self._rows().create(key=name, **start)
            except IntegrityError:
                continue  # another worker created it first: add to theirs
            return
        raise RuntimeError(f"Could not apply a spend entry to counter {name!r}.")

    async def prune(self) -> int:
        """Delete the counters whose window has expired; how many were deleted."""
        return await sync_to_async(self._prune_sync)()

    def _prune_sync(self) -> int:
        deleted, _ = self._rows().filter(expires_at__lte=self._clock()).delete()
        return int(deleted)
