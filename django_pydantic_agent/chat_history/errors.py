"""The chat-history exception tree and the ``RunErrorEvent`` codes it maps to.

::

    ChatHistoryError
    ├── InvalidInputError        an inbound message list the server refuses (INVALID_INPUT)
    ├── PersistenceBacklogError  the persistence queue overflowed; records may be incomplete
    └── RunFencedError           a write of a run another worker took over: refused, the run stops

    ChatNotFoundError (also a ValueError)  a write to a chat that does not exist (deleted)
    StaleDeltaError (a ValueError)  an append whose offset is past the stored value's end

Repositories raise ``ChatNotFoundError`` for a write whose chat does not exist (never created,
or deleted, also while a run writes to it), plain ``ValueError`` for a create whose parent
message does not exist (the reference's contract), and return ``None`` for anything unknown;
backend errors propagate.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from uuid import UUID

__all__ = [
    "ChatHistoryError",
    "ChatNotFoundError",
    "ErrorCodes",
    "InvalidInputError",
    "PersistenceBacklogError",
    "RunFencedError",
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


class ChatNotFoundError(ChatHistoryError, ValueError):
    """A write names a chat that does not exist: never created, or deleted (also while a run
    was writing to it). Retrying cannot succeed. A ``ValueError``, as the reference raised.

    Attributes:
        chat_uuid: The chat the write named.
    """

    def __init__(self, chat_uuid: UUID, text: str | None = None) -> None:
        super().__init__(text or f"Chat {chat_uuid} does not exist; create it before its messages.")
        self.chat_uuid = chat_uuid


class PersistenceBacklogError(ChatHistoryError):
    """The persistence queue overflowed, so some events of the run were not stored."""


class RunFencedError(ChatHistoryError):
    """A write of a run whose execution is no longer current: another worker took the run over
    (this one stalled past the run's lease) and runs its next execution. The store refused the
    write; the run stops on this worker without writing anything more.

    Attributes:
        run_id: The run.
        epoch: The execution this worker ran (the run record's ``resumes`` when it started).
    """

    def __init__(self, run_id: str, epoch: int) -> None:
        super().__init__(
            f"Run {run_id!r} was taken over by another worker: its execution {epoch} is no "
            "longer current, so this worker stops it without writing."
        )
        self.run_id = run_id
        self.epoch = epoch


class StaleDeltaError(ValueError):
    """An append (``*_delta`` at ``*_offset``) past the end of the value the store holds.

    The writer's view of the record is ahead of the store's (an earlier write was lost, or
    another reader refreshed a cached copy): re-read the record and resend the full value. The
    storage agent does exactly that on its next flush.
    """
