"""ASGI entry point: ``uvicorn example_project.asgi:application`` (from ``example_project/``).

The AG-UI endpoint streams from an async view, so the project must run under an ASGI server;
under WSGI the stream would be buffered until the run ends.

``UploadLimitMiddleware`` wraps everything: Django's ASGI handler reads a whole request body
before any view runs, so without it an oversized upload would be received and spooled to disk
before the upload view could refuse it. The wrapper answers 413 from the declared
``Content-Length``, or cuts a chunked body off at the cap, before Django sees a byte.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

from django_pydantic_agent.agui import UploadLimitMiddleware

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

_django_application = get_asgi_application()


def _build_application() -> UploadLimitMiddleware:
    from django.conf import settings

    application: Any = _django_application
    if getattr(settings, "EXAMPLE_SERVE_STATIC", False):
        from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler

        application = ASGIStaticFilesHandler(application)
    return UploadLimitMiddleware(application)


application = _build_application()
