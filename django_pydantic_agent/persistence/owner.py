"""Who owns a request's data: owner ids for stores and namespaces for harness memory.

Owner resolution is the security boundary of every store. An authenticated user owns
``str(user.pk)``; an anonymous visitor owns ``"anon:<session_key>"`` only where a store opted in
with ``allow_anonymous=True``, and only if the browser already holds a valid session.
``resolve_owner_id`` never creates a session: one created after a streaming response has
started would set a cookie the browser never receives, orphaning whatever was saved under it.
A view that serves anonymous visitors calls ``ensure_session_key`` (or ``aensure_session_key``)
before it starts its response. ``memory_namespace`` is the exception the seed asks for: it
creates the visitor's session itself, so it too belongs before the response starts.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import TYPE_CHECKING, Any, Final

from asgiref.sync import sync_to_async

from django_pydantic_agent.persistence.errors import AnonymousOperationError

if TYPE_CHECKING:
    from django.http import HttpRequest

__all__ = [
    "ANONYMOUS_MEMORY_NAMESPACE",
    "OWNER_UUID_NAMESPACE",
    "AnonymousOperationError",
    "aensure_session_key",
    "aresolve_owner_uuid",
    "ensure_session_key",
    "memory_namespace",
    "memory_namespace_for_user",
    "owner_user_uuid",
    "resolve_owner_id",
]

#: The namespace every unauthenticated caller shares under ``memory_namespace_for_user``.
ANONYMOUS_MEMORY_NAMESPACE = "anon"

# The harness's own path-segment rule (pydantic_ai_harness.memory), copied rather than
# imported because the harness is an optional dependency; a test checks the two agree.
_SEGMENT_RE = re.compile(r"[A-Za-z0-9_.-]{1,200}")
_DIGEST_HEX_DIGITS = 40


def _authenticated_pk(user: Any) -> str | None:
    """Return ``str(user.pk)`` for an authenticated user, else ``None``."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return str(user.pk)


def _valid_session_key(request: HttpRequest) -> str | None:
    """Return the request's session key if the session really exists, else ``None``.

    The session is loaded first, which drops a cookie value naming no stored session: a
    forged or expired key must never become an owner. May run a query; call off the event loop
    unless the session was already loaded.
    """
    session = getattr(request, "session", None)
    if session is None:
        return None
    session.keys()  # force a load; an unknown key resets session_key to None
    key = session.session_key
    return key if key else None


def resolve_owner_id(request: HttpRequest, *, allow_anonymous: bool) -> str:
    """Return the owner id a store must scope ``request``'s data to.

    Returns ``str(request.user.pk)`` for an authenticated user, or ``"anon:<session_key>"`` for
    an anonymous request when ``allow_anonymous`` is true and the request carries a valid
    session. Never creates a session.

    Raises ``AnonymousOperationError`` for an anonymous request when ``allow_anonymous`` is
    false, or when it is true but there is no valid session (call ``ensure_session_key`` before
    the response starts). Synchronous and possibly querying: call it off the event loop.
    """
    pk = _authenticated_pk(getattr(request, "user", None))
    if pk is not None:
        return pk
    if not allow_anonymous:
        raise AnonymousOperationError(
            "This store refuses anonymous requests: authenticate the user first, or build "
            "the store with allow_anonymous=True to key anonymous visitors to their session."
        )
    key = _valid_session_key(request)
    if key is None:
        raise AnonymousOperationError(
            "This anonymous request has no session yet, and a store never creates one "
            "(its cookie could arrive after the response started): call "
            "ensure_session_key(request) in the view before responding, with "
            "SessionMiddleware installed."
        )
    return f"anon:{key}"


#: The uuid5 namespace of ``owner_user_uuid``: changing it would orphan every stored chat.
OWNER_UUID_NAMESPACE: Final[uuid.UUID] = uuid.uuid5(
    uuid.NAMESPACE_URL, "django-pydantic-agent:owner"
)


def owner_user_uuid(owner_id: str) -> uuid.UUID:
    """The chat-history ``user_uuid`` of a store owner: ``uuid5(OWNER_UUID_NAMESPACE, owner_id)``.

    The one mapping every store uses, so the run path, a store's ``repositories()`` and the
    Memory Service stores agree on who a chat belongs to. Deterministic and never raises;
    ``owner_id`` is what ``resolve_owner_id`` returned (``"42"`` or ``"anon:<session_key>"``).
    """
    return uuid.uuid5(OWNER_UUID_NAMESPACE, owner_id)


