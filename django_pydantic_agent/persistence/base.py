"""The two store contracts and the value types they exchange.

``ConversationStore`` is the thread drawer's view of history (whole-conversation load and save,
list, rename, delete); ``AttachmentStore`` keeps the files a user attaches. Both are
``runtime_checkable`` protocols: any object with the right async methods is a store, no base
class needed. Every method takes the acting ``HttpRequest`` as the keyword ``request=`` and
scopes what it does to that request's owner; a cross-owner id behaves exactly like a missing one.

The value types are frozen dataclasses that, unlike the package's other value objects, also
take positional arguments, in the predecessor package's field order: code written against it
ports unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    from datetime import datetime

    from django.core.files.uploadedfile import UploadedFile
    from django.http import HttpRequest

__all__ = [
    "AttachmentRef",
    "AttachmentStore",
    "Conversation",
    "ConversationMeta",
    "ConversationMetaList",
    "ConversationStore",
    "OpenedAttachment",
    "StoreDataError",
    "StoreError",
    "StoreLimitError",
    "check_limit",
    "is_persistent",
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


@dataclass(frozen=True)
class Conversation:
    """A persisted conversation, keyed by ``thread_id`` within one owner.

    ``messages`` are JSON-serialisable records whose shape the calling transport owns: a store
    persists and returns them verbatim and never interprets them (the AG-UI transport stores
    AG-UI wire messages, so client ids survive a round trip). ``owner_id`` is informational:
    stores re-resolve the owner from the request and ignore the value passed to ``save``.
    """

    thread_id: str
    messages: list[Any] = field(default_factory=list)
    owner_id: str | None = None


@dataclass(frozen=True)
class ConversationMeta:
    """One row of the thread drawer: metadata only, never message bodies.

    ``title`` is a recorded rename or else derived from the first user message; ``preview`` is a
    one-line excerpt of the latest message; ``updated_at`` is ``None`` when a store does not
    track it. ``owner_id`` is for server-side use and must never be put on the wire.
    """

    thread_id: str
    title: str
    updated_at: datetime | None = None
    preview: str = ""
    owner_id: str | None = None


# A method named ``list`` shadows the builtin inside a class body, hence the alias.
ConversationMetaList: TypeAlias = list[ConversationMeta]


@dataclass(frozen=True)
class AttachmentRef:
    """A durable, lightweight reference to one uploaded file: what travels on the wire.

    ``id`` is the opaque, owner-scoped handle a store resolves back to bytes. ``mime`` is
    declared by the client, so treat it as a hint. ``url`` is an optional direct fetch URL and
    stays ``None`` unless a store fills it in.
    """

    id: str
    name: str
    mime: str
    size: int
    url: str | None = None


@dataclass(frozen=True)
class OpenedAttachment:
    """An attachment's ref paired with an open binary stream of its bytes.

    The consumer owns ``content`` and must close it: hand it to ``FileResponse`` (which closes
    it) or read it inside a ``with`` block.
    """

    ref: AttachmentRef
    content: IO[bytes]


@runtime_checkable
class ConversationStore(Protocol):
    """Pluggable, owner-scoped, server-side persistence for conversations.

    Threads are keyed by ``(owner, thread_id)``; the owner comes from ``request``, never from
    the caller. ``load`` returns ``None`` for a missing *or* cross-owner id. ``save`` replaces
    the whole conversation (upsert). ``delete`` is a silent no-op when absent. ``list`` returns
    metadata only, most recently updated first, at most ``limit`` rows (``None``: the store's
    own default); a store that cannot enumerate returns ``[]``. ``exists`` is a presence check
    that loads no message body. ``rename`` records a display title and is a no-op for a missing
    thread or a store that cannot keep titles.

    A store may also expose ``persistent: bool``; ``False`` means "persistence off" (see
    ``is_persistent``).
    """

    async def load(self, thread_id: str, *, request: HttpRequest) -> Conversation | None:
        """Return the owner's conversation ``thread_id``, or ``None``."""
        ...

    async def save(self, conversation: Conversation, *, request: HttpRequest) -> None:
        """Insert or replace the owner's conversation ``conversation.thread_id``."""
        ...

    async def delete(self, thread_id: str, *, request: HttpRequest) -> None:
        """Delete the owner's conversation ``thread_id``; no-op when absent."""
        ...

    async def list(self, *, request: HttpRequest, limit: int | None = None) -> ConversationMetaList:
        """Return the owner's conversations as metadata, most recent first."""
        ...

    async def exists(self, thread_id: str, *, request: HttpRequest) -> bool:
        """Return whether the owner has a conversation ``thread_id``, loading no bodies."""
        ...

    async def rename(self, thread_id: str, title: str, *, request: HttpRequest) -> None:
        """Set the display title of the owner's conversation ``thread_id``."""
        ...


@runtime_checkable
class AttachmentStore(Protocol):
    """Pluggable, owner-scoped storage for files a user attaches to a conversation.

    ``save`` validates neither size nor type (the view does, from its own configuration); it
    persists the bytes and returns a durable ``AttachmentRef``. ``open`` returns ``None`` for a
    missing *or* cross-owner id, so both map to the same 404. ``delete`` is a silent no-op when
    absent or owned by someone else.
    """

    async def save(self, upload: UploadedFile[bytes], *, request: HttpRequest) -> AttachmentRef:
        """Persist ``upload`` for the request's owner and return its ref."""
        ...

    async def open(self, attachment_id: str, *, request: HttpRequest) -> OpenedAttachment | None:
        """Open the owner's attachment ``attachment_id``; the caller closes the stream."""
        ...

    async def delete(self, attachment_id: str, *, request: HttpRequest) -> None:
        """Delete the owner's attachment ``attachment_id``; no-op when absent."""
        ...


def is_persistent(store: object) -> bool:
    """Return whether ``store`` keeps anything, from its optional ``persistent`` flag.

    Null stores (and wrappers around them) report ``False``: a transport then stays stateless,
    mounts no thread or attachment routes and uses the client's posted history. A store without
    the attribute is assumed to persist.
    """
    return bool(getattr(store, "persistent", True))


def check_limit(limit: int | None) -> None:
    """Validate a ``list(limit=...)`` argument: ``None`` or a positive ``int``.

    Raises ``ValueError`` naming the bad value otherwise.
    """
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(
            f"limit={limit!r} is not valid: pass a positive integer, or None for the "
            "store's default."
        )
