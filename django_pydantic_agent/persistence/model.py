"""Abstract bases for model-backed (or any synchronous) conversation and attachment stores.

A subclass implements a few synchronous row operations ("hooks") against its own models; the
base supplies the async protocol methods. Each async call makes exactly one ``sync_to_async``
hop, and inside that worker thread resolves the owner and then runs the hook, so owner
resolution (which may load the session) and the query never touch the event loop.

A hook failing with ``django.db.DataError`` (the database refusing the caller's data, such as
PostgreSQL refusing a NUL character in text) surfaces as ``StoreDataError``, a ``StoreError``
that transports answer as the caller's fault. Every other exception passes through unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from asgiref.sync import sync_to_async
from django.db import DataError

from django_pydantic_agent.persistence.base import (
    AttachmentRef,
    Conversation,
    ConversationMetaList,
    OpenedAttachment,
    StoreDataError,
    check_limit,
)
from django_pydantic_agent.persistence.branching import BranchPoint
from django_pydantic_agent.persistence.features import StoreFeatures
from django_pydantic_agent.persistence.listing import (
    GENERIC_SCAN_LIMIT,
    ArchiveUnsupportedError,
    ThreadPage,
    ThreadQuery,
    filter_threads,
)
from django_pydantic_agent.persistence.message_tree import activate_in, branch_points_in
from django_pydantic_agent.persistence.owner import resolve_owner_id
from django_pydantic_agent.persistence.transactions import write_transaction

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from django.core.checks import CheckMessage
    from django.core.files.uploadedfile import UploadedFile
    from django.http import HttpRequest

__all__ = ["ModelAttachmentStore", "ModelConversationStore"]

_T = TypeVar("_T")


#: The optional hooks whose override adds a capability, and the feature each adds.
_FEATURE_HOOKS: dict[str, str] = {"_find": "search", "_archive": "archive"}


def _check_allow_anonymous(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"allow_anonymous={value!r} is not a bool: pass True to serve anonymous "
            "visitors keyed to their session, or False (the default) to refuse them."
        )
    return value


class _OwnerScoped:
    """Shared owner policy of the two model-backed bases."""

    # Class-level default: a subclass overriding __init__ without calling super() still
    # refuses anonymous requests rather than serving them from one shared bucket.
    _allow_anonymous: bool = False
    persistent: ClassVar[bool] = True

    def __init__(self, *, allow_anonymous: bool = False) -> None:
        self._allow_anonymous = _check_allow_anonymous(allow_anonymous)

    @property
    def allow_anonymous(self) -> bool:
        """Whether anonymous visitors are served, each keyed to their own session."""
        return self._allow_anonymous

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """The system-check messages of this store when mounted (``ChecksItself``): none for
        the base. A subclass whose models need an app or a setting reports it here, as
        ``[*super().check(**kwargs), *its_own]``."""
        return []

    def _owner(self, request: HttpRequest) -> str:
        """Resolve the owner of ``request`` under this store's anonymous policy (sync)."""
        return resolve_owner_id(request, allow_anonymous=self._allow_anonymous)

    async def _call(
        self, subject: str, hook: Callable[..., _T], request: HttpRequest, *args: Any
    ) -> _T:
        """``hook(*args, owner_id)`` in one worker-thread hop that resolves the owner first.

        The database refusing the caller's data (``DataError``) raises ``StoreDataError``
        about ``subject``; any other exception propagates.
        """

        def work() -> _T:
            owner_id = self._owner(request)
            try:
                return hook(*args, owner_id)
            except DataError as exc:
                raise StoreDataError(
                    f"The database refused the data for {subject}: a value is not valid for "
                    "its column, such as a NUL character (PostgreSQL text cannot hold one) or "
                    "a value longer than the column allows. Nothing was changed; remove NUL "
                    "characters and shorten over-long values, then try again."
                ) from exc

        return await sync_to_async(work)()


