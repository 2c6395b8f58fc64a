"""Finding threads: search, archive, date filters and pages, as optional store capabilities.

``find_threads(store, query, request=...)`` answers a ``ThreadQuery`` with a ``ThreadPage``:
through the store's own ``find_threads`` when it has one (``SearchesThreads``: full-text on
``DefaultConversationStore``), else from the store's ``list()`` (``filter_threads``: titles
only, at most ``GENERIC_SCAN_LIMIT`` threads). ``archive_thread`` sets the archived flag of a
store that keeps one (``ArchivesThreads``). Owner scoping stays the store's: every answer is
about the request's owner only.

A page's ``next_position`` is a short list of JSON scalars the store reads back from
``ThreadQuery.after``; the transport signs it into an opaque cursor, so a store sees only
positions it produced (it still raises ``CursorError`` for one it cannot read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.persistence.base import ConversationMeta, ConversationStore

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from django.http import HttpRequest

__all__ = [
    "GENERIC_SCAN_LIMIT",
    "SNIPPET_MAX_CHARS",
    "ArchiveUnsupportedError",
    "ArchivesThreads",
    "CursorError",
    "Position",
    "SearchesThreads",
    "ThreadHit",
    "ThreadPage",
    "ThreadQuery",
    "archive_thread",
    "filter_threads",
    "find_threads",
    "search_terms",
    "snippet",
]

#: How many threads ``filter_threads`` reads through ``list()`` for a store without
#: ``find_threads``: the generic search sees the owner's newest this many.
GENERIC_SCAN_LIMIT = 1000
#: The longest ``snippet``, in characters.
SNIPPET_MAX_CHARS = 160
#: At most this many search terms are used; the rest of ``q`` is ignored.
MAX_TERMS = 8

#: A page position: a short list of JSON scalars, the store's own.
Position: TypeAlias = list[Any]

_WORD = re.compile(r"\w+")
_ELLIPSIS = "\u2026"


class CursorError(ValueError):
    """A ``ThreadQuery.after`` position the store cannot read (a cursor of another store)."""


class ArchiveUnsupportedError(Exception):
    """The store keeps no archived flag (it does not implement ``ArchivesThreads``)."""


@dataclass(frozen=True, kw_only=True)
class ThreadQuery:
    """What ``GET threads/`` asks for.

    ``text``: the search words (``""``: no search, newest first); a thread matches when every
    word starts a word of its title or of one of its message texts. ``archived``: ``False``
    the threads not archived, ``True`` the archived ones, ``None`` both.
    ``updated_after`` / ``updated_before`` bound ``updated_at`` (exclusive; a store without
    timestamps keeps every thread when a bound is given). ``limit``: the page size.
    ``after``: the ``next_position`` of the previous page, or ``None`` for the first.
    ``prefix``: only thread ids starting with it, returned without it
    (``ScopedConversationStore`` passes its scope). ``tag``: only threads with that tag
    (normalised; ``""``: any). ``pinned``: only the pinned (``True``) or unpinned (``False``)
    threads, ``None`` both.
    """

    text: str = ""
    archived: bool | None = False
    tag: str = ""
    pinned: bool | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    limit: int = 20
    after: Position | None = None
    prefix: str = ""

    @property
    def terms(self) -> list[str]:
        """The search words, lowercased, at most ``MAX_TERMS`` (see ``search_terms``)."""
        return search_terms(self.text)


@dataclass(frozen=True, kw_only=True)
class ThreadHit:
    """One row of a ``ThreadPage``: the drawer row and, for a search, where it matched.

    ``snippet`` is a short excerpt of the owner's text around the first match (the title's
    when only the title matched), ``""`` when the query had no words.
    """

    meta: ConversationMeta
    snippet: str = ""


@dataclass(frozen=True, kw_only=True)
class ThreadPage:
    """A page of threads: ``hits`` in order, and the position of the next page (``None``:
    this was the last)."""

    hits: list[ThreadHit] = field(default_factory=list)
    next_position: Position | None = None


@runtime_checkable
class SearchesThreads(Protocol):
    """Optional: a store that answers a ``ThreadQuery`` itself (``DefaultConversationStore``:
    full-text over titles and message texts, ranked). Read it with ``find_threads``."""

    async def find_threads(self, query: ThreadQuery, *, request: HttpRequest) -> ThreadPage:
        """The owner's threads matching ``query``; ``CursorError`` for an unreadable ``after``."""
        ...


@runtime_checkable
class ArchivesThreads(Protocol):
    """Optional: a store that keeps an archived flag per thread, shown as
    ``ConversationMeta.archived``. Set it with ``archive_thread``."""

    async def archive(self, thread_id: str, archived: bool, *, request: HttpRequest) -> bool:
        """Set the flag of the owner's ``thread_id``; ``False`` when there is no such thread."""
        ...


