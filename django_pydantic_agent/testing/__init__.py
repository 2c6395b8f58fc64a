"""Public test helpers: the contract suites, for this package's backends and yours.

``ConversationStoreContract`` / ``AttachmentStoreContract`` hold a store to its protocol;
``ChatHistoryContract`` runs the chat-history scenarios against a pair of repositories, with
``ScriptedAgent`` (and the event builders of ``testing.agui_script``) as the inner agent.

Importing this package needs pytest (and the suites need pytest-django and pytest-asyncio);
it is never imported by the rest of ``django_pydantic_agent``.
"""

from __future__ import annotations

import pytest

# The suites' assertions are their report: let pytest explain them as in a test module.
pytest.register_assert_rewrite(
    "django_pydantic_agent.testing.agui_script",
    "django_pydantic_agent.testing.chat_history",
    "django_pydantic_agent.testing.contracts",
)

from django_pydantic_agent.testing.actors import StoreActors  # noqa: E402
from django_pydantic_agent.testing.agui_script import ScriptedAgent  # noqa: E402
from django_pydantic_agent.testing.chat_history import ChatHistoryContract  # noqa: E402
from django_pydantic_agent.testing.contracts import (  # noqa: E402
    AttachmentStoreContract,
    ConversationStoreContract,
    ScopedConversationStoreContract,
    sample_messages,
)

__all__ = [
    "AttachmentStoreContract",
    "ChatHistoryContract",
    "ConversationStoreContract",
    "ScopedConversationStoreContract",
    "ScriptedAgent",
    "StoreActors",
    "sample_messages",
]
