"""The two store contracts and the value types they exchange.

``ConversationStore`` is the thread drawer's view of history (whole-conversation load and save,
list, rename, delete); ``AttachmentStore`` keeps the files a user attaches. Both are
``runtime_checkable`` protocols: any object with the right async methods is a store, no base
class needed. Every method takes the acting ``HttpRequest`` as the keyword ``request=`` and
scopes what it does to that request's owner; a cross-owner id behaves exactly like a missing one.

The value types are frozen dataclasses that, unlike the package's other value objects, also
take positional arguments, in the predecessor package's field order: code written against it
ports unchanged.

A store may also offer optional capabilities, each a small ``runtime_checkable`` protocol
here, called through one helper that knows its default (``is_persistent``, ``serves_anonymous``,
``wrapped_stores``, ``store_repositories``, ``own_run_store``, ``store_checks``; on the chat
repository a store hands out, ``repository_user_uuid`` and ``refuse_over_quota``). What a
store can do as a whole is ``persistence.features.StoreFeatures``. The store errors live in
``persistence.errors`` and are re-exported here.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from asgiref.sync import sync_to_async

# Re-exported from their old home; the tree lives in ``persistence.errors``.
from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.persistence.errors import StoreDataError, StoreError, StoreLimitError
from django_pydantic_agent.persistence.runs import RunStore

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from datetime import datetime

    from django.core.checks import CheckMessage
    from django.core.files.uploadedfile import UploadedFile
    from django.http import HttpRequest

    from django_pydantic_agent.chat_history import ChatRepositoryLike, MessageRepositoryLike

__all__ = [
    "AttachmentRef",
    "AttachmentStore",
    "ChecksItself",
    "Conversation",
    "ConversationMeta",
    "ConversationMetaList",
    "ConversationStore",
    "DeclaresAnonymousPolicy",
    "NamesItsUser",
    "OpenedAttachment",
    "ProvidesRepositories",
    "ProvidesRunStore",
    "RefusesOverQuota",
    "ReportsPersistence",
    "ResolvesAttachmentRefs",
    "StoreDataError",
    "StoreError",
    "StoreLimitError",
    "WrapsStore",
    "attachment_refs",
    "check_limit",
    "is_persistent",
    "own_run_store",
    "refuse_over_quota",
    "repository_user_uuid",
    "serves_anonymous",
    "store_checks",
    "store_repositories",
    "wrapped_stores",
]


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
    ``archived`` is the thread's archived flag (always ``False`` on a store that keeps none;
    see ``persistence.listing``).
    """

    thread_id: str
    title: str
    updated_at: datetime | None = None
    preview: str = ""
    owner_id: str | None = None
    archived: bool = False


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


# -- Optional store capabilities ----------------------------------------------------------
#
# A store may offer any of these on top of its contract. Transports probe them through the
# helpers below (never with a bare ``getattr``), so each rule, and its default for a store
# without the capability, is written once.


@runtime_checkable
class ReportsPersistence(Protocol):
    """Optional: ``persistent`` is ``False`` for a store that keeps nothing (a Null store).

    Default without it: the store persists. Read it with ``is_persistent``.
    """

    @property
    def persistent(self) -> bool:
        """Whether the store keeps what it is given."""
        ...


@runtime_checkable
class DeclaresAnonymousPolicy(Protocol):
    """Optional: ``allow_anonymous`` says whether anonymous sessions are served.

    Model-backed stores expose it. Default without it: the store serves whoever reaches it
    (``DjangoSessionConversationStore`` serves the session it lives in). Read it, through any
    wrappers, with ``serves_anonymous``.
    """

    @property
    def allow_anonymous(self) -> bool:
        """Whether anonymous callers (keyed to their session) are served."""
        ...


@runtime_checkable
class WrapsStore(Protocol):
    """Optional: a wrapper (``ScopedConversationStore``) exposes the store it wraps as ``inner``.

    Transports and checks look through it with ``wrapped_stores``.
    """

    @property
    def inner(self) -> object:
        """The wrapped store."""
        ...


@runtime_checkable
class ProvidesRepositories(Protocol):
    """Optional: a store that persists runs incrementally hands out chat-history repositories.

    ``repositories(request=...)`` returns ``(chat_repository, message_repository)``, a
    ``chat_history.ChatRepositoryLike`` and a ``chat_history.MessageRepositoryLike``, scoped
    to the request's owner exactly like the store's other methods (it raises
    ``AnonymousOperationError`` where they would). Without it, a transport persists a run
    through the store's whole-conversation ``save``. Read it with ``store_repositories``.
    """

    async def repositories(
        self, *, request: HttpRequest
    ) -> tuple[ChatRepositoryLike, MessageRepositoryLike]:
        """Return the ``(ChatRepositoryLike, MessageRepositoryLike)`` pair for ``request``."""
        ...


@runtime_checkable
class ResolvesAttachmentRefs(Protocol):
    """Optional: ``refs(ids, request=...)`` reads the refs of several attachments at once.

    Owner-scoped like ``open``: the answer maps each id the owner has to its ``AttachmentRef``
    and leaves out a missing or cross-owner id. Without it, ``attachment_refs`` opens each id
    and closes it again. Read it with ``attachment_refs``.
    """

    async def refs(
        self, attachment_ids: Sequence[str], *, request: HttpRequest
    ) -> dict[str, AttachmentRef]:
        """The owner's refs among ``attachment_ids``, by id."""
        ...


