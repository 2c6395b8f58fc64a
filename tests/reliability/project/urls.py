"""The AG-UI servers of the reliability site, on ``DefaultConversationStore``.

``agent/``         the defaults: ``on_disconnect="continue"``, ``concurrent_runs="reject"``
``cancel-agent/``  ``on_disconnect="cancel"``: a client that goes away cancels its run
``spend-agent/``   (with the harness extra) a per-user daily budget of ``SPEND_BUDGET`` on
                   ``DefaultSpendStore``, each model response priced ``SPEND_PRICE``

Callers authenticate with an ``X-User: <username>`` header (the users ``prepare.py`` made).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.http import HttpRequest
from django.urls import path

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions, RunOptions
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from tests.reliability.project.agent import build_agent
from tests.reliability.project.prices import SPEND_BUDGET, SPEND_PRICE


def header_user(request: HttpRequest) -> Any:
    """The user named by the ``X-User`` header, or ``None``."""
    name = request.headers.get("X-User", "")
    return get_user_model().objects.filter(username=name).first() if name else None


def _run_options(**chosen: Any) -> RunOptions:
    """The durable-run options the environment sets, and ``chosen``; the others keep their
    defaults."""
    timing = {
        "run_heartbeat_seconds": settings.RELIABILITY_RUN_HEARTBEAT,
        "run_lease_seconds": settings.RELIABILITY_RUN_LEASE,
        "sweep_interval_seconds": settings.RELIABILITY_SWEEP_SECONDS,
        "drain_seconds": settings.RELIABILITY_DRAIN_SECONDS,
        # One value for every mount: they share the run table, and a sweep takes every
        # mount's stale runs.
        "on_worker_loss": settings.RELIABILITY_ON_WORKER_LOSS,
    }
    return RunOptions(
        **{name: value for name, value in timing.items() if value is not None}, **chosen
    )


def _server(namespace: str, runs: RunOptions | None = None, **options: Any) -> AGUIServer:
    return AGUIServer(
        build_agent(),
        conversation_store=DefaultConversationStore(),
        access=AccessPolicy(get_user=header_user, csrf_exempt=True),
        mount=MountOptions(namespace=namespace),
        runs=runs or _run_options(),
        **options,
    )


urlpatterns = [
    path("agent/", _server("agent").urls),
    path("cancel-agent/", _server("cancel-agent", _run_options(on_disconnect="cancel")).urls),
]


if importlib.util.find_spec("pydantic_ai_harness") is not None:
    from django_pydantic_agent._harness_spend import Budget, SpendLimits
    from django_pydantic_agent.agui.spend import per_user
    from django_pydantic_agent.contrib.store.spend_store import DefaultSpendStore

    _limits: SpendLimits[None] = SpendLimits(
        budgets=[Budget(usd=SPEND_BUDGET, window="day", scope=per_user, name="daily")],
        store=DefaultSpendStore(),
        price=lambda response: SPEND_PRICE,
    )
    urlpatterns.append(path("spend-agent/", _server("spend-agent", spend=_limits).urls))