async def aresolve_owner_uuid(request: HttpRequest, *, allow_anonymous: bool) -> uuid.UUID:
    """``owner_user_uuid(resolve_owner_id(request, ...))`` in one worker-thread hop.

    Raises ``AnonymousOperationError`` exactly where ``resolve_owner_id`` does.
    """
    owner_id = await sync_to_async(resolve_owner_id)(request, allow_anonymous=allow_anonymous)
    return owner_user_uuid(owner_id)


def ensure_session_key(request: HttpRequest) -> str:
    """Make sure ``request`` has a stored session and return its key.

    Call it in a view *before* the response starts (certainly before a streaming response is
    returned), so the session cookie goes out with the headers. Loads the session, and creates
    and saves one when the browser has none (or a forged or expired one). Synchronous and
    querying; use ``aensure_session_key`` from async code.

    Raises ``ImproperlyConfigured`` when the request has no session (``SessionMiddleware``
    missing).
    """
    from django.core.exceptions import ImproperlyConfigured

    session = getattr(request, "session", None)
    if session is None:
        raise ImproperlyConfigured(
            "The request has no session, so an anonymous visitor cannot own anything: add "
            "'django.contrib.sessions.middleware.SessionMiddleware' to MIDDLEWARE."
        )
    key = _valid_session_key(request)
    if key is None:
        session.create()
        if not session.session_key:  # e.g. signed cookies: the key exists once saved
            session.save()
        key = session.session_key
    if not key:  # pragma: no cover - every session backend sets a key in create()
        raise ImproperlyConfigured(
            f"The session backend {type(session).__module__!r} produced no session key."
        )
    return str(key)


async def aensure_session_key(request: HttpRequest) -> str:
    """Async twin of ``ensure_session_key``: one worker-thread hop, off the event loop."""
    return await sync_to_async(ensure_session_key)(request)


def _segment(prefix: str, identifier: str) -> str:
    """``prefix + identifier`` if it is a valid harness path segment, else a digest of it."""
    candidate = f"{prefix}{identifier}"
    if _SEGMENT_RE.fullmatch(candidate) and ".." not in candidate and candidate != ".":
        return candidate
    digest = hashlib.sha256(identifier.encode("utf-8")).hexdigest()
    return f"{prefix}{digest[:_DIGEST_HEX_DIGITS]}"


def memory_namespace_for_user(user: Any) -> str:
    """The harness ``Memory`` namespace for the acting user (no request needed).

    Returns ``"u-<pk>"`` when that is a valid harness path segment (``[A-Za-z0-9_.-]``, 1-200
    characters, not ``.``, no ``..``), otherwise ``"u-"`` plus the first 40 hex digits of the
    pk's SHA-256. Every unauthenticated or missing user shares ``"anon"``: with no request
    there is no session to tell anonymous callers apart. Never raises.
    """
    pk = _authenticated_pk(user)
    if pk is None:
        return ANONYMOUS_MEMORY_NAMESPACE
    return _segment("u-", pk)


def memory_namespace(request: HttpRequest) -> str:
    """The harness ``Memory`` namespace for ``request``: per user, or per anonymous session.

    An authenticated user gets the same value as ``memory_namespace_for_user``; an anonymous
    visitor gets ``"anon-<session_key>"`` (digested if unsafe), so anonymous visitors never
    share memory. Deliberately not ``resolve_owner_id``: its ``anon:`` colon is not a valid
    harness path segment. The result is always a valid segment.

    Unlike ``resolve_owner_id``, it creates the session of an anonymous visitor who has none
    (as ``ensure_session_key`` does, a database write): call it, or ``ensure_session_key``,
    before the response starts, so the new cookie reaches the browser. Synchronous and
    possibly querying: call it off the event loop. Raises ``ImproperlyConfigured`` for an
    anonymous request without ``request.session`` (``SessionMiddleware`` missing).
    """
    pk = _authenticated_pk(getattr(request, "user", None))
    if pk is not None:
        return _segment("u-", pk)
    return _segment("anon-", ensure_session_key(request))
