"""The chat-history exception tree and the ``RunErrorEvent`` codes it maps to.

::

    ChatHistoryError
    ├── InvalidInputError        an inbound message list the server refuses (INVALID_INPUT)
    └── PersistenceBacklogError  the persistence queue overflowed; records may be incomplete

    StaleDeltaError (a ValueError)  an append whose offset is past the stored value's end

Repositories raise plain ``ValueError`` for a create whose chat or parent does not exist (the
reference's contract) and return ``None`` for anything unknown; backend errors propagate.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ChatHistoryError",
    "ErrorCodes",
    "InvalidInputError",
    "PersistenceBacklogError",
    "StaleDeltaError",
]


class ErrorCodes(StrEnum):
    """Values of ``RunErrorEvent.code`` produced by the chat-history layer."""

    INVALID_INPUT = "INVALID_INPUT"
    INTERNAL_ERROR = "INTERNAL_ERROR"


class ChatHistoryError(Exception):
    """Base class of the errors raised by the chat-history layer."""


class InvalidInputError(ChatHistoryError):
    """An inbound ``RunAgentInput`` that the server-authoritative history refuses.

    Attributes:
        message_id: The id of the offending message (or interrupt), when there is one.
        role: Its role, when there is one.
    """

    code = ErrorCodes.INVALID_INPUT

    def __init__(self, text: str, *, message_id: str | None = None, role: str | None = None):
        super().__init__(text)
        self.message_id = message_id
        self.role = role


class PersistenceBacklogError(ChatHistoryError):
    """The persistence queue overflowed, so some events of the run were not stored."""


class StaleDeltaError(ValueError):
    """An append (``*_delta`` at ``*_offset``) past the end of the value the store holds.

    The writer's view of the record is ahead of the store's (an earlier write was lost, or
    another reader refreshed a cached copy): re-read the record and resend the full value. The
    storage agent does exactly that on its next flush.
    """
