from __future__ import annotations

from django.apps import AppConfig


class StoreConfig(AppConfig):
    name = "django_pydantic_agent.contrib.store"
    label = "django_pydantic_agent_store"
    verbose_name = "Agent store"
    default_auto_field = "django.db.models.BigAutoField"
