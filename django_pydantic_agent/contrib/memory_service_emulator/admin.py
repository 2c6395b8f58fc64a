"""Read-only admin pages for inspecting what clients stored in the emulator."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from django_pydantic_agent.contrib.memory_service_emulator.models import (
    EmulatedEvent,
    EmulatedMemorySpace,
    EmulatedSession,
    json_text,
)


class _ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Rows change only through the REST API, so the admin never writes."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(EmulatedMemorySpace)
class EmulatedMemorySpaceAdmin(_ReadOnlyAdmin):
    list_display = (
        "uuid",
        "user_id",
        "deduplication_key",
        "description",
        "created_at",
        "deleted_at",
    )
    list_filter = ("deleted_at",)
    search_fields = ("=uuid", "=user_id", "deduplication_key", "description")


@admin.register(EmulatedSession)
class EmulatedSessionAdmin(_ReadOnlyAdmin):
    list_display = ("uuid", "space", "participant", "description", "version", "deleted_at")
    list_filter = ("deleted_at",)
    search_fields = ("=uuid", "=participant", "deduplication_key", "description")
    list_select_related = ("space",)
    # The JSON columns are shown as the JSON text stored, not as a Python repr.
    fields = (
        "uuid",
        "space",
        "participant",
        "description",
        "metadata_json",
        "deduplication_key",
        "lifecycle_strategies_json",
        "version",
        "last_sequence_id",
        "created_at",
        "deleted_at",
    )
    readonly_fields = ("uuid", "metadata_json", "lifecycle_strategies_json")

    @admin.display(description="metadata")
    def metadata_json(self, obj: EmulatedSession) -> str:
        return json_text(obj.metadata)

    @admin.display(description="lifecycle strategies")
    def lifecycle_strategies_json(self, obj: EmulatedSession) -> str:
        return json_text(obj.lifecycle_strategies)


@admin.register(EmulatedEvent)
class EmulatedEventAdmin(_ReadOnlyAdmin):
    list_display = ("sequence_id", "session", "event_type", "emitter_type", "created_at")
    list_filter = ("event_type", "emitter_type")
    search_fields = ("=session__uuid",)
    list_select_related = ("session",)
    fields = (
        "session",
        "sequence_id",
        "event_type",
        "body_json",
        "emitter_type",
        "emitter_id",
        "created_at",
        "deleted_at",
    )
    readonly_fields = ("body_json",)

    @admin.display(description="body")
    def body_json(self, obj: EmulatedEvent) -> str:
        return json_text(obj.body)
