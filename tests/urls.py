"""URLs for the test suite. Feature tests mount their own servers with ``override_settings``."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from django_pydantic_agent.contrib.memory_service_emulator.urls import memory_service_urls

urlpatterns = [
    path("admin/", admin.site.urls),
    # The bare mount path answers 404 (the wire spec), not an APPEND_SLASH redirect.
    *memory_service_urls("api/v2/memory/"),
]