class ModelConversationStore(_OwnerScoped, ABC):
    """Abstract base for a model-backed ``ConversationStore``.

    Implement ``_fetch``, ``_store`` and ``_remove``; override ``_list`` (default: ``[]``, so
    listing is opt-in), ``_exists`` (default: probes ``_fetch``, which loads the body, so
    override it with a metadata-only query) and ``_rename`` (default: no-op) as the model
    allows. Every hook receives the resolved ``owner_id`` (a string) and must filter by it.

    ``allow_anonymous=False`` (the default, also the class-level default) makes every method
    raise ``AnonymousOperationError`` for an anonymous request; ``True`` keys anonymous visitors
    to ``"anon:<session_key>"`` of a session the view created before responding. The store
    reads no settings. A hook's ``django.db.DataError`` surfaces as ``StoreDataError``.

    Branches (``KeepsBranches``): the chat-history adapter keeps a thread's other branches
    inside its stored messages (``persistence.message_tree``), so ``_store`` and ``_fetch``
    round-trip them with no change to the model; ``activate`` is one ``_fetch`` and one
    ``_store`` in one transaction.

    Say which capability hooks the class overrides in ``overrides``: ``"_find"`` (a search
    of message text) and ``"_archive"`` (an archived flag). ``features`` reports them, so the
    chat page offers what the store does; nothing inspects the class for overridden methods.
    """

    #: The hooks among ``_find`` and ``_archive`` this class overrides (``features``).
    overrides: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = cls.overrides
        if isinstance(names, str) or not set(names) <= _FEATURE_HOOKS.keys():
            raise TypeError(
                f"{cls.__name__}.overrides={names!r} is not valid: name the hooks the class "
                f"overrides among {sorted(_FEATURE_HOOKS)}, for example "
                "overrides = {'_archive'}."
            )
        cls.overrides = frozenset(names)

    @property
    def features(self) -> StoreFeatures:
        """What this store can do (``persistence.features``): what it implements, with
        ``search`` and ``archive`` as ``overrides`` declares."""
        declared = {feature: hook in self.overrides for hook, feature in _FEATURE_HOOKS.items()}
        return StoreFeatures.of(self, **declared)

    @abstractmethod
    def _fetch(self, thread_id: str, owner_id: str) -> Conversation | None:
        """Return the owner's conversation, or ``None`` if missing."""

    @abstractmethod
    def _store(self, conversation: Conversation, owner_id: str) -> None:
        """Insert or replace the owner's conversation ``conversation.thread_id``."""

    @abstractmethod
    def _remove(self, thread_id: str, owner_id: str) -> None:
        """Delete the owner's conversation; no-op when absent."""

    def _list(self, owner_id: str, limit: int | None) -> ConversationMetaList:
        """Return the owner's conversation metadata, most recent first, at most ``limit``."""
        return []

    def _exists(self, thread_id: str, owner_id: str) -> bool:
        """Return whether the owner has the conversation (default: via ``_fetch``)."""
        return self._fetch(thread_id, owner_id) is not None

    def _rename(self, thread_id: str, title: str, owner_id: str) -> None:
        """Record a display title (default: no-op)."""
        return None

    def _find(self, query: ThreadQuery, owner_id: str) -> ThreadPage:
        """The owner's threads matching ``query`` (default: ``filter_threads`` over ``_list``
        of at most ``GENERIC_SCAN_LIMIT`` threads: titles only). Override with a query, and
        name ``"_find"`` in ``overrides``."""
        return filter_threads(self._list(owner_id, GENERIC_SCAN_LIMIT), query)

    def _archive(self, thread_id: str, archived: bool, owner_id: str) -> bool:
        """Set the archived flag; ``False`` for a missing thread (default: the store keeps
        no flag, ``ArchiveUnsupportedError``). Report the flag in ``_list``'s rows, and name
        ``"_archive"`` in ``overrides``."""
        raise ArchiveUnsupportedError(
            f"{type(self).__name__} keeps no archived flag: override _archive() (report "
            "ConversationMeta.archived from _list(), add '_archive' to overrides) to archive "
            "threads."
        )

    def _branch_points(self, thread_id: str, owner_id: str) -> dict[str, BranchPoint] | None:
        conversation = self._fetch(thread_id, owner_id)
        return None if conversation is None else branch_points_in(conversation.messages)

    def _activate(self, thread_id: str, message_id: str, owner_id: str) -> bool:
        with write_transaction():
            conversation = self._fetch(thread_id, owner_id)
            if conversation is None:
                return False
            found, switched = activate_in(conversation.messages, message_id)
            if switched is not None:
                self._store(replace(conversation, messages=switched), owner_id)
            return found

    async def load(self, thread_id: str, *, request: HttpRequest) -> Conversation | None:
        """Return the owner's conversation ``thread_id``, or ``None`` (missing or cross-owner)."""
        return await self._call(f"conversation {thread_id!r}", self._fetch, request, thread_id)

    async def save(self, conversation: Conversation, *, request: HttpRequest) -> None:
        """Insert or replace the owner's conversation; ``conversation.owner_id`` is ignored."""
        subject = f"conversation {conversation.thread_id!r}"
        await self._call(subject, self._store, request, conversation)

    async def delete(self, thread_id: str, *, request: HttpRequest) -> None:
        """Delete the owner's conversation ``thread_id``; no-op when absent."""
        await self._call(f"conversation {thread_id!r}", self._remove, request, thread_id)

    async def list(self, *, request: HttpRequest, limit: int | None = None) -> ConversationMetaList:
        """Return the owner's conversations as metadata, most recent first.

        Raises ``ValueError`` for a ``limit`` that is not ``None`` or a positive integer.
        """
        check_limit(limit)
        return await self._call(
            "the conversation list", lambda owner_id: self._list(owner_id, limit), request
        )

    async def exists(self, thread_id: str, *, request: HttpRequest) -> bool:
        """Return whether the owner has conversation ``thread_id``."""
        return await self._call(f"conversation {thread_id!r}", self._exists, request, thread_id)

    async def rename(self, thread_id: str, title: str, *, request: HttpRequest) -> None:
        """Set the display title of the owner's conversation ``thread_id``."""
        await self._call(f"conversation {thread_id!r}", self._rename, request, thread_id, title)

    async def branch_points(
        self, thread_id: str, *, request: HttpRequest
    ) -> dict[str, BranchPoint] | None:
        """The active messages that have siblings, by AG-UI id (``KeepsBranches``): read from
        the stored messages (one ``_fetch``); ``None`` when the owner has no such thread."""
        subject = f"conversation {thread_id!r}"
        return await self._call(subject, self._branch_points, request, thread_id)

    async def activate(self, thread_id: str, message_id: str, *, request: HttpRequest) -> bool:
        """Make the branch through ``message_id`` active (``KeepsBranches``): one ``_fetch``
        and, unless it already is, one ``_store`` in one transaction. ``False`` (nothing
        written) when the owner's thread has no such message on any branch."""
        subject = f"conversation {thread_id!r}"
        return await self._call(subject, self._activate, request, thread_id, message_id)

    async def find_threads(self, query: ThreadQuery, *, request: HttpRequest) -> ThreadPage:
        """The owner's threads matching ``query`` (``SearchesThreads``), through ``_find``."""
        return await self._call("the conversation list", self._find, request, query)

    async def archive(self, thread_id: str, archived: bool, *, request: HttpRequest) -> bool:
        """Set the archived flag of the owner's ``thread_id`` (``ArchivesThreads``); ``False``
        when it does not exist. ``ArchiveUnsupportedError`` unless ``_archive`` is overridden."""
        subject = f"conversation {thread_id!r}"
        return await self._call(subject, self._archive, request, thread_id, archived)


