"""Public test helpers: the store contract suites, for this package's stores and yours.

Importing this package needs pytest (and the suites need pytest-django and pytest-asyncio);
it is never imported by the rest of ``django_pydantic_agent``.
"""

from __future__ import annotations

from django_pydantic_agent.testing.actors import StoreActors
from django_pydantic_agent.testing.contracts import (
    AttachmentStoreContract,
    ConversationStoreContract,
    ScopedConversationStoreContract,
    sample_messages,
)

__all__ = [
    "AttachmentStoreContract",
    "ConversationStoreContract",
    "ScopedConversationStoreContract",
    "StoreActors",
    "sample_messages",
]
