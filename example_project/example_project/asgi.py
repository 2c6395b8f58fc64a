"""ASGI entry point: ``uvicorn example_project.asgi:application`` (from ``example_project/``).

The AG-UI endpoint streams from an async view, so the project must run under an ASGI server;
under WSGI the stream would be buffered until the run ends.

``UploadLimitMiddleware`` wraps everything: Django's ASGI handler reads a whole request body
before any view runs, so without it an oversized upload would be received and spooled to disk
before the upload view could refuse it. The wrapper answers 413 from the declared
``Content-Length``, or cuts a chunked body off at the cap, before Django sees a byte.

Outermost, ``LifespanShutdown`` answers the ASGI lifespan protocol (which Django's handler
does not speak), as ``make demo`` runs it (``uvicorn --lifespan on``): the AG-UI server's run
sweeper starts with the process (instead of at the first request); a shutdown (``SIGTERM``,
Ctrl+C) drains the worker (new runs get a 503, running ones get ``AGENT_DRAIN_SECONDS`` to
finish, the rest are handed over to another worker), and then the process's Memory Service
client (``AGENT_STORE=memory-service``) is closed.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

from django_pydantic_agent.agui import UploadLimitMiddleware
from django_pydantic_agent.agui.drain import lifespan_shutdown, lifespan_startup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

_django_application = get_asgi_application()


class LifespanShutdown:
    """Answer ``lifespan`` scopes; pass every other scope to ``app``.

    At startup the AG-UI server's sweeper starts (a sweep of runs whose worker died, then one
    every ``AGENT_SWEEP_SECONDS``) and the drain's signal hook is installed; at shutdown the
    worker drains (``django_pydantic_agent.agui.drain``), the sweeper stops, and the Memory
    Service client, if one was made, is closed.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await lifespan_startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                from chat.stores import aclose_memory_service_client

                await lifespan_shutdown()
                await aclose_memory_service_client()
                await send({"type": "lifespan.shutdown.complete"})
                return


def _build_application() -> LifespanShutdown:
    from django.conf import settings

    application: Any = _django_application
    if getattr(settings, "EXAMPLE_SERVE_STATIC", False):
        from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

        application = ASGIStaticFilesHandler(application)
    return LifespanShutdown(UploadLimitMiddleware(application, lifespan=False))


application = _build_application()
