"""The AG-UI transport: ``AGUIServer`` serves a pydantic-ai agent as an SSE event stream.

Import ``AGUIServer`` from here and mount ``server.urls``. The streaming endpoint needs an ASGI
server (uvicorn, daphne, or gunicorn with uvicorn workers); under WSGI the response is buffered.
"""

from __future__ import annotations

from django_pydantic_agent.agui.access import AGUIView
from django_pydantic_agent.agui.asgi import BodyLimitMiddleware, UploadLimitMiddleware
from django_pydantic_agent.agui.attachments import CappedUploadHandler, safe_filename
from django_pydantic_agent.agui.run import REDACTED_RUN_ERROR, SSE_HEARTBEAT
from django_pydantic_agent.agui.server import AgentDeps, AGUIServer, UnsafeCSRFExemptionWarning

__all__ = [
    "REDACTED_RUN_ERROR",
    "SSE_HEARTBEAT",
    "AGUIServer",
    "AGUIView",
    "AgentDeps",
    "BodyLimitMiddleware",
    "CappedUploadHandler",
    "UnsafeCSRFExemptionWarning",
    "UploadLimitMiddleware",
    "safe_filename",
]
