"""App configuration for the example chat app."""

from __future__ import annotations

from django.apps import AppConfig


class ChatConfig(AppConfig):
    """The chat page, the demo agent and the ``ensure_demo_user`` command."""

    name = "chat"
    verbose_name = "Example chat"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the example project's system checks."""
        from chat import checks  # noqa: F401  (registers the checks)
