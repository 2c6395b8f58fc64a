"""Mounts for the drain tests: a durable one whose runs get 5 s to finish, one that hands its
runs over after 0.2 s, and a stateless one."""

from __future__ import annotations

from django.urls import path

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions, RunOptions
from tests.agui.agents import gated_agent
from tests.agui.urls import stored

patient = stored(
    gated_agent(),
    mount=MountOptions(namespace="patient"),
    runs=RunOptions(drain_seconds=5, sweep_interval_seconds=0),
)
hasty = stored(
    gated_agent(),
    mount=MountOptions(namespace="hasty"),
    runs=RunOptions(drain_seconds=0.2, sweep_interval_seconds=0),
)
stateless = AGUIServer(
    gated_agent(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="stateless-drain"),
)

urlpatterns = [
    path("patient/", patient.urls),
    path("hasty/", hasty.urls),
    path("stateless/", stateless.urls),
]
