"""Message feedback in the admin: filter the answers rated down, open their thread and run."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from django_pydantic_agent.contrib.store.admin.common import ReadOnlyMixin
from django_pydantic_agent.contrib.store.models import StoredFeedback, StoredRunUsage

__all__ = ["StoredFeedbackAdmin"]


@admin.register(StoredFeedback)
class StoredFeedbackAdmin(ReadOnlyMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Ratings users gave answers: filter by rating (``?rating__exact=down``), search a
    comment, a message or thread id; each row links its thread and its run's usage."""

    list_display = ("message_id", "rating", "comment", "thread", "run", "updated_at")
    list_filter = ("rating", "updated_at")
    list_select_related = ("conversation",)
    search_fields = ("comment", "=message_id", "=conversation__thread_id", "=run_id")
    search_help_text = "Words of a comment, or an exact message, thread or run id."
    date_hierarchy = "updated_at"
    ordering = ("-updated_at", "-pk")
    show_full_result_count = False

    @admin.display(description="thread", ordering="conversation__thread_id")
    def thread(self, obj: StoredFeedback) -> SafeString:
        conversation = obj.conversation
        label = conversation._meta.app_label
        url = reverse(f"admin:{label}_storedconversation_change", args=[conversation.pk])
        return format_html("<a href='{}'>{}</a>", url, conversation.title or conversation.thread_id)

    @admin.display(description="run", ordering="run_id")
    def run(self, obj: StoredFeedback) -> SafeString | str:
        """The run that wrote the message, linked to its rows of the usage ledger."""
        if not obj.run_id:
            return "—"
        label = StoredRunUsage._meta.app_label
        url = reverse(f"admin:{label}_storedrunusage_changelist")
        return format_html("<a href='{}?{}'>{}</a>", url, urlencode({"q": obj.run_id}), obj.run_id)

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        """Staff may delete feedback (a user's comment they must not keep)."""
        return bool(super().has_delete_permission(request, obj))
