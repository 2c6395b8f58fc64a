"""Retention: which conversations a policy lets go, and deleting them.

A ``RetentionPolicy`` (``persistence.features``) deletes threads idle longer than
``idle_days`` and/or all but the newest ``keep_newest`` of each owner (newest by last
activity). Give it to the store, ``DefaultConversationStore(retention=RetentionPolicy(...))``,
whose ``features`` report it; ``manage.py agent_store_prune_conversations`` applies the
policies of the stores the URLconf mounts (or the one its options describe), and the
conversation admin shows which threads are due.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import F, Window
from django.db.models.functions import RowNumber

from django_pydantic_agent.contrib.store.deletion import ConversationDeletion, delete_conversations
from django_pydantic_agent.persistence.features import RetentionPolicy, store_features

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from django_pydantic_agent.contrib.store.models import StoredConversation

__all__ = ["RetentionPolicy", "apply_retention", "due_ids", "mounted_policies"]

_CHUNK = 1000


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
        policy = store_features(store).retention
        if policy is not None and policy not in found:
            found.append(policy)
    return found
