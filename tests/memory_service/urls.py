"""The emulator mounted as the wire spec asks: the bare mount path answers 404, not a redirect."""

from __future__ import annotations

from django_pydantic_agent.contrib.memory_service_emulator.urls import memory_service_urls

urlpatterns = memory_service_urls("api/v2/memory/")
