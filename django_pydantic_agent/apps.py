"""The base app config: no models, no migrations; it registers the system checks."""

from __future__ import annotations

from django.apps import AppConfig
from django.core import checks


class DjangoPydanticAgentConfig(AppConfig):
    """The base app: no models, no migrations; it registers the system checks."""

    name = "django_pydantic_agent"
    verbose_name = "Pydantic-AI agent"

    def ready(self) -> None:
        from django_pydantic_agent.checks import (
            check_attachment_storage,
            check_mounted_stores,
            check_run_cache,
        )

        checks.register(check_mounted_stores, checks.Tags.urls)
        checks.register(check_attachment_storage, checks.Tags.files)
        checks.register(check_run_cache, checks.Tags.caches)