class ModelAttachmentStore(_OwnerScoped, ABC):
    """Abstract base for a model-backed ``AttachmentStore``.

    The attachment twin of ``ModelConversationStore``: same single worker-thread hop, same
    owner resolution, same ``allow_anonymous`` policy. Implement ``_save``, ``_open`` and
    ``_remove`` over your own storage (typically a Django ``Storage`` for the bytes and a row
    for the metadata); each receives the resolved ``owner_id`` and must filter by it, so
    ``_open`` returns ``None`` for another owner's id exactly as for a missing one. A hook's
    ``django.db.DataError`` surfaces as ``StoreDataError``.
    """

    @abstractmethod
    def _save(self, upload: UploadedFile[bytes], owner_id: str) -> AttachmentRef:
        """Persist the upload for the owner and return its ref."""

    @abstractmethod
    def _open(self, attachment_id: str, owner_id: str) -> OpenedAttachment | None:
        """Open the owner's attachment, or return ``None`` if missing."""

    @abstractmethod
    def _remove(self, attachment_id: str, owner_id: str) -> None:
        """Delete the owner's attachment; no-op when absent."""

    def _refs(self, attachment_ids: Sequence[str], owner_id: str) -> dict[str, AttachmentRef]:
        """The owner's refs among ``attachment_ids`` (default: ``_open`` each, then close it).

        Override with one query when the metadata lives in a row.
        """
        found: dict[str, AttachmentRef] = {}
        for attachment_id in attachment_ids:
            opened = self._open(attachment_id, owner_id)
            if opened is not None:
                opened.content.close()
                found[attachment_id] = opened.ref
        return found

    async def save(self, upload: UploadedFile[bytes], *, request: HttpRequest) -> AttachmentRef:
        """Persist ``upload`` for the request's owner and return its ref."""
        return await self._call(f"the upload {upload.name!r}", self._save, request, upload)

    async def open(self, attachment_id: str, *, request: HttpRequest) -> OpenedAttachment | None:
        """Open the owner's attachment, or ``None`` (missing or cross-owner)."""
        subject = f"attachment {attachment_id!r}"
        return await self._call(subject, self._open, request, attachment_id)

    async def delete(self, attachment_id: str, *, request: HttpRequest) -> None:
        """Delete the owner's attachment ``attachment_id``; no-op when absent."""
        await self._call(f"attachment {attachment_id!r}", self._remove, request, attachment_id)

    async def refs(
        self, attachment_ids: Sequence[str], *, request: HttpRequest
    ) -> dict[str, AttachmentRef]:
        """The owner's refs among ``attachment_ids``, by id (one worker-thread hop)."""
        wanted = list(attachment_ids)
        return await self._call(f"attachments {wanted!r}", self._refs, request, wanted)
