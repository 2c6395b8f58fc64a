"""The AG-UI transport: ``AGUIServer`` serves a pydantic-ai agent as an SSE event stream.

Import ``AGUIServer`` from here and mount ``server.urls``. The streaming endpoint needs an ASGI
server (uvicorn, daphne, or gunicorn with uvicorn workers); under WSGI the response is buffered.

The modules, one concept each; configuration flows down from ``server`` and nothing imports it
back (``tests/agui/test_layout.py`` holds that):

- ``server``: ``AGUIServer`` takes the stores and the options objects, and composes the routes.
- ``options``: the frozen options objects (``RunOptions``, ``AttachmentOptions``,
  ``MountOptions``), each checking its own values, and the checks they share.
- ``views``: ``AGUIView``, one mounted route: access policy, then a handler per method.
- ``access``: ``AccessPolicy``, the access options (authentication, authorization, CSRF,
  throttle), and hook calling.
- ``owners``: anonymous owners: when a visitor gets a session, when they own nothing.
- ``errors``: the store-refusal rule (403/413/409, or a ``RUN_ERROR`` code) and the one
  ``RUN_ERROR`` redaction.
- ``http``: JSON error bodies, body caps, 400 refusals, database errors as JSON.
- ``ids``: the id alphabet of thread, run and attachment ids.
- ``input``: ``RunAgentInput`` parsing and the checks that refuse it before the agent runs.
- ``inner``: the pydantic-ai agent adapted to one run (``PydanticAIAgent``, the storage agent's
  inner agent): adapter, deps, reasoning filter, token usage.
- ``sse``: SSE frames (with an optional ``id:``), the heartbeat, the streaming response.
- ``run``: the run endpoint (``POST``): stateless on a Null store, else through the storage
  agent and the mount's run manager.
- ``runs``: durable runs: the run manager and records (``RunCoordinator``), reattach and cancel.
- ``threads``, ``attachments``: the thread and attachment routes.
- ``spend``: spend budgets on a mount (``SpendGate``: the harness's ``SpendLimits`` scoped on
  the server, the 429 before a run, ``RUN_ERROR`` ``BUDGET_EXCEEDED`` during one).
- ``usage``: the ``usage/`` route, the caller's usage ledger and budgets.
- ``asgi``: ``BodyLimitMiddleware``, body caps before Django's ASGI handler reads the body,
  and the ASGI lifespan.
- ``drain``: a worker's graceful drain at shutdown (``drain_all``, ``begin_drain_all``, the
  lifespan steps and the signal hook).
"""

from __future__ import annotations

from django_pydantic_agent.agui.access import AccessPolicy
from django_pydantic_agent.agui.asgi import BodyLimitMiddleware, UploadLimitMiddleware
from django_pydantic_agent.agui.attachments import CappedUploadHandler, safe_filename
from django_pydantic_agent.agui.drain import DrainReport, begin_drain_all, drain_all
from django_pydantic_agent.agui.errors import REDACTED_RUN_ERROR
from django_pydantic_agent.agui.inner import AgentDeps
from django_pydantic_agent.agui.options import AttachmentOptions, MountOptions, RunOptions
from django_pydantic_agent.agui.server import AGUIServer, UnsafeCSRFExemptionWarning
from django_pydantic_agent.agui.sse import SSE_HEARTBEAT
from django_pydantic_agent.agui.views import AGUIView

__all__ = [
    "REDACTED_RUN_ERROR",
    "SSE_HEARTBEAT",
    "AGUIServer",
    "AGUIView",
    "AccessPolicy",
    "AgentDeps",
    "AttachmentOptions",
    "BodyLimitMiddleware",
    "CappedUploadHandler",
    "DrainReport",
    "MountOptions",
    "RunOptions",
    "UnsafeCSRFExemptionWarning",
    "UploadLimitMiddleware",
    "begin_drain_all",
    "drain_all",
    "safe_filename",
]
