"""``DefaultWebhookQueue``: webhook messages kept as ``StoredWebhookDelivery`` rows.

The queue of ``AGUIServer(webhooks=Webhooks(..., queue=DefaultWebhookQueue()))``. Queueing is
one ``INSERT`` that skips an event already kept for that URL. A claim takes the due rows in
one write transaction: ``SELECT ... FOR UPDATE SKIP LOCKED`` where the database has it
(PostgreSQL), so concurrent workers take different rows, and on SQLite under the write lock
(``write_transaction``), which serialises claims; the claimed rows' next attempt moves a lease
ahead in the same transaction. This module imports no models at import time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, router
from django.db.models import F
from django.utils import timezone

from django_pydantic_agent.persistence.outages import unit_of_work
from django_pydantic_agent.persistence.transactions import write_transaction
from django_pydantic_agent.webhooks import DELIVERED, PENDING, WebhookDelivery, WebhookMessage

__all__ = ["DefaultWebhookQueue"]


def _rows() -> Any:
    from django_pydantic_agent.contrib.store.models import StoredWebhookDelivery

    return StoredWebhookDelivery


def _enqueue(messages: Sequence[WebhookMessage]) -> None:
    model = _rows()
    rows = [
        model(
            event_id=m.event_id,
            event_type=m.event_type,
            url=m.url,
            payload=m.body,
            owner_id=m.owner_id[:255],
            thread_id=m.thread_id[:255],
            run_id=m.run_id[:255],
        )
        for m in messages
    ]
    model.objects.bulk_create(rows, ignore_conflicts=True)


def _claim(limit: int, lease_seconds: float) -> list[WebhookDelivery]:
    model = _rows()
    using = router.db_for_write(model)
    now = timezone.now()
    with write_transaction(using):
        due = model.objects.using(using).filter(status=PENDING, next_attempt_at__lte=now)
        if connections[using].features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        rows = list(due.order_by("next_attempt_at", "pk")[:limit])
        model.objects.using(using).filter(pk__in=[row.pk for row in rows]).update(
            attempts=F("attempts") + 1,
            last_attempt_at=now,
            next_attempt_at=now + timedelta(seconds=lease_seconds),
        )
    return [
        WebhookDelivery(
            key=row.pk,
            attempts=row.attempts + 1,
            event_id=row.event_id,
            event_type=row.event_type,
            url=row.url,
            body=row.payload,
            owner_id=row.owner_id,
            thread_id=row.thread_id,
            run_id=row.run_id,
        )
        for row in rows
    ]


def _settle(
    key: Any,
    status: str,
    next_attempt_at: datetime | None,
    response_status: int | None,
    error: str,
) -> None:
    values: dict[str, Any] = {
        "status": status,
        "response_status": response_status,
        "last_error": error,
    }
    if next_attempt_at is not None:
        values["next_attempt_at"] = next_attempt_at
    if status == DELIVERED:
        values["delivered_at"] = timezone.now()
    _rows().objects.filter(pk=key).update(**values)


class DefaultWebhookQueue:
    """A ``webhooks.WebhookQueue`` over ``StoredWebhookDelivery`` rows (see the module
    docstring); each method is one worker-thread hop."""

    async def enqueue(self, messages: Sequence[WebhookMessage]) -> None:
        """Keep ``messages``, due now; an event already kept for a URL is left as it is."""
        await unit_of_work(_enqueue)(list(messages))

    async def claim(self, *, limit: int, lease_seconds: float) -> list[WebhookDelivery]:
        """Claim up to ``limit`` due rows for one attempt each (see the module docstring)."""
        return await unit_of_work(_claim)(limit, lease_seconds)

    async def settle(
        self,
        delivery: WebhookDelivery,
        *,
        status: str,
        next_attempt_at: datetime | None = None,
        response_status: int | None = None,
        error: str = "",
    ) -> None:
        """Record how the attempt of ``delivery`` went."""
        await unit_of_work(_settle)(delivery.key, status, next_attempt_at, response_status, error)

    def __repr__(self) -> str:
        return "DefaultWebhookQueue()"
