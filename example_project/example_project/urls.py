"""URLs of the example project.

``/``                 the chat page (log in first)
``/accounts/login/``  Django's login view; ``/accounts/logout/`` (POST) logs out
``/agent/``           the AG-UI server: ``POST`` runs, ``threads/`` for the drawer and
                      ``attachments/`` for uploads
``/api/v2/memory/``   the Memory Service emulator: the stores' backing with
                      ``AGENT_STORE=memory-service`` (and any client's, offline)
``/admin/``           Django's admin
"""

from __future__ import annotations

from typing import Any

from chat.agent import build_agent
from chat.stores import build_stores
from chat.throttle import per_user_per_minute
from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, AttachmentOptions, RunOptions
from django_pydantic_agent.contrib.chat.views import ChatView
from django_pydantic_agent.contrib.memory_service_emulator.urls import memory_service_urls


def _setting(name: str) -> Any:
    """One of the example's own settings from ``settings.py`` (unknown to the type checker)."""
    return getattr(settings, name)


# The agent and its server are built once, at import; each request gets its own run.
agent = build_agent(_setting("AGENT_MODEL"), word_delay=_setting("DEMO_WORD_DELAY"))
# Threads and uploads are kept per user (AGENT_STORE): in contrib.store's tables by default,
# or on the Memory Service. Reload the page, log in from another browser: they are still there.
conversation_store, attachment_store = build_stores()
server = AGUIServer(
    agent,
    conversation_store=conversation_store,
    attachment_store=attachment_store,
    access=AccessPolicy(
        # A fixed window per user, in Django's cache; over it, 429 with Retry-After.
        throttle=per_user_per_minute(_setting("AGENT_REQUESTS_PER_MINUTE")),
        # The page authenticates with the session cookie, so CSRF is enforced: it sends the
        # token in the X-CSRFToken header.
        csrf_exempt=False,
    ),
    attachments=AttachmentOptions(
        max_bytes=_setting("AGENT_ATTACHMENT_MAX_BYTES"),
        allowed_types=_setting("AGENT_ATTACHMENT_TYPES"),
    ),
    runs=RunOptions(
        heartbeat_seconds=_setting("AGENT_HEARTBEAT_SECONDS"),
        # A run whose worker died (no heartbeat within the lease) is swept as errored: by the
        # first worker to take the sweep lease in the cache, at start-up and every
        # AGENT_SWEEP_SECONDS.
        run_heartbeat_seconds=_setting("AGENT_RUN_HEARTBEAT_SECONDS"),
        run_lease_seconds=_setting("AGENT_RUN_LEASE_SECONDS"),
        sweep_interval_seconds=_setting("AGENT_SWEEP_SECONDS"),
        # At shutdown (SIGTERM under uvicorn --lifespan on), runs get this long to finish; the
        # rest are handed over to another worker.
        drain_seconds=_setting("AGENT_DRAIN_SECONDS"),
        # A run whose worker drained or died is resumed by another worker
        # (AGENT_ON_WORKER_LOSS).
        on_worker_loss=_setting("AGENT_ON_WORKER_LOSS"),
    ),
)

urlpatterns = [
    # contrib.chat's page for this server, with the example's own account menu and greeting.
    path(
        "",
        ChatView.as_view(
            server=server,
            title="Agent demo",
            template_name="chat/index.html",
            header_template="chat/account.html",
            empty_template="chat/empty.html",
        ),
        name="chat",
    ),
    path("accounts/", include("django.contrib.auth.urls")),
    path("agent/", server.urls),
    path("admin/", admin.site.urls),
    # The Memory Service emulator: point DATAROBOT_ENDPOINT at http://127.0.0.1:8000/api/v2.
    *memory_service_urls("api/v2/memory/"),
]
