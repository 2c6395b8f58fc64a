"""Conversation persistence inside the user's Django session: no model, no migration."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.sessions.middleware import SessionMiddleware
from django.core import checks
from django.utils.module_loading import import_string

from django_pydantic_agent.persistence.base import (
    Conversation,
    ConversationMeta,
    ConversationMetaList,
    StoreError,
    StoreLimitError,
    check_limit,
)
from django_pydantic_agent.persistence.branching import BranchPoint
from django_pydantic_agent.persistence.derive import derive_preview, derive_title
from django_pydantic_agent.persistence.message_tree import activate_in, branch_points_in

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.contrib.sessions.backends.base import SessionBase
    from django.http import HttpRequest

__all__ = ["SESSION_MIDDLEWARE_CHECK_ID", "DjangoSessionConversationStore"]

#: The system check of a session store mounted without ``SessionMiddleware``.
SESSION_MIDDLEWARE_CHECK_ID = "django_pydantic_agent.E003"
_SESSION_MIDDLEWARE = "django.contrib.sessions.middleware.SessionMiddleware"

_Threads = dict[str, dict[str, Any]]

#: Serialise each session's reload-change-save within this process (striped by session key).
_LOCKS = tuple(threading.Lock() for _ in range(64))


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} is not valid: pass a positive integer.")
    return value


def _revision(raw: object) -> int:
    """A stored revision counter; 0 for none (written by 0.28.3 or earlier) or a non-counter."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        return 0
    return raw


def _encoded_size(threads: _Threads) -> int:
    return len(json.dumps(threads, separators=(",", ":")).encode("utf-8"))


