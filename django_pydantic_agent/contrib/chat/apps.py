"""App configuration of the chat page."""

from __future__ import annotations

from django.apps import AppConfig


class ChatConfig(AppConfig):
    """The chat page: a template, static ES modules and CSS, and the ``agent_chat`` tag."""

    name = "django_pydantic_agent.contrib.chat"
    label = "django_pydantic_agent_chat"
    verbose_name = "Agent chat page"
