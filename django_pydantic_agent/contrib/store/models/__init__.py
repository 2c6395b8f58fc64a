"""The app's models: conversations and attachments, the harness step and memory tables, and
the spend counters and usage ledger."""

from __future__ import annotations

from django_pydantic_agent.contrib.store.models.conversations import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.feedback import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.harness import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.summaries import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.usage import *  # noqa: F403
