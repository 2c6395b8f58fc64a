"""The example project's URLs plus ``/crash/``: an AG-UI mount on the example's own stores
whose agent streams a word and then raises (``crash_agent.py``).

The demo's scripted model never fails, and a crash trigger has no place in a demo; this mount
lets the tests watch a crash end a run the way a user would see it.
"""

from __future__ import annotations

from django.urls import path
from example_project.urls import conversation_store, server
from example_project.urls import urlpatterns as example_urlpatterns

from django_pydantic_agent.agui import AGUIServer
from tests.e2e.crash_agent import crashing_agent

crashing = AGUIServer(
    crashing_agent(),
    conversation_store=conversation_store,
    csrf_exempt=False,
    heartbeat_seconds=server.heartbeat_seconds,
    namespace="crash",
)

urlpatterns = [path("crash/", crashing.urls), *example_urlpatterns]