def search_terms(text: str) -> list[str]:
    """The words of ``text`` (letters, digits, ``_``), lowercased, at most ``MAX_TERMS``."""
    return [word.lower() for word in _WORD.findall(text)][:MAX_TERMS]


def _starts(terms: Sequence[str], text: str) -> bool:
    words = {word.lower() for word in _WORD.findall(text)}
    return all(any(word.startswith(term) for word in words) for term in terms)


def snippet(text: str, terms: Sequence[str], *, limit: int = SNIPPET_MAX_CHARS) -> str:
    """A ``limit``-character excerpt of ``text`` (whitespace collapsed) around the first word
    one of ``terms`` starts, with an ellipsis where it was cut; ``""`` without a match."""
    text = " ".join(text.split())
    first = None
    for match in _WORD.finditer(text):
        if any(match.group().lower().startswith(term) for term in terms):
            first = match.start()
            break
    if first is None:
        return ""
    start = max(0, first - limit // 3)
    if start:
        space = text.find(" ", start, first)
        start = space + 1 if space != -1 else start
    end = min(len(text), start + limit - 2)
    cut = text[start:end].strip()
    return f"{_ELLIPSIS if start else ''}{cut}{_ELLIPSIS if end < len(text) else ''}"


def _keyset(meta: ConversationMeta) -> tuple[str, str]:
    stamp = meta.updated_at or datetime.min.replace(tzinfo=UTC)
    return stamp.isoformat(), meta.thread_id


def filter_threads(metas: Iterable[ConversationMeta], query: ThreadQuery) -> ThreadPage:
    """Answer ``query`` from drawer rows (newest first): the generic path.

    Searches titles only (each word must start a word of the title), applies the archived flag,
    the pin and tag filters and the date bounds, and pages by ``(updated_at, thread_id)``. Rows
    come back without the ``prefix``.
    """
    terms = query.terms
    after = _read_keyset(query.after)
    kept: list[ThreadHit] = []
    for meta in metas:
        if not meta.thread_id.startswith(query.prefix):
            continue
        if query.archived is not None and meta.archived != query.archived:
            continue
        if query.pinned is not None and meta.pinned != query.pinned:
            continue
        if query.tag and query.tag not in meta.tags:
            continue
        stamp = meta.updated_at
        if stamp is not None and query.updated_after and stamp <= query.updated_after:
            continue
        if stamp is not None and query.updated_before and stamp >= query.updated_before:
            continue
        if terms and not _starts(terms, meta.title):
            continue
        if after is not None and _keyset(meta) >= after:
            continue
        unprefixed = meta.thread_id[len(query.prefix) :]
        hit_meta = meta if not query.prefix else _with_id(meta, unprefixed)
        kept.append(ThreadHit(meta=hit_meta, snippet=snippet(meta.title, terms) if terms else ""))
    kept.sort(key=lambda hit: _keyset(hit.meta), reverse=True)
    page = kept[: query.limit]
    more = len(kept) > query.limit
    last = page[-1].meta if page else None
    position = None
    if more and last is not None:
        position = ["t", _keyset(last)[0], f"{query.prefix}{last.thread_id}"]
    return ThreadPage(hits=page, next_position=position)


def _with_id(meta: ConversationMeta, thread_id: str) -> ConversationMeta:
    return replace(meta, thread_id=thread_id)


def _read_keyset(position: Position | None) -> tuple[str, str] | None:
    if position is None:
        return None
    if (
        len(position) != 3
        or position[0] != "t"
        or not all(isinstance(value, str) for value in position[1:])
    ):
        raise CursorError(f"{position!r} is not a position of the generic thread list.")
    return position[1], position[2]


async def find_threads(
    store: ConversationStore, query: ThreadQuery, *, request: HttpRequest
) -> ThreadPage:
    """Answer ``query`` for the request's owner: the store's ``find_threads`` when it has one
    (``SearchesThreads``), else ``filter_threads`` over its ``list()``.

    Raises ``CursorError`` for a position the store cannot read; whatever the store raises
    otherwise propagates.
    """
    if implements(store, SearchesThreads):
        return await store.find_threads(query, request=request)
    metas = await store.list(request=request, limit=GENERIC_SCAN_LIMIT)
    return filter_threads(metas, query)


async def archive_thread(
    store: object, thread_id: str, archived: bool, *, request: HttpRequest
) -> bool:
    """Set the archived flag of the owner's ``thread_id``; ``False`` when it does not exist.

    Raises ``ArchiveUnsupportedError`` for a store without ``ArchivesThreads``.
    """
    if not implements(store, ArchivesThreads):
        raise ArchiveUnsupportedError(
            f"{store!r} keeps no archived flag: implement archive(thread_id, archived, "
            "request=...) (ArchivesThreads) to archive threads."
        )
    return await store.archive(thread_id, archived, request=request)
