"""What the chat template needs to know about the AG-UI server it talks to."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest
from django.middleware.csrf import get_token
from django.urls import NoReverseMatch, resolve, reverse

from django_pydantic_agent.contrib.chat.strings import catalogue
from django_pydantic_agent.persistence.features import store_features

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


def keeps_branches(server: AGUIServer) -> bool:
    """Whether the server's conversation store keeps branches (edit, regenerate, branch
    navigation), as its features declare (``persistence.features``)."""
    return store_features(server.conversation_store).branches


def thread_features(store: object) -> dict[str, Any]:
    """What the drawer can offer over ``store``, as its features declare: ``search`` is
    ``"text"`` (titles and message text) or ``"titles"``; ``archive`` whether the store keeps
    an archived flag; ``feedback`` whether it keeps ratings of messages (the thumbs). A
    ``ScopedConversationStore`` declares the features of the store it wraps."""
    features = store_features(store)
    return {
        "search": "text" if features.search else "titles",
        "archive": features.archive,
        "feedback": features.feedback,
    }


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
