from __future__ import annotations

from django.apps import AppConfig


class MemoryServiceEmulatorConfig(AppConfig):
    name = "django_pydantic_agent.contrib.memory_service_emulator"
    label = "django_pydantic_agent_memory_emulator"
    verbose_name = "Memory Service emulator"
    default_auto_field = "django.db.models.BigAutoField"
