"""A project URLconf mounting the emulator with the helper that also guards the bare prefix."""

from __future__ import annotations

from django_pydantic_agent.contrib.memory_service_emulator.urls import memory_service_urls

urlpatterns = memory_service_urls("api/v2/memory/")
