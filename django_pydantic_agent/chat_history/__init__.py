"""AG-UI chat history: typed records, repositories, and the storage agent (no Django).

Everything is importable from this package. The Memory Service repositories and the stream
manager load on first use (PEP 562), so importing the package stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from django_pydantic_agent.chat_history.errors import (
    ChatHistoryError,
    ChatNotFoundError,
    ErrorCodes,
    InvalidInputError,
    PersistenceBacklogError,
    RunFencedError,
    StaleDeltaError,
)
from django_pydantic_agent.chat_history.keys import (
    DEDUPLICATION_KEY_LENGTH,
    chat_deduplication_key,
    locator_key,
    normalize_participant_id,
    participant_id,
    session_deduplication_key,
)
from django_pydantic_agent.chat_history.records import (
    PLACEHOLDER,
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageReasoningCreate,
    MessageReasoningUpdate,
    MessageStatus,
    MessageToolCallCreate,
    MessageToolCallUpdate,
    MessageUpdate,
    Reasoning,
    Role,
    ToolCall,
    decode_placeholder,
    encode_placeholder,
)
from django_pydantic_agent.chat_history.repositories import (
    ChatRepositoryLike,
    InMemoryChatRepository,
    InMemoryMessageRepository,
    MessageRepositoryLike,
    StartsBranches,
)
from django_pydantic_agent.chat_history.storage_agent import (
    AGUIAgent,
    AGUIStorageAgent,
    StorageState,
)
from django_pydantic_agent.chat_history.summaries import (
    ReplaysSummaries,
    StoredSummary,
    SummaryStore,
)
from django_pydantic_agent.chat_history.translate import translate_messages
from django_pydantic_agent.chat_history.window import HistoryWindow, RecentMessageReads

if TYPE_CHECKING:
    from django_pydantic_agent.chat_history.manager import (
        RunHandle,
        RunLogTruncatedError,
        RunObserver,
        SequencedEvent,
        StreamPersistenceManager,
    )
    from django_pydantic_agent.chat_history.memory_service import (
        ChatRepository,
        ChatSessionRegistry,
        LocatorIndex,
        MessageRepository,
        RetryPolicy,
    )

_LAZY = {
    "ChatRepository": "memory_service",
    "ChatSessionRegistry": "memory_service",
    "LocatorIndex": "memory_service",
    "MessageRepository": "memory_service",
    "RetryPolicy": "memory_service",
    "RunHandle": "manager",
    "RunLogTruncatedError": "manager",
    "RunObserver": "manager",
    "SequencedEvent": "manager",
    "StreamPersistenceManager": "manager",
}

__all__ = [
    "DEDUPLICATION_KEY_LENGTH",
    "PLACEHOLDER",
    "AGUIAgent",
    "AGUIStorageAgent",
    "Chat",
    "ChatCreate",
    "ChatHistoryError",
    "ChatNotFoundError",
    "ChatRepository",
    "ChatRepositoryLike",
    "ChatSessionRegistry",
    "ErrorCodes",
    "HistoryWindow",
    "InMemoryChatRepository",
    "InMemoryMessageRepository",
    "InvalidInputError",
    "LocatorIndex",
    "Message",
    "MessageCreate",
    "MessageReasoningCreate",
    "MessageReasoningUpdate",
    "MessageRepository",
    "MessageRepositoryLike",
    "MessageStatus",
    "MessageToolCallCreate",
    "MessageToolCallUpdate",
    "MessageUpdate",
    "PersistenceBacklogError",
    "Reasoning",
    "RecentMessageReads",
    "ReplaysSummaries",
    "RetryPolicy",
    "Role",
    "RunFencedError",
    "RunHandle",
    "RunLogTruncatedError",
    "RunObserver",
    "SequencedEvent",
    "StaleDeltaError",
    "StartsBranches",
    "StorageState",
    "StoredSummary",
    "StreamPersistenceManager",
    "SummaryStore",
    "ToolCall",
    "chat_deduplication_key",
    "decode_placeholder",
    "encode_placeholder",
    "locator_key",
    "normalize_participant_id",
    "participant_id",
    "session_deduplication_key",
    "translate_messages",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
