"""URLs for ``python -m bench``: the Memory Service emulator at ``api/v2/memory/``."""

from __future__ import annotations

from django_pydantic_agent.contrib.memory_service_emulator.urls import memory_service_urls

urlpatterns = memory_service_urls("api/v2/memory/")
