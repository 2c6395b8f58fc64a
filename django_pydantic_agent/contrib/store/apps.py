from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate


def _repair_search_index(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    from django_pydantic_agent.contrib.store.search import repair_sqlite_index

    repair_sqlite_index(using)


class StoreConfig(AppConfig):
    name = "django_pydantic_agent.contrib.store"
    label = "django_pydantic_agent_store"
    verbose_name = "Agent store"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_pydantic_agent.contrib.store.checks import check_sqlite_options

        post_migrate.connect(_repair_search_index, sender=self)
        # Untagged: Django 6 runs "database"-tagged checks only when given an alias.
        checks.register(check_sqlite_options)