def _parse_timestamp(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _has_session_middleware() -> bool:
    """Whether ``MIDDLEWARE`` holds ``SessionMiddleware`` or a subclass of it."""
    for path in settings.MIDDLEWARE:
        try:
            middleware = import_string(path)
        except ImportError:
            continue  # Django's own checks report unimportable middleware
        if isinstance(middleware, type) and issubclass(middleware, SessionMiddleware):
            return True
    return False


class DjangoSessionConversationStore:
    """Conversations kept in the acting browser's Django session.

    Threads live in a dict under one session key, so owner scoping is the session itself and
    durability is the session's: another browser, a logout or an expired session starts
    empty. Use a model-backed store for cross-device history.

    Every write saves the session explicitly, in the same worker-thread hop, so a save made
    after a streaming response has started (when ``SessionMiddleware`` has already run) still
    persists. Every read and write reloads the session as stored now, and a write changes
    only this store's entry, so a change made meanwhile by another tab (a deleted thread) is
    seen and kept. A revision counter stored next to the entry (``<session_key>:revision``)
    tells that apart from a stale copy of the whole session saved over it (by
    ``SessionMiddleware``): an entry older than the one this request last wrote or saw is
    replaced by the request's own. Once the store has been used in a request, that
    request's own later session saves (``SessionMiddleware``'s, which can land after a
    streaming run's last write) keep the stored entry when it is newer than the request's
    copy. Two writes of one session at the same instant in two processes still race (the
    later one wins); within a process they take turns. The store
    never creates a session (its cookie could arrive after the headers): the view creates it
    before responding (``ensure_session_key``), as the AG-UI server does, and a save for a
    request without one raises ``StoreError``.

    Branches (``KeepsBranches``): the chat-history adapter keeps a thread's other branches
    inside its stored messages (``persistence.message_tree``), counted in ``max_bytes``;
    ``activate`` rewrites the entry under the same lock as every write.

    Limits, per session: ``max_threads`` conversations and ``max_bytes`` of JSON for all of
    them together. A save that would exceed either raises ``StoreLimitError`` and changes
    nothing. Messages must be JSON-serialisable (``TypeError`` otherwise), as with Django's
    default session serializer. Needs a server-side session backend (database, cache or file):
    the signed-cookie backend caps a session at about 4 KB. If the session is deleted while the
    request runs (a logout in another tab), a save raises ``StoreError`` (a delete or rename
    does nothing).

    Raises ``ValueError`` at construction for a limit that is not a positive integer or an
    empty ``session_key``.
    """

    persistent: ClassVar[bool] = True

    def __init__(
        self,
        *,
        session_key: str = "django_pydantic_agent_conversations",
        max_threads: int = 50,
        max_bytes: int = 1024 * 1024,
    ) -> None:
        if not isinstance(session_key, str) or not session_key:
            raise ValueError(
                f"session_key={session_key!r} is not valid: pass a non-empty string naming "
                "the session entry that holds the conversations."
            )
        self._session_key = session_key
        self._revision_key = f"{session_key}:revision"
        self._max_threads = _positive_int("max_threads", max_threads)
        self._max_bytes = _positive_int("max_bytes", max_bytes)

    def __repr__(self) -> str:
        return (
            f"DjangoSessionConversationStore(session_key={self._session_key!r}, "
            f"max_threads={self._max_threads!r}, max_bytes={self._max_bytes!r})"
        )

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """``django_pydantic_agent.E003`` when ``MIDDLEWARE`` has no ``SessionMiddleware``:
        requests then have no session to keep conversations in (``ChecksItself``)."""
        if _has_session_middleware():
            return []
        return [
            checks.Error(
                f"{type(self).__name__} is mounted, but no SessionMiddleware is in MIDDLEWARE, "
                "so requests have no session to keep conversations in.",
                hint=f"Add {_SESSION_MIDDLEWARE!r} to MIDDLEWARE.",
                obj=self,
                id=SESSION_MIDDLEWARE_CHECK_ID,
            )
        ]

    @property
    def max_threads(self) -> int:
        """How many conversations one session may hold."""
        return self._max_threads

    @property
    def max_bytes(self) -> int:
        """How many bytes of JSON all of one session's conversations may take."""
        return self._max_bytes

    # -- synchronous bodies, each run in one worker-thread hop --------------------------------

    @staticmethod
    def _session(request: HttpRequest) -> SessionBase | None:
        return getattr(request, "session", None)

    def _threads_in(self, session: SessionBase) -> _Threads:
        raw = session.get(self._session_key)
        if not isinstance(raw, dict):
            return {}
        return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, dict)}

    def _revision_in(self, session: SessionBase) -> int:
        return _revision(session.get(self._revision_key))

    def _read(self, request: HttpRequest) -> _Threads:
        return self._sync(request, None, required=False)

    def _modify(
        self,
        request: HttpRequest,
        change: Callable[[_Threads], _Threads | None],
        *,
        required: bool,
    ) -> None:
        self._sync(request, change, required=required)

    def _sync(
        self,
        request: HttpRequest,
        change: Callable[[_Threads], _Threads | None] | None,
        *,
        required: bool,
    ) -> _Threads:
        """Read, and with ``change`` write, the threads as stored *now* (one worker hop).

        The request's session was loaded when the request started; another tab may have
        changed the stored one since, and a stale copy of the whole session (this request's
        own, saved by ``SessionMiddleware`` after this store's first write, or another
        request's with ``SESSION_SAVE_EVERY_REQUEST``) may have been saved over it. So the
        stored data is reloaded from the backend and its revision compared with the one this
        request last wrote or saw: newer is a change made elsewhere and is kept; older is a
        stale copy, and this request's own entry is written back. ``change`` returns the new
        threads, or ``None`` for "nothing to write". ``required`` is false for reads, delete
        and rename, which are no-ops (not errors) when there is no session to use. Returns
        the threads as they are now.
        """
        session = self._session(request)
        if session is None:
            if not required:
                return {}
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(
                "DjangoSessionConversationStore needs request.session: add "
                "'django.contrib.sessions.middleware.SessionMiddleware' to MIDDLEWARE."
            )
        from django.contrib.sessions.backends.base import UpdateError

        session.keys()  # load it: a forged or expired cookie leaves no session key
        key = session.session_key
        if key:
            self._guard_saves_of(session)
        if not key:
            if change is None:
                return self._threads_in(session)
            if not required:
                return {}
            # Creating one here could be too late for its cookie to reach the browser.
            raise StoreError(
                "The conversation was not saved: this request has no session, and the store "
                "does not create one. Call ensure_session_key(request) in the view before "
                "responding; for clients without a session cookie, use a model-backed store."
            )
        # Two tabs served by this process never interleave a reload and its save.
        with _LOCKS[hash(key) % len(_LOCKS)]:
            stored = type(session)(key)  # as SessionMiddleware builds it
            threads = self._threads_in(stored)  # reads the backend now
            revision = self._revision_in(stored)
            ended = not stored.session_key
            seen = self._revision_in(session)
            restore = not ended and revision < seen
            if restore:  # a stale copy was saved over this request's newer entry
                threads = self._threads_in(session)
            updated = None if ended or change is None else change(threads)
            if updated is None and restore:
                updated = threads
            cause: UpdateError | None = None
            if updated is not None:
                revision = max(revision, seen) + 1
                stored[self._session_key] = updated
                stored[self._revision_key] = revision
                # Explicit: SessionMiddleware has already run if the response is streaming.
                try:
                    stored.save()
                except UpdateError as exc:  # the row went between the reload and the save
                    ended, cause = True, exc
        if ended:
            if not required:
                return {}
            raise StoreError(
                "The conversation was not saved: the session ended while the request was "
                "running (a logout or flush elsewhere). Sign in or reload, then try again."
            ) from cause
        current = updated if updated is not None else threads
        # Keep this request's copy in step for later reads, without asking SessionMiddleware
        # to write its older copy of the rest of the session back. The entry goes in before
        # its revision: a middleware save that reads the copy meanwhile then carries the
        # older revision, which the next call recognises. A backend whose key is its data
        # (signed cookies) does need the middleware to send the new key.
        was_modified = session.modified
        session[self._session_key] = current
        session[self._revision_key] = revision
        if stored.session_key != key:
            session._session_key = stored.session_key
            was_modified = True
        session.modified = was_modified
        return current

    def _guard_saves_of(self, session: SessionBase) -> None:
        """Make every later save of the request's session keep this store's newest entry.

        ``SessionMiddleware`` saves the request's copy of the whole session once the view has
        returned; with a streaming response the run's writes go on meanwhile, and the copy
        it encodes can be older than a write that lands first (a database lock makes it wait
        after encoding, or another tab wrote). Saved as it is, it would erase the thread for
        every later request, which has no newer copy to restore it from. Guarded, such a save
        takes the same lock as this store's writes, reloads the stored entry and, when its
        revision is newer than the copy's, saves the stored entry with the copy's other keys.
        Installed on the request's session object at the store's first use in the request.
        """
        guarded: dict[str, str] | None = getattr(session, "_dpa_guarded_entries", None)
        if guarded is not None:
            guarded[self._session_key] = self._revision_key
            return
        guarded = {self._session_key: self._revision_key}
        original = session.save

        def save(must_create: bool = False) -> None:
            key = session.session_key
            if must_create or not key:
                original(must_create)
                return
            with _LOCKS[hash(key) % len(_LOCKS)]:
                stored = type(session)(key)
                stored.keys()  # read the backend now
                if stored.session_key:
                    for entry, revision_key in guarded.items():
                        revision = _revision(stored.get(revision_key))
                        if revision > _revision(session.get(revision_key)):
                            session[entry] = stored.get(entry)
                            session[revision_key] = revision
                original(must_create)

        session._dpa_guarded_entries = guarded  # type: ignore[attr-defined]
        session.save = save  # type: ignore[method-assign]

    def _load_sync(self, thread_id: str, request: HttpRequest) -> Conversation | None:
        entry = self._read(request).get(thread_id)
        if entry is None:
            return None
        messages = entry.get("messages")
        return Conversation(
            thread_id=thread_id,
            messages=list(messages) if isinstance(messages, list) else [],
            owner_id=entry.get("owner_id"),
        )

    def _save_sync(self, conversation: Conversation, request: HttpRequest) -> None:
        thread_id = conversation.thread_id
        messages = list(conversation.messages)
        try:
            # Round-trip so the session holds plain JSON, exactly what a reload returns.
            messages = json.loads(json.dumps(messages))
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"Conversation {thread_id!r} cannot be stored in the session: its messages "
                f"are not JSON-serialisable ({exc}). Store plain JSON values (dump pydantic "
                "models with model_dump(mode='json'))."
            ) from exc

        def change(threads: _Threads) -> _Threads:
            previous = threads.get(thread_id)
            if previous is None and len(threads) >= self._max_threads:
                raise StoreLimitError(
                    f"Cannot start conversation {thread_id!r}: this session already holds "
                    f"{len(threads)} conversations, the limit (max_threads={self._max_threads}). "
                    "Delete an old conversation first."
                )
            entry: dict[str, Any] = {
                "messages": messages,
                "updated_at": datetime.now(UTC).isoformat(),
            }
            if conversation.owner_id is not None:
                entry["owner_id"] = conversation.owner_id
            if previous is not None and isinstance(previous.get("title"), str):
                entry["title"] = previous["title"]
            updated = {**threads, thread_id: entry}
            self._check_size(updated, f"save conversation {thread_id!r}")
            return updated

        self._modify(request, change, required=True)

    def _check_size(self, threads: _Threads, action: str) -> None:
        size = _encoded_size(threads)
        if size > self._max_bytes:
            raise StoreLimitError(
                f"Cannot {action}: this session's conversations would take {size} bytes, "
                f"over the limit (max_bytes={self._max_bytes}). Delete old conversations, "
                "or use a model-backed store for long histories."
            )

    def _delete_sync(self, thread_id: str, request: HttpRequest) -> None:
        def change(threads: _Threads) -> _Threads | None:
            if thread_id not in threads:
                return None
            return {k: v for k, v in threads.items() if k != thread_id}

        self._modify(request, change, required=False)

    def _list_sync(self, request: HttpRequest, limit: int | None) -> ConversationMetaList:
        rows: ConversationMetaList = []
        for thread_id, entry in self._read(request).items():
            messages = entry.get("messages")
            messages = messages if isinstance(messages, list) else []
            title = entry.get("title")
            rows.append(
                ConversationMeta(
                    thread_id=thread_id,
                    title=title if isinstance(title, str) and title else derive_title(messages),
                    updated_at=_parse_timestamp(entry.get("updated_at")),
                    preview=derive_preview(messages),
                    owner_id=entry.get("owner_id"),
                    archived=entry.get("archived") is True,
                )
            )
        # Newest first; entries without a timestamp last.
        oldest = datetime.min.replace(tzinfo=UTC)
        rows.sort(key=lambda row: row.updated_at or oldest, reverse=True)
        return rows if limit is None else rows[:limit]

    def _exists_sync(self, thread_id: str, request: HttpRequest) -> bool:
        return thread_id in self._read(request)

    def _rename_sync(self, thread_id: str, title: str, request: HttpRequest) -> None:
        def change(threads: _Threads) -> _Threads | None:
            entry = threads.get(thread_id)
            if entry is None:
                return None
            updated = {**threads, thread_id: {**entry, "title": title}}
            self._check_size(updated, f"rename conversation {thread_id!r}")
            return updated

        self._modify(request, change, required=False)

    def _archive_sync(self, thread_id: str, archived: bool, request: HttpRequest) -> bool:
        found = False

        def change(threads: _Threads) -> _Threads | None:
            nonlocal found
            entry = threads.get(thread_id)
            found = entry is not None
            if entry is None or (entry.get("archived") is True) == archived:
                return None
            return {**threads, thread_id: {**entry, "archived": archived}}

        self._modify(request, change, required=False)
        return found

    def _branch_points_sync(
        self, thread_id: str, request: HttpRequest
    ) -> dict[str, BranchPoint] | None:
        entry = self._read(request).get(thread_id)
        if entry is None:
            return None
        messages = entry.get("messages")
        return branch_points_in(messages if isinstance(messages, list) else [])

    def _activate_sync(self, thread_id: str, message_id: str, request: HttpRequest) -> bool:
        found = False

        def change(threads: _Threads) -> _Threads | None:
            nonlocal found
            entry = threads.get(thread_id)
            if entry is None:
                return None
            messages = entry.get("messages")
            found, switched = activate_in(
                messages if isinstance(messages, list) else [], message_id
            )
            if switched is None:
                return None
            updated = {**threads, thread_id: {**entry, "messages": switched}}
            self._check_size(updated, f"switch branches of conversation {thread_id!r}")
            return updated

        self._modify(request, change, required=False)
        return found

    # -- the ConversationStore protocol --------------------------------------------------------

    async def load(self, thread_id: str, *, request: HttpRequest) -> Conversation | None:
        """Return this session's conversation ``thread_id``, or ``None``."""
        return await sync_to_async(self._load_sync)(thread_id, request)

    async def save(self, conversation: Conversation, *, request: HttpRequest) -> None:
        """Insert or replace the conversation and save the session.

        Raises ``StoreLimitError`` over a limit and ``TypeError`` for non-JSON messages;
        nothing is written in either case.
        """
        await sync_to_async(self._save_sync)(conversation, request)

    async def delete(self, thread_id: str, *, request: HttpRequest) -> None:
        """Delete the conversation and save the session; no-op when absent."""
        await sync_to_async(self._delete_sync)(thread_id, request)

    async def list(self, *, request: HttpRequest, limit: int | None = None) -> ConversationMetaList:
        """This session's conversations as metadata, newest first (``None``: all of them)."""
        check_limit(limit)
        return await sync_to_async(self._list_sync)(request, limit)

    async def exists(self, thread_id: str, *, request: HttpRequest) -> bool:
        """Whether this session holds ``thread_id`` (a key lookup, no message decoding)."""
        return await sync_to_async(self._exists_sync)(thread_id, request)

    async def rename(self, thread_id: str, title: str, *, request: HttpRequest) -> None:
        """Record a title for an existing conversation; no-op when absent.

        Raises ``StoreLimitError`` when the title would take the session over ``max_bytes``.
        """
        await sync_to_async(self._rename_sync)(thread_id, title, request)

    async def archive(self, thread_id: str, archived: bool, *, request: HttpRequest) -> bool:
        """Set the archived flag of a conversation (``ArchivesThreads``), kept in its session
        entry; ``False`` when absent. Search and pages go through ``persistence.listing``'s
        generic path over ``list()``."""
        return await sync_to_async(self._archive_sync)(thread_id, archived, request)

    async def branch_points(
        self, thread_id: str, *, request: HttpRequest
    ) -> dict[str, BranchPoint] | None:
        """The active messages that have siblings, by AG-UI id (``KeepsBranches``); ``None``
        when this session has no such thread."""
        return await sync_to_async(self._branch_points_sync)(thread_id, request)

    async def activate(self, thread_id: str, message_id: str, *, request: HttpRequest) -> bool:
        """Make the branch through ``message_id`` active (``KeepsBranches``); ``False``
        (nothing written) when the thread has no such message on any branch."""
        return await sync_to_async(self._activate_sync)(thread_id, message_id, request)
