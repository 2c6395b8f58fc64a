"""The app's models: conversations and attachments, the harness step and memory tables, the
spend counters and usage ledger, share links and the webhook delivery log."""

from __future__ import annotations

from django_pydantic_agent.contrib.store.models.conversations import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.feedback import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.harness import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.shares import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.summaries import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.tags import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.usage import *  # noqa: F403
from django_pydantic_agent.contrib.store.models.webhooks import *  # noqa: F403
