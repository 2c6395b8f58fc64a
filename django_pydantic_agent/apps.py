from __future__ import annotations

from django.apps import AppConfig


class DjangoPydanticAgentConfig(AppConfig):
    """The base app: no models, no migrations; it registers the system checks."""

    name = "django_pydantic_agent"
    verbose_name = "Pydantic-AI agent"
