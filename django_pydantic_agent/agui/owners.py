"""Anonymous owners: when a visitor gets a session, and when they can own nothing.

Stores key an anonymous visitor's data to their session and never create one themselves (a cookie
set after a stream started would never arrive). So a route that creates data calls
``ensure_anonymous_session`` before its first write, and a route that only reads asks
``owns_nothing`` first, so a visitor without a session is answered empty (or 404) without a
session row being created for them.
"""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.http import HttpRequest

from django_pydantic_agent.persistence import aensure_session_key, serves_anonymous

__all__ = ["ensure_anonymous_session", "owns_nothing", "serves_anonymous"]


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
