"""Mounts for the run-record tests: one that sweeps, one that never does, and one whose run
records are finished only when a test lets them."""

from __future__ import annotations

import asyncio
from typing import Any

from django.urls import path

from django_pydantic_agent.agui import MountOptions, RunOptions
from django_pydantic_agent.contrib.store.runs import DefaultRunStore
from django_pydantic_agent.persistence.runs import RunRecord
from tests.agui.urls import stored


class HeldFinishRunStore(DefaultRunStore):
    """The ORM run store, whose ``finish`` waits until ``release`` is set (a slow database)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.held = asyncio.Event()

    async def finish(self, **kwargs: Any) -> RunRecord | None:
        self.held.set()
        await self.release.wait()
        return await super().finish(**kwargs)


held_runs = HeldFinishRunStore()

sweeping = stored(
    mount=MountOptions(namespace="sweeping"), runs=RunOptions(sweep_interval_seconds=30)
)
never = stored(mount=MountOptions(namespace="never"), runs=RunOptions(sweep_interval_seconds=0))
slow_finish = stored(
    mount=MountOptions(namespace="slow-finish"),
    run_store=held_runs,
    runs=RunOptions(sweep_interval_seconds=0),
)

urlpatterns = [
    path("sweeping/", sweeping.urls),
    path("never/", never.urls),
    path("slow-finish/", slow_finish.urls),
]
