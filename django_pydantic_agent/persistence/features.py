"""What a store can do: ``StoreFeatures``, declared once and read with ``store_features``.

Each optional capability is a protocol of its own module, called through its helper; here each
is one field of a frozen value: a store's declared ``features``, else what it implements.
Readers (the chat page, the checks, retention, the contract suite) ask it, never whether a
method was overridden.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from django.utils import timezone

from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.persistence.base import (
    ProvidesRepositories,
    ProvidesRunStore,
    ResolvesAttachmentRefs,
    is_persistent,
)
from django_pydantic_agent.persistence.branching import ForksThreads, KeepsBranches
from django_pydantic_agent.persistence.feedback import RatesMessages
from django_pydantic_agent.persistence.listing import ArchivesThreads, SearchesThreads
from django_pydantic_agent.persistence.runs import KeepsRunsInCache, ResumableRunStore
from django_pydantic_agent.persistence.transfer import ExportsThreads
from django_pydantic_agent.persistence.usage import UsageLedger

__all__ = ["DeclaresFeatures", "RetentionPolicy", "StoreFeatures", "store_features"]


@dataclass(frozen=True, kw_only=True)
class RetentionPolicy:
    """Delete threads idle more than ``idle_days`` and/or beyond the newest ``keep_newest`` per
    owner. At least one is required; each must be a positive integer (``ValueError``)."""

    idle_days: int | None = None
    keep_newest: int | None = None

    def __post_init__(self) -> None:
        for name, value in (("idle_days", self.idle_days), ("keep_newest", self.keep_newest)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(
                    f"{name}={value!r} is not valid: pass a positive whole number, or None to "
                    "leave that rule out."
                )
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


#: Each boolean feature and the protocol a store implements to have it.
_PROTOCOLS: dict[str, Any] = {
    "repositories": ProvidesRepositories,
    "runs": ProvidesRunStore,
    "branches": KeepsBranches,
    "forks": ForksThreads,
    "search": SearchesThreads,
    "archive": ArchivesThreads,
    "export": ExportsThreads,
    "feedback": RatesMessages,
    "refs": ResolvesAttachmentRefs,
    "resume": ResumableRunStore,
    "usage": UsageLedger,
}


@dataclass(frozen=True, kw_only=True)
class StoreFeatures:
    """What a store can do beyond its contract (the defaults: none of it).

    Conversation stores: ``persistent`` (``False``: a Null store), ``repositories`` (persists
    runs incrementally), ``runs`` (its own run store), ``branches`` (keeps every branch),
    ``forks`` (copies a branch itself), ``search`` (message text, not only titles),
    ``archive``, ``export`` (whole trees), ``feedback`` (ratings of messages), ``retention``
    (the ``RetentionPolicy`` the prune command applies). Attachment stores: ``refs`` (many at
    once). Run stores: ``resume``, ``usage`` (the ledger of what runs spent), ``cache_alias``
    (the cache of its records).
    """

    persistent: bool = True
    repositories: bool = False
    runs: bool = False
    branches: bool = False
    forks: bool = False
    search: bool = False
    archive: bool = False
    export: bool = False
    feedback: bool = False
    retention: RetentionPolicy | None = None
    refs: bool = False
    resume: bool = False
    usage: bool = False
    cache_alias: str | None = None

    @classmethod
    def of(cls, store: object, **declared: Any) -> StoreFeatures:
        """The features ``store`` implements (one protocol per feature, read with
        ``implements``), with ``declared`` values in place of what cannot be seen."""
        found: dict[str, Any] = {name: implements(store, p) for name, p in _PROTOCOLS.items()}
        found["persistent"] = is_persistent(store)
        found["cache_alias"] = store.alias if implements(store, KeepsRunsInCache) else None
        return cls(**{**found, **declared})


@runtime_checkable
class DeclaresFeatures(Protocol):
    """Optional: a store that says what it can do itself (``ModelConversationStore``,
    ``ScopedConversationStore``), rather than have it read from what it implements."""

    @property
    def features(self) -> StoreFeatures:
        """What the store can do."""
        ...


def store_features(store: object) -> StoreFeatures:
    """What ``store`` can do: its declared ``features`` (``DeclaresFeatures``), else
    ``StoreFeatures.of(store)``. A proxy forwarding ``features`` reports the wrapped store's."""
    if implements(store, DeclaresFeatures) and isinstance(store.features, StoreFeatures):
        return store.features
    return StoreFeatures.of(store)