@runtime_checkable
class ProvidesRunStore(Protocol):
    """Optional: a store that records its runs in its own tables says where, ``run_store()``.

    Without it a transport records runs in Django's cache (``CacheRunStore``). Read it,
    through any wrappers, with ``own_run_store``.
    """

    def run_store(self) -> RunStore:
        """The ``RunStore`` the runs on this store are recorded in."""
        ...


@runtime_checkable
class ChecksItself(Protocol):
    """Optional: ``check(**kwargs)`` returns the system-check messages of a mounted store.

    Django's ``Field.check()`` habit: the base app's checks ask each store the URLconf mounts
    (``store_checks``) instead of knowing every store. A wrapper forwards to what it wraps.
    Without it a store has nothing to report.
    """

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """The problems of this store's setup, as Django ``CheckMessage``s (``[]`` when none)."""
        ...


@runtime_checkable
class NamesItsUser(Protocol):
    """Optional, on a chat repository: ``user_uuid``, the chat-history user its owner's chats
    are filed under (``None`` when it has none). Read it with ``repository_user_uuid``."""

    @property
    def user_uuid(self) -> uuid.UUID | None:
        """The chat-history user of the repository's owner, or ``None``."""
        ...


@runtime_checkable
class RefusesOverQuota(Protocol):
    """Optional, on a chat repository: ``refuse_over_quota(thread_id)`` raises the store's
    ``StoreLimitError`` when a run would create a thread over the owner's quota, so a
    transport refuses it before streaming. Call it through ``refuse_over_quota``."""

    async def refuse_over_quota(self, thread_id: str) -> None:
        """Raise ``StoreLimitError`` if a new thread ``thread_id`` would exceed the quota."""
        ...


def own_run_store(store: object) -> RunStore | None:
    """The ``RunStore`` of the first store along ``wrapped_stores`` that provides one
    (``ProvidesRunStore``), or ``None`` when none does."""
    for layer in wrapped_stores(store):
        if implements(layer, ProvidesRunStore):
            found = layer.run_store()
            if implements(found, RunStore):
                return found
    return None


def store_checks(store: object, **kwargs: Any) -> list[CheckMessage]:
    """``store.check(**kwargs)`` when the store checks itself (``ChecksItself``), else ``[]``."""
    return list(store.check(**kwargs)) if implements(store, ChecksItself) else []


def repository_user_uuid(chat_repository: object) -> uuid.UUID | None:
    """The ``user_uuid`` a chat repository names (``NamesItsUser``), or ``None``."""
    if implements(chat_repository, NamesItsUser):
        found = chat_repository.user_uuid
        return found if isinstance(found, uuid.UUID) else None
    return None


async def refuse_over_quota(chat_repository: object, thread_id: str) -> None:
    """Ask a chat repository that can (``RefusesOverQuota``) whether a run on ``thread_id`` is
    over quota: its ``StoreLimitError`` propagates. Nothing happens for any other repository."""
    if implements(chat_repository, RefusesOverQuota):
        await chat_repository.refuse_over_quota(thread_id)


async def attachment_refs(
    store: AttachmentStore, attachment_ids: Sequence[str], *, request: HttpRequest
) -> dict[str, AttachmentRef]:
    """The refs of the owner's attachments among ``attachment_ids`` (others are left out).

    Uses the store's ``refs`` when it has one (``ResolvesAttachmentRefs``); otherwise opens
    each id with ``open`` and closes its stream unread. Whatever the store raises propagates.
    """
    wanted = list(dict.fromkeys(attachment_ids))
    if not wanted:
        return {}
    if implements(store, ResolvesAttachmentRefs):
        found = await store.refs(wanted, request=request)
        return {key: found[key] for key in wanted if key in found}
    refs: dict[str, AttachmentRef] = {}
    for attachment_id in wanted:
        opened = await store.open(attachment_id, request=request)
        if opened is not None:
            await sync_to_async(opened.content.close)()
            refs[attachment_id] = opened.ref
    return refs


def is_persistent(store: object) -> bool:
    """Return whether ``store`` keeps anything, from its optional ``persistent`` flag.

    Null stores (and wrappers around them) report ``False``: a transport then stays stateless,
    mounts no thread or attachment routes and uses the client's posted history. A store without
    the attribute is assumed to persist.
    """
    return bool(store.persistent) if implements(store, ReportsPersistence) else True


def wrapped_stores(store: object) -> Iterator[object]:
    """Yield ``store`` and then every store it wraps through ``inner``, outermost first.

    Stops at ``None`` and at a store already seen, so a wrapper cycle cannot loop forever.
    """
    seen: set[int] = set()
    current: object | None = store
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.inner if implements(current, WrapsStore) else None


def serves_anonymous(store: object) -> bool:
    """Whether ``store`` may act for anonymous callers (keyed to their session).

    The outermost ``allow_anonymous`` flag along ``wrapped_stores`` decides; a store chain
    that declares none is assumed to serve anonymous callers.
    """
    for layer in wrapped_stores(store):
        if implements(layer, DeclaresAnonymousPolicy) and isinstance(layer.allow_anonymous, bool):
            return layer.allow_anonymous
    return True


async def store_repositories(
    store: object, *, request: HttpRequest
) -> tuple[ChatRepositoryLike, MessageRepositoryLike] | None:
    """Return ``store``'s ``(chat, message)`` repositories for ``request``, or ``None``.

    ``None`` means the store offers no ``repositories`` (the transport then falls back to the
    whole-conversation adapter). Whatever ``repositories`` raises propagates.
    """
    if not implements(store, ProvidesRepositories):
        return None
    return await store.repositories(request=request)


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
