"""Mounts for the sweeper tests: one that sweeps (a short interval), one that never does."""

from __future__ import annotations

from django.urls import path

from tests.agui.urls import stored

sweeping = stored(namespace="sweeping", sweep_interval_seconds=30)
never = stored(namespace="never", sweep_interval_seconds=0)

urlpatterns = [
    path("sweeping/", sweeping.urls),
    path("never/", never.urls),
]
