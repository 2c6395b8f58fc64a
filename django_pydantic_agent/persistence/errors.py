"""The exceptions a store raises on purpose: one tree for the whole persistence boundary.

::

    StoreError                      a store refused on purpose; nothing was written
    ├── StoreLimitError             a configured limit would be exceeded          -> 413
    ├── StoreDataError              the database refused the caller's data        -> 409
    ├── UnstorableMessageError      a message no database can hold (also ValueError) -> 409
    ├── AnonymousOperationError     an anonymous request the store may not serve  -> 403
    └── PersistenceDisabledError    a Null store asked to keep something (also
                                    NotImplementedError)                          -> 410

The statuses are what ``django_pydantic_agent.agui`` answers before a stream starts; once it
has started, any ``StoreError`` arrives as a ``RUN_ERROR`` event. Anything else a store raises
is a bug or an outage, and is answered as one. Each class is also importable from the module
that raised it first (``persistence.base``, ``persistence.owner``, ``persistence.null``,
``contrib.store.stores``), so older imports keep working.
"""

from __future__ import annotations

__all__ = [
    "AnonymousOperationError",
    "PersistenceDisabledError",
    "StoreDataError",
    "StoreError",
    "StoreLimitError",
    "UnstorableMessageError",
]


class StoreError(Exception):
    """Base class of the errors a store raises on purpose (policy refusals, limits)."""


class StoreLimitError(StoreError):
    """A store refused a write because it would exceed one of the store's configured limits.

    Nothing was written. A transport maps this to ``413 Payload Too Large`` (or, mid-stream, to
    a ``RUN_ERROR`` event).
    """


class StoreDataError(StoreError):
    """The database refused the caller's data: nothing was written.

    Raised by the model-backed bases when a hook fails with ``django.db.DataError``, such as
    PostgreSQL refusing a NUL character in text or a value too long for its column. The data
    came from the caller, so a transport answers ``409`` (or, mid-stream, a ``RUN_ERROR``
    event) rather than a server error. The database's own error is chained as ``__cause__``.
    """


class UnstorableMessageError(StoreError, ValueError):
    """A message the database cannot hold as posted; raised before anything is written.

    ``index`` is the message's position in the conversation. Transports map it, like any
    ``StoreError``, to a refusal (409) rather than a server error.
    """

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message)
        self.index = index


class AnonymousOperationError(StoreError):
    """A store was asked to act for an anonymous request it may not serve.

    Raised by model-backed stores built with ``allow_anonymous=False`` (the default), and by
    any store for an anonymous request that has no valid session yet. Transports map it to a
    ``403`` with a JSON error body; nothing was read or written.
    """


class PersistenceDisabledError(StoreError, NotImplementedError):
    """A Null store was asked to keep something it never keeps.

    Raised by ``NullAttachmentStore.save`` rather than returning a ref to bytes that were not
    stored. A transport checks ``is_persistent(store)`` first and answers ``410 Gone``.
    """
