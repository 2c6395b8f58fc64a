"""``GET threads/``'s query string read into a ``ThreadQuery``, and its signed page cursors.

``?q=`` (search words), ``?archived=0|1|all``, ``?tag=`` (one tag, normalised),
``?updated_after=`` / ``?updated_before=`` (ISO 8601), ``?limit=`` and ``?cursor=`` (the
``nextCursor`` of the previous page). A cursor is the store's page position signed with
``SECRET_KEY`` together with a digest of the filters it was made for: a cursor that was
altered, made by another server, or sent with other filters is refused (400), so a store only
ever reads positions it produced.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core import signing
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_pydantic_agent.persistence.listing import Position, ThreadQuery
from django_pydantic_agent.persistence.tags import MAX_TAG_CHARS, normalize_tag

if TYPE_CHECKING:
    from django.http import QueryDict

__all__ = ["BAD_CURSOR", "MAX_QUERY_LENGTH", "QueryError", "read_query", "sign_cursor"]

#: The longest ``?q=`` accepted, in characters.
MAX_QUERY_LENGTH = 200
#: The 400 message of a cursor that is not one this server gave for these filters.
BAD_CURSOR = (
    "The cursor is not valid: pass the nextCursor of the previous page unchanged, with the "
    "same q, archived, tag, updated_after and updated_before; omit it for the first page."
)
_SALT = "django_pydantic_agent.agui.threads.cursor"
_LONGEST_CURSOR = 1000
_ARCHIVED = {"0": False, "false": False, "1": True, "true": True, "all": None}


class QueryError(ValueError):
    """A query parameter that cannot be read; the message is the 400's sentence."""


@dataclass(frozen=True)
class _Filters:
    text: str
    archived: bool | None
    after: datetime | None
    before: datetime | None
    tag: str = ""

    def digest(self) -> str:
        key = [
            self.text,
            self.archived,
            self.after.isoformat() if self.after else None,
            self.before.isoformat() if self.before else None,
            *([self.tag] if self.tag else []),
        ]
        return hashlib.blake2b(json.dumps(key).encode(), digest_size=8).hexdigest()


def _instant(params: QueryDict, name: str) -> datetime | None:
    raw = params.get(name)
    if raw is None:
        return None
    try:
        value = parse_datetime(raw.strip())
    except ValueError:
        value = None
    if value is None:
        raise QueryError(
            f"{name} must be an ISO 8601 date and time, such as 2026-12-01T09:30:00Z; "
            "omit it to keep every thread."
        )
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_current_timezone())
    return value


def _filters(params: QueryDict) -> _Filters:
    text = params.get("q", "")
    if len(text) > MAX_QUERY_LENGTH:
        raise QueryError(
            f"q is {len(text)} characters long; the limit is {MAX_QUERY_LENGTH}. Search for "
            "fewer words."
        )
    if not text.isprintable():
        raise QueryError("q contains control characters; send plain words.")
    raw = params.get("archived", "0").strip().lower()
    if raw not in _ARCHIVED:
        raise QueryError(
            "archived must be 0 (threads not archived, the default), 1 (archived threads) or all."
        )
    after, before = _instant(params, "updated_after"), _instant(params, "updated_before")
    if after is not None and before is not None and after >= before:
        raise QueryError("updated_after must be earlier than updated_before.")
    tag = normalize_tag(params.get("tag", ""))
    if len(tag) > MAX_TAG_CHARS or not tag.isprintable():
        raise QueryError(f"tag must be plain text of at most {MAX_TAG_CHARS} characters.")
    return _Filters(" ".join(text.split()), _ARCHIVED[raw], after, before, tag)


def _limit(params: QueryDict, cap: int) -> int:
    raw = params.get("limit")
    if raw is None:
        return cap
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if limit < 1:
        raise QueryError(f"limit must be a positive integer (at most {cap}); omit it for {cap}.")
    return min(limit, cap)


def _position(raw: str | None, filters: _Filters) -> Position | None:
    if raw is None:
        return None
    if not raw or len(raw) > _LONGEST_CURSOR:
        raise QueryError(BAD_CURSOR)
    try:
        payload: Any = signing.loads(raw, salt=_SALT)
    except (signing.BadSignature, ValueError, UnicodeError):
        raise QueryError(BAD_CURSOR) from None
    if (
        not isinstance(payload, dict)
        or payload.get("f") != filters.digest()
        or not isinstance(payload.get("p"), list)
    ):
        raise QueryError(BAD_CURSOR)
    position: Position = payload["p"]
    return position


def read_query(params: QueryDict, *, cap: int) -> ThreadQuery:
    """The ``ThreadQuery`` of a ``GET threads/`` query string; ``QueryError`` for a bad one.

    ``cap`` is the default and largest ``limit``.
    """
    filters = _filters(params)
    return ThreadQuery(
        text=filters.text,
        archived=filters.archived,
        tag=filters.tag,
        updated_after=filters.after,
        updated_before=filters.before,
        limit=_limit(params, cap),
        after=_position(params.get("cursor"), filters),
    )


def sign_cursor(position: Position | None, query: ThreadQuery) -> str | None:
    """The ``nextCursor`` for ``position`` under ``query``'s filters (``None`` stays ``None``)."""
    if position is None:
        return None
    filters = _Filters(
        query.text, query.archived, query.updated_after, query.updated_before, query.tag
    )
    return signing.dumps({"p": position, "f": filters.digest()}, salt=_SALT, compress=True)
