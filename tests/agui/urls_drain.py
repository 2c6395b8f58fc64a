"""Mounts for the drain tests: a durable one whose runs get 5 s to finish, one that hands its
runs over after 0.2 s, and a stateless one."""

from __future__ import annotations

from django.urls import path

from django_pydantic_agent.agui import AGUIServer
from tests.agui.agents import gated_agent
from tests.agui.urls import stored

patient = stored(gated_agent(), namespace="patient", drain_seconds=5, sweep_interval_seconds=0)
hasty = stored(gated_agent(), namespace="hasty", drain_seconds=0.2, sweep_interval_seconds=0)
stateless = AGUIServer(gated_agent(), csrf_exempt=True, namespace="stateless-drain")

urlpatterns = [
    path("patient/", patient.urls),
    path("hasty/", hasty.urls),
    path("stateless/", stateless.urls),
]
