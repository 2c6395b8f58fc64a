"""The conversation list's "retention" filter: which threads the mounted policy will delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin

from django_pydantic_agent.contrib.store.retention import due_ids, mounted_policies

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from django.http import HttpRequest

__all__ = ["RetentionFilter"]


class RetentionFilter(admin.SimpleListFilter):
    """ "Due for deletion" (what ``agent_store_prune_conversations`` would delete now under
    the mounted stores' ``RetentionPolicy``) or "kept"; hidden when no policy is mounted."""

    title = "retention"
    parameter_name = "retention"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        policies = mounted_policies()
        if not policies:
            return []
        described = "; ".join(policy.describe() for policy in policies)
        return [("due", f"Due for deletion ({described})"), ("kept", "Kept")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in ("due", "kept"):
            return queryset
        due = due_ids(mounted_policies())
        if self.value() == "due":
            return queryset.filter(pk__in=due)
        return queryset.exclude(pk__in=due)
