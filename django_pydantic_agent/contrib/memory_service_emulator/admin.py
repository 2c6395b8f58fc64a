"""Read-only admin pages for inspecting what clients stored in the emulator."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from django_pydantic_agent.contrib.memory_service_emulator.models import (
    EmulatedEvent,
    EmulatedMemorySpace,
    EmulatedSession,
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


@admin.register(EmulatedEvent)
class EmulatedEventAdmin(_ReadOnlyAdmin):
    list_display = ("sequence_id", "session", "event_type", "emitter_type", "created_at")
    list_filter = ("event_type", "emitter_type")
    search_fields = ("=session__uuid",)
    list_select_related = ("session",)
