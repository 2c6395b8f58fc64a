"""A local emulator of the Agentic Memory Service REST API (add to ``INSTALLED_APPS``)."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks


class MemoryServiceEmulatorConfig(AppConfig):
    """The emulator app; it registers its configuration checks."""

    name = "django_pydantic_agent.contrib.memory_service_emulator"
    label = "django_pydantic_agent_memory_emulator"
    verbose_name = "Memory Service emulator"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_pydantic_agent.contrib.memory_service_emulator.checks import check_settings

        checks.register(check_settings)
