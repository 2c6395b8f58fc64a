"""Admin for stored conversations and attachments (and, with the harness extra, memory).

Conversations show their messages read-only; the title stays editable (it is what a rename
changes). Attachments are read-only metadata with their deduplication siblings. Deleting from
the admin goes through the same lifecycle helpers as the stores, so blobs and orphaned
attachments are cleaned up exactly as a store delete would.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from django_pydantic_agent.contrib.store.lifecycle import delete_attachments, delete_conversations
from django_pydantic_agent.contrib.store.models import (
    StoredAttachment,
    StoredConversation,
    StoredConversationAttachment,
    StoredMessage,
)

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from django.http import HttpRequest
    from django.utils.safestring import SafeString

__all__ = ["StoredAttachmentAdmin", "StoredConversationAdmin"]

_SIBLINGS_SHOWN = 20
_JSON_SHOWN = 4000


class _ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StoredMessageInline(_ReadOnlyInline):
    model = StoredMessage
    fields = ("position", "role", "message_id", "wire_json")
    readonly_fields = fields
    ordering = ("position",)

    @admin.display(description="wire JSON")
    def wire_json(self, obj: StoredMessage) -> SafeString:
        """The message's JSON, cut at 4,000 characters (inline file bytes can be megabytes)."""
        text = json.dumps(obj.data, indent=2, ensure_ascii=False)
        if len(text) > _JSON_SHOWN:
            text = f"{text[:_JSON_SHOWN]}\u2026 ({len(text):,} characters in all)"
        return format_html("<pre style='white-space: pre-wrap; margin: 0'>{}</pre>", text)


class StoredConversationAttachmentInline(_ReadOnlyInline):
    model = StoredConversationAttachment
    fields = ("attachment", "created_at")
    readonly_fields = fields
    verbose_name_plural = "quoted attachments"


@admin.register(StoredConversation)
class StoredConversationAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Threads with their messages (read-only), searchable by title, owner id and thread id."""

    list_display = ("__str__", "owner_id", "thread_id", "updated_at", "created_at")
    search_fields = ("title", "=owner_id", "=thread_id")
    date_hierarchy = "updated_at"
    ordering = ("-updated_at",)
    fields = ("title", "owner_id", "thread_id", "preview", "created_at", "updated_at")
    readonly_fields = ("owner_id", "thread_id", "preview", "created_at", "updated_at")
    inlines = (StoredMessageInline, StoredConversationAttachmentInline)
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: StoredConversation) -> None:
        delete_conversations(StoredConversation.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[StoredConversation]) -> None:
        delete_conversations(queryset)


@admin.register(StoredAttachment)
class StoredAttachmentAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Attachment metadata, the conversations quoting it and its deduplication siblings."""

    list_display = ("__str__", "owner_id", "mime", "size", "short_sha256", "created_at")
    search_fields = ("name", "=owner_id", "=sha256")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    fields = (
        "attachment_id",
        "name",
        "owner_id",
        "mime",
        "size",
        "sha256",
        "file",
        "created_at",
        "quoted_by",
        "dedup_siblings",
    )
    readonly_fields = fields
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="SHA-256")
    def short_sha256(self, obj: StoredAttachment) -> str:
        return obj.sha256[:12]

    @admin.display(description="quoted by")
    def quoted_by(self, obj: StoredAttachment) -> SafeString | str:
        rows = obj.conversations.order_by("-updated_at")[:_SIBLINGS_SHOWN]
        return self._links(rows, "storedconversation") or "no conversation (an orphan)"

    @admin.display(description="deduplication siblings")
    def dedup_siblings(self, obj: StoredAttachment) -> SafeString | str:
        """Other uploads of the same owner with the same content hash (they may share a blob)."""
        if not obj.sha256:
            return "not hashed yet (run agent_store_backfill_hashes)"
        rows = (
            StoredAttachment.objects.filter(owner_id=obj.owner_id, sha256=obj.sha256)
            .exclude(pk=obj.pk)
            .order_by("-created_at")[:_SIBLINGS_SHOWN]
        )
        return self._links(rows, "storedattachment") or "none"

    @staticmethod
    def _links(rows: Any, model_name: str) -> SafeString | str:
        label = StoredAttachment._meta.app_label
        return format_html_join(
            ", ",
            "<a href='{}'>{}</a>",
            (
                (reverse(f"admin:{label}_{model_name}_change", args=[row.pk]), str(row))
                for row in rows
            ),
        )

    def delete_model(self, request: HttpRequest, obj: StoredAttachment) -> None:
        delete_attachments(StoredAttachment.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[StoredAttachment]) -> None:
        delete_attachments(queryset)


# Memory admin needs the optional pydantic-ai-harness extra.
if (
    importlib.util.find_spec("pydantic_ai_harness") is not None
    and importlib.util.find_spec("django_pydantic_agent.contrib.store.admin_memory") is not None
):
    importlib.import_module("django_pydantic_agent.contrib.store.admin_memory")
