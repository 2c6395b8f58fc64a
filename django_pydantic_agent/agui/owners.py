"""Request owners: who a request acts for on a store, and the anonymous visitor's session.

``request_owner`` resolves the store owner of a request once per request, and
``owner_repositories`` hands out that owner's chat-history repositories on the store (its own,
or the generic adapter of ``persistence.repositories``).

Stores key an anonymous visitor's data to their session and never create one themselves (a cookie
set after a stream started would never arrive). So a route that creates data calls
``ensure_anonymous_session`` before its first write, and a route that only reads asks
``owns_nothing`` first, so a visitor without a session is answered empty (or 404) without a
session row being created for them.
"""

from __future__ import annotations

import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest

from django_pydantic_agent.persistence import (
    aensure_session_key,
    owner_user_uuid,
    repositories_for,
    repository_user_uuid,
    resolve_owner_id,
    serves_anonymous,
)

__all__ = [
    "ensure_anonymous_session",
    "owner_repositories",
    "owner_request",
    "owns_nothing",
    "request_owner",
    "serves_anonymous",
]

_OWNER_ATTR = "_django_pydantic_agent_owner"
"""Where ``request_owner`` keeps a request's resolved owner (by ``allow_anonymous``)."""


async def request_owner(request: HttpRequest, store: object) -> str:
    """The owner ``store`` keys ``request``'s data to (its ``StoreError`` if it refuses them).

    Resolved once per request (off the event loop: it may read the session).
    """
    allow_anonymous = serves_anonymous(store)
    known: dict[bool, str] = request.__dict__.setdefault(_OWNER_ATTR, {})
    if allow_anonymous not in known:
        known[allow_anonymous] = await sync_to_async(resolve_owner_id)(
            request, allow_anonymous=allow_anonymous
        )
    return known[allow_anonymous]


async def owner_repositories(request: HttpRequest, store: Any) -> tuple[Any, Any, uuid.UUID]:
    """``(chat_repo, message_repo, user_uuid)`` of ``request``'s owner on ``store``.

    ``user_uuid`` is the one the chat repository names, else the owner's. Raises the store's
    ``StoreError`` (an anonymous caller it refuses, for example).
    """
    chat_repo, message_repo = await repositories_for(store, request=request)
    user_uuid = repository_user_uuid(chat_repo)
    if user_uuid is None:
        user_uuid = owner_user_uuid(await request_owner(request, store))
    return chat_repo, message_repo, user_uuid


def _owner_request_sync(owner_id: str) -> HttpRequest:
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import AnonymousUser

    request = HttpRequest()
    request.method = "POST"
    if owner_id.startswith("anon:"):
        engine = import_module(settings.SESSION_ENGINE)
        request.session = engine.SessionStore(session_key=owner_id.removeprefix("anon:"))
        request.user = AnonymousUser()
    else:
        request.user = get_user_model()._default_manager.get(pk=owner_id)
    return request


async def owner_request(owner_id: str) -> HttpRequest:
    """A request acting for store owner ``owner_id`` (``resolve_owner_id``'s value), for a run
    resumed on another worker, which has no request of its own: its ``user`` (or, for
    ``"anon:<key>"``, its ``session``) is the owner's, and nothing else (no headers, no
    body). Raises the user model's ``DoesNotExist`` for a user that is gone."""
    return await sync_to_async(_owner_request_sync)(owner_id)


async def ensure_anonymous_session(request: HttpRequest, store: object) -> None:
    """Give an anonymous caller a session before ``store`` writes something for them.

    Called only before writes that create data (a run, an upload), and only acts when
    ``store`` serves anonymous callers, so refused or merely reading visitors never cost a
    session row. Without ``SessionMiddleware`` this does nothing, and the store refuses the
    visitor (403).
    """
    if (
        not request.user.is_authenticated
        and hasattr(request, "session")
        and serves_anonymous(store)
    ):
        await aensure_session_key(request)


async def owns_nothing(request: HttpRequest, store: object) -> bool:
    """Whether ``request`` is an anonymous caller of ``store`` without a valid session.

    Such a caller can own nothing in a store that serves visitors, so reads answer empty
    (or 404) without asking the store, and without creating a session. For a store that
    refuses visitors this is ``False``: the store is asked, and its refusal is a 403.
    """
    if request.user.is_authenticated or not serves_anonymous(store):
        return False
    session = getattr(request, "session", None)
    if session is None or session.session_key is None:
        return True
    # Loading drops a cookie naming no stored session (forged or expired).
    await sync_to_async(session.keys)()
    return not session.session_key
