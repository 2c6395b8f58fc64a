"""URLs for the test suite. Feature tests mount their own servers with ``override_settings``."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v2/memory/", include("django_pydantic_agent.contrib.memory_service_emulator.urls")),
]
