"""The ready-to-use stores of ``django_pydantic_agent.contrib.store``, in one place to import.

``DefaultConversationStore`` (``conversation_store``) and ``DefaultAttachmentStore``
(``attachment_store``) keep conversations and files in this app's models;
``RetentionPolicy`` says which conversations ``agent_store_prune_conversations`` deletes;
``DefaultWebhookQueue`` keeps a mount's webhooks until they are delivered.
``DefaultStepStore``, ``DefaultMemoryStore`` and ``DefaultSpendStore`` (the pydantic-ai-harness
stores) are imported
on first use, because they need the optional ``harness`` extra.

No module behind these names imports models at import time, so a project can import them
from its URLconf before the app registry is ready, and system check
``django_pydantic_agent.E001`` can report a missing ``INSTALLED_APPS`` entry instead of an
import crash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_pydantic_agent.contrib.store.attachment_store import DefaultAttachmentStore
from django_pydantic_agent.contrib.store.conversation_store import (
    DEFAULT_LIST_LIMIT,
    DefaultConversationStore,
)
from django_pydantic_agent.contrib.store.retention import RetentionPolicy
from django_pydantic_agent.contrib.store.webhooks import DefaultWebhookQueue
from django_pydantic_agent.persistence import UnstorableMessageError

if TYPE_CHECKING:
    from django_pydantic_agent.contrib.store.memory_store import DefaultMemoryStore
    from django_pydantic_agent.contrib.store.spend_store import DefaultSpendStore
    from django_pydantic_agent.contrib.store.step_store import DefaultStepStore

__all__ = [
    "DEFAULT_LIST_LIMIT",
    "DefaultAttachmentStore",
    "DefaultConversationStore",
    "DefaultMemoryStore",
    "DefaultSpendStore",
    "DefaultStepStore",
    "DefaultWebhookQueue",
    "RetentionPolicy",
    "UnstorableMessageError",
]


def __getattr__(name: str) -> Any:
    # The harness stores need the optional pydantic-ai-harness extra: import on first use.
    if name == "DefaultStepStore":
        from django_pydantic_agent.contrib.store.step_store import DefaultStepStore

        return DefaultStepStore
    if name == "DefaultMemoryStore":
        from django_pydantic_agent.contrib.store.memory_store import DefaultMemoryStore

        return DefaultMemoryStore
    if name == "DefaultSpendStore":
        from django_pydantic_agent.contrib.store.spend_store import DefaultSpendStore

        return DefaultSpendStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
