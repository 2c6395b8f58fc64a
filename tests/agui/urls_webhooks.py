"""A mount that queues signed webhooks (delivered by the tests, no background task)."""

from __future__ import annotations

from django.urls import path

from django_pydantic_agent.agui import MountOptions, RunOptions, Webhooks
from django_pydantic_agent.contrib.store.webhooks import DefaultWebhookQueue
from tests.agui.urls import stored

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

hooked = stored(
    mount=MountOptions(namespace="hooked"),
    runs=RunOptions(sweep_interval_seconds=0),
    webhooks=Webhooks(
        url="http://127.0.0.1:9/unset",  # each test points it at its own receiver
        secret=SECRET,
        queue=DefaultWebhookQueue(),
        allow_loopback=True,
        poll_seconds=0,
        first_retry_seconds=30,
    ),
)

urlpatterns = [path("hooked/", hooked.urls)]
