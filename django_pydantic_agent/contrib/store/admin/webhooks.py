"""The webhook delivery log in the admin: each event and URL, how its attempts went, and an
action that sends chosen ones again."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.utils import timezone

from django_pydantic_agent.contrib.store.admin.common import ReadOnlyMixin
from django_pydantic_agent.contrib.store.models import StoredWebhookDelivery
from django_pydantic_agent.webhooks.targets import shown_url

__all__ = ["StoredWebhookDeliveryAdmin"]


@admin.register(StoredWebhookDelivery)
class StoredWebhookDeliveryAdmin(ReadOnlyMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Deliveries, newest first: filter by status or event type, search an event, thread or
    run id. The URL shows without its query (a receiver's token may sit there); the payload
    names ids, never what was said."""

    list_display = (
        "event_type",
        "event_id",
        "target",
        "status",
        "attempts",
        "response_status",
        "next_attempt_at",
        "delivered_at",
    )
    list_filter = ("status", "event_type")
    search_fields = ("=event_id", "=thread_id", "=run_id", "=owner_id")
    search_help_text = "An exact event, thread, run or owner id."
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-pk")
    exclude = ("url",)
    actions = ("send_again",)
    show_full_result_count = False

    @admin.display(description="URL")
    def target(self, obj: StoredWebhookDelivery) -> str:
        return shown_url(obj.url)

    @admin.action(description="Send the selected deliveries again")
    def send_again(self, request: Any, queryset: QuerySet[StoredWebhookDelivery]) -> None:
        """Make the chosen rows due now with a fresh count of attempts (same ``webhook-id``)."""
        count = queryset.update(
            status=StoredWebhookDelivery.Status.PENDING,
            attempts=0,
            next_attempt_at=timezone.now(),
        )
        self.message_user(request, f"{count} deliveries will be sent again.")

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return bool(super().has_delete_permission(request, obj))
