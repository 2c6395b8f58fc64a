"""What the chat template needs to know about the AG-UI server it talks to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest
from django.middleware.csrf import get_token
from django.urls import NoReverseMatch, resolve, reverse

from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.contrib.chat.strings import catalogue
from django_pydantic_agent.persistence.base import wrapped_stores
from django_pydantic_agent.persistence.branching import KeepsBranches
from django_pydantic_agent.persistence.listing import ArchivesThreads, SearchesThreads
from django_pydantic_agent.persistence.model import ModelConversationStore
from django_pydantic_agent.persistence.scoped import ScopedConversationStore

if TYPE_CHECKING:
    from django_pydantic_agent.agui import AGUIServer


def server_for(namespace: str) -> AGUIServer:
    """The ``AGUIServer`` mounted under URL namespace ``namespace``.

    Raises ``ImproperlyConfigured`` naming the namespace when no server is mounted there.
    """
    from django.core.exceptions import ImproperlyConfigured

    try:
        url = reverse(f"{namespace}:run")
    except NoReverseMatch:
        raise ImproperlyConfigured(
            f"No AGUIServer is mounted under the URL namespace {namespace!r}: add "
            f'path("agent/", server.urls) to your URLconf, or pass the namespace you gave '
            f"AGUIServer(mount=MountOptions(namespace=...))."
        ) from None
    server: AGUIServer = resolve(url).func.agui_server  # type: ignore[attr-defined]
    return server


def _answering_store(store: object) -> object:
    """The layer of ``store`` whose own methods answer for its capabilities.

    A ``ScopedConversationStore`` has ``find_threads``, ``archive``, ``branch_points`` and
    ``activate`` only to forward them to the store it wraps (or to the generic fallback over
    that store), so it can do exactly what its inner store can: it is looked through, along
    ``wrapped_stores``. Any other layer, a wrapper of the project's own included, answers for
    itself, since it is what the server calls.
    """
    answering = store
    for answering in wrapped_stores(store):
        if not isinstance(answering, ScopedConversationStore):
            break
    return answering


def keeps_branches(server: AGUIServer) -> bool:
    """Whether the server's conversation store keeps branches (edit, regenerate, branch navigation).

    A ``ScopedConversationStore`` answers for the store it wraps (``_answering_store``).
    """
    return isinstance(_answering_store(server.conversation_store), KeepsBranches)


def thread_features(store: object) -> dict[str, Any]:
    """What the drawer can offer over ``store``: ``search`` is ``"text"`` (titles and message
    text) or ``"titles"``; ``archive`` whether the store keeps an archived flag.

    A store with ``find_threads`` of its own searches text; a ``ModelConversationStore``
    searches text when it overrides ``_find``, and archives only when it overrides
    ``_archive`` (the defaults search titles and refuse to archive). A
    ``ScopedConversationStore`` searches and archives as the store it wraps does
    (``_answering_store``).
    """
    store = _answering_store(store)
    archive = implements(store, ArchivesThreads)
    if isinstance(store, ModelConversationStore):
        archive = type(store)._archive is not ModelConversationStore._archive
        search = "text" if type(store)._find is not ModelConversationStore._find else "titles"
    else:
        search = "text" if implements(store, SearchesThreads) else "titles"
    return {"search": search, "archive": archive}


def chat_context(request: HttpRequest, server: AGUIServer) -> dict[str, Any]:
    """The ``agent_chat/chat.html`` context for ``server``: its routes, upload limits, strings.

    The upload limits are read from the server, so the page states what the endpoint enforces;
    ``branches`` and ``forks`` say which message operations its store supports, so the page
    shows only those.
    Calling this sets the CSRF cookie: the page sends the token in ``X-CSRFToken``.
    """
    namespace = server.mount.namespace
    uploads = None
    if server.accepts_attachments:
        uploads = {
            "url": reverse(f"{namespace}:attachments"),
            "max_bytes": server.attachments.max_bytes,
            "accept": ",".join(server.attachments.allowed_types),
        }
    return {
        "agent_url": reverse(f"{namespace}:run"),
        "uploads": uploads,
        "branches": server.persists_conversations and keeps_branches(server),
        "forks": server.persists_conversations,
        "stored_history": server.persists_conversations,
        "csrf_token_value": get_token(request),
        "agent_chat_strings": catalogue(),
        "threads": thread_features(server.conversation_store),
    }
