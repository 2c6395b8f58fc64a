"""The example project's URLs plus ``/crash/``: an AG-UI mount on the example's own stores
whose agent streams a word and then raises (``crash_agent.py``).

The demo's scripted model never fails, and a crash trigger has no place in a demo; this mount
lets the tests watch a crash end a run the way a user would see it.
"""

from __future__ import annotations

from django.urls import path
from example_project.urls import conversation_store, server
from example_project.urls import urlpatterns as example_urlpatterns

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions, RunOptions
from tests.e2e.crash_agent import crashing_agent

crashing = AGUIServer(
    crashing_agent(),
    conversation_store=conversation_store,
    access=AccessPolicy(csrf_exempt=False),
    runs=RunOptions(heartbeat_seconds=server.runs.heartbeat_seconds),
    mount=MountOptions(namespace="crash"),
)

urlpatterns = [path("crash/", crashing.urls), *example_urlpatterns]
