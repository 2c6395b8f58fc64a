"""The stores behind the example's AG-UI server, chosen by ``AGENT_STORE``.

``default``
    ``DefaultConversationStore`` and ``DefaultAttachmentStore``: contrib.store's tables in the
    project's database, with the per-user quotas of ``settings.py``.
``memory-service``
    ``MemoryServiceConversationStore`` and ``MemoryServiceAttachmentStore`` on one
    ``DRMemoryServiceClient`` per process, in the space ``AGENT_MEMORY_SPACE``. With
    ``DATAROBOT_ENDPOINT`` set, the client talks to that endpoint with ``DATAROBOT_API_TOKEN``;
    unset, it talks to the Memory Service emulator mounted in this very project
    (``/api/v2/memory/``), in process: its requests go through the project's own ASGI
    application, so they need no port, no host name and no second server.

The Memory Service stores are imported only when they are asked for.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import TYPE_CHECKING, Any

import httpx
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from django_pydantic_agent.memory_service import DRMemoryServiceClient

if TYPE_CHECKING:
    from django_pydantic_agent.persistence import AttachmentStore, ConversationStore

__all__ = [
    "MEMORY_SERVICE_STORES_MODULE",
    "STORE_CHOICES",
    "aclose_memory_service_client",
    "build_stores",
    "memory_service_client",
]

#: The values ``AGENT_STORE`` may take.
STORE_CHOICES = ("default", "memory-service")
#: Where the Memory Service stores live (imported on demand).
MEMORY_SERVICE_STORES_MODULE = "django_pydantic_agent.persistence.memory_service"

#: The emulator's mount, under the in-process endpoint.
_EMULATOR_ENDPOINT_PATH = "/api/v2"
_TIMEOUT_SECONDS = 30.0

_client: DRMemoryServiceClient | None = None
_pool: httpx.AsyncClient | None = None  # the in-process pool, owned here (the client leaves it)


def _setting(name: str) -> Any:
    return getattr(settings, name)


def _emulator_host() -> str:
    """A host name the project answers to, for requests it sends to itself."""
    for host in settings.ALLOWED_HOSTS:
        if host and host != "*":
            return host.lstrip(".")
    return "localhost"


def memory_service_client() -> DRMemoryServiceClient:
    """The process's Memory Service client, made on first use (one pool per process).

    Raises ``ImproperlyConfigured`` when ``DATAROBOT_ENDPOINT`` is set but the client refuses
    it or the token (``DATAROBOT_API_TOKEN``).
    """
    global _client, _pool
    if _client is not None:
        return _client
    endpoint: str = _setting("AGENT_MEMORY_SERVICE_ENDPOINT")
    token: str = _setting("AGENT_MEMORY_SERVICE_TOKEN")
    if endpoint:
        try:
            _client = DRMemoryServiceClient(endpoint, token or None, timeout=_TIMEOUT_SECONDS)
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"AGENT_STORE='memory-service' with DATAROBOT_ENDPOINT={endpoint!r}: {exc}"
            ) from exc
        return _client
    # The emulator of this project, reached through the project's own ASGI application.
    from django.core.handlers.asgi import ASGIHandler

    _pool = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=_without_early_disconnect(ASGIHandler())),
        timeout=_TIMEOUT_SECONDS,
    )
    _client = DRMemoryServiceClient(
        f"http://{_emulator_host()}{_EMULATOR_ENDPOINT_PATH}",
        token or "example-project",
        http_client=_pool,
    )
    return _client


def _without_early_disconnect(app: Any) -> Any:
    """Wrap ``app`` so that, once the request body is read, ``receive`` waits to be cancelled.

    httpx's ASGITransport answers ``http.disconnect`` as soon as the response is complete.
    Django's handler listens for it in a task of its own; when both finish in the same loop
    turn, that task's ``RequestAborted`` is never retrieved and asyncio logs it as a traceback.
    Waiting instead lets Django cancel the listener, as it does for a real server.
    """

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        body_read = False

        async def quiet_receive() -> Any:
            nonlocal body_read
            if body_read:
                await asyncio.Event().wait()  # cancelled by Django once the response is sent
            message = await receive()
            if message.get("type") == "http.request" and not message.get("more_body"):
                body_read = True
            return message

        await app(scope, quiet_receive, send)

    return wrapped


async def aclose_memory_service_client() -> None:
    """Close the process's Memory Service client, if one was made (at ASGI shutdown)."""
    global _client, _pool
    client, pool, _client, _pool = _client, _pool, None, None
    if client is not None:
        await client.aclose()
    if pool is not None:
        await pool.aclose()


def _memory_service_stores() -> Any:
    try:
        return importlib.import_module(MEMORY_SERVICE_STORES_MODULE)
    except ImportError as exc:
        raise ImproperlyConfigured(
            "AGENT_STORE='memory-service' needs MemoryServiceConversationStore and "
            f"MemoryServiceAttachmentStore from {MEMORY_SERVICE_STORES_MODULE}, which this "
            f"installation of django-pydantic-agent lacks ({exc}); install a version that has "
            "them, or set AGENT_STORE=default."
        ) from exc


def build_stores(kind: str | None = None) -> tuple[ConversationStore, AttachmentStore]:
    """The conversation and attachment stores for ``kind`` (default: ``AGENT_STORE``).

    Raises ``ImproperlyConfigured`` for an unknown kind or a Memory Service that cannot be set up.
    """
    kind = _setting("AGENT_STORE") if kind is None else kind
    if kind == "default":
        from django_pydantic_agent.contrib.store.stores import (
            DefaultAttachmentStore,
            DefaultConversationStore,
        )

        # Each user keeps at most this many threads, files and bytes; over that, 413.
        return (
            DefaultConversationStore(max_threads_per_owner=_setting("AGENT_MAX_THREADS")),
            DefaultAttachmentStore(
                max_files_per_owner=_setting("AGENT_MAX_FILES"),
                max_bytes_per_owner=_setting("AGENT_MAX_UPLOAD_BYTES"),
            ),
        )
    if kind == "memory-service":
        module = _memory_service_stores()
        client = memory_service_client()
        space: str = _setting("AGENT_MEMORY_SPACE")
        return (
            module.MemoryServiceConversationStore(client, space),
            module.MemoryServiceAttachmentStore(
                client, space, max_bytes=_setting("AGENT_ATTACHMENT_MAX_BYTES")
            ),
        )
    raise ImproperlyConfigured(
        f"AGENT_STORE={kind!r} is not a store the example knows; use one of "
        f"{', '.join(repr(choice) for choice in STORE_CHOICES)}."
    )
