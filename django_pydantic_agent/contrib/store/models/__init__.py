"""The app's models: conversations and attachments, and the harness step and memory tables."""

from __future__ import annotations

from django_pydantic_agent.contrib.store.models.conversations import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.harness import *  # noqa: F403
