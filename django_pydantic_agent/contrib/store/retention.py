"""Retention: which conversations a policy lets go, and deleting them.

A ``RetentionPolicy`` deletes threads idle longer than ``idle_days`` and/or all but the newest
``keep_newest`` of each owner (newest by last activity). Give it to the store,
``DefaultConversationStore(retention=RetentionPolicy(...))``; ``manage.py
agent_store_prune_conversations`` applies the policies of the stores the URLconf mounts (or
the one its options describe), and the conversation admin shows which threads are due.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from django_pydantic_agent.contrib.store.deletion import ConversationDeletion, delete_conversations

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from django_pydantic_agent.contrib.store.models import StoredConversation

__all__ = ["RetentionPolicy", "apply_retention", "due_ids", "mounted_policies"]

_CHUNK = 1000


def _count(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{name}={value!r} is not valid: pass a positive whole number, or None to leave "
            "that rule out."
        )
    return value


@dataclass(frozen=True, kw_only=True)
class RetentionPolicy:
    """Delete threads idle more than ``idle_days`` and/or beyond the newest ``keep_newest`` per
    owner. At least one is required; each must be a positive integer (``ValueError``)."""

    idle_days: int | None = None
    keep_newest: int | None = None

    def __post_init__(self) -> None:
        _count("idle_days", self.idle_days)
        _count("keep_newest", self.keep_newest)
        if self.idle_days is None and self.keep_newest is None:
            raise ValueError(
                "RetentionPolicy() keeps everything: pass idle_days (delete threads idle "
                "longer), keep_newest (keep only that many per owner), or both."
            )

    def describe(self) -> str:
        """The policy in words, for the command's output and the admin."""
        rules = []
        if self.idle_days is not None:
            rules.append(f"threads idle more than {self.idle_days} day(s)")
        if self.keep_newest is not None:
            rules.append(f"all but each owner's newest {self.keep_newest}")
        return " and ".join(rules)

    def cutoff(self, now: datetime | None = None) -> datetime | None:
        """The last activity before which a thread is idle too long (``None``: no such rule)."""
        if self.idle_days is None:
            return None
        return (now or timezone.now()) - timedelta(days=self.idle_days)


def due_ids(
    policies: Iterable[RetentionPolicy],
    *,
    idle_before: datetime | None = None,
    keep_newest: int | None = None,
    now: datetime | None = None,
) -> list[int]:
    """The primary keys of the conversations any of ``policies`` (or the two rules given
    directly) would delete, ascending. ``keep_newest`` ranks each owner's threads by last
    activity in one window query."""
    from django_pydantic_agent.contrib.store.models import StoredConversation

    cutoffs = [idle_before] if idle_before is not None else []
    keeps = [keep_newest] if keep_newest is not None else []
    for policy in policies:
        cutoff = policy.cutoff(now)
        if cutoff is not None:
            cutoffs.append(cutoff)
        if policy.keep_newest is not None:
            keeps.append(policy.keep_newest)
    due: set[int] = set()
    rows = StoredConversation.objects.all()
    if cutoffs:  # the most generous policy wins: delete only what every policy lets go
        due.update(rows.filter(updated_at__lt=min(cutoffs)).values_list("pk", flat=True))
    if keeps:
        ranked = rows.annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("owner_id")],
                order_by=[F("updated_at").desc(), F("id").desc()],
            )
        )
        due.update(ranked.filter(rank__gt=max(keeps)).values_list("pk", flat=True))
    return sorted(due)


def apply_retention(
    ids: list[int], *, dry_run: bool = False, on_batch: Callable[[int], None] | None = None
) -> ConversationDeletion:
    """Delete the conversations ``ids`` (``delete_conversations``: messages, orphaned
    attachments, harness rows), a thousand at a time."""
    from django_pydantic_agent.contrib.store.models import StoredConversation

    total = ConversationDeletion()
    for start in range(0, len(ids), _CHUNK):
        rows: QuerySet[StoredConversation] = StoredConversation.objects.filter(
            pk__in=ids[start : start + _CHUNK]
        )
        total += delete_conversations(rows, dry_run=dry_run, on_batch=on_batch)
    return total


def mounted_policies() -> list[RetentionPolicy]:
    """The ``retention`` policies of the conversation stores the URLconf mounts (through any
    wrapper), once each: what the command applies without options and the admin shows."""
    from django_pydantic_agent.checks import mounted_stores

    found: list[RetentionPolicy] = []
    for store in mounted_stores():
        policy = getattr(store, "retention", None)  # DefaultConversationStore's
        if isinstance(policy, RetentionPolicy) and policy not in found:
            found.append(policy)
    return found
