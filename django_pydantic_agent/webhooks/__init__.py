"""Signed webhooks: a mount's run and thread events, posted to the project's URLs.

``AGUIServer(webhooks=Webhooks(url=..., secret="whsec_...", queue=DefaultWebhookQueue()))``
posts ``run.finished``, ``run.errored``, ``run.cancelled`` and ``thread.deleted``, signed as
Standard Webhooks specifies, from a durable queue, retried with backoff (``docs/webhooks.md``).

- ``signing``: ``whsec_`` secrets and the ``webhook-id``/``-timestamp``/``-signature`` headers.
- ``targets``: which URLs webhooks may go to (http(s), no private or loopback address unless
  allowed), checked at configuration and before every attempt.
- ``events``: the event bodies, the queued ``WebhookMessage`` and the ``WebhookQueue`` protocol.
- ``delivery``: the ``Webhooks`` options and the ``WebhookDispatcher`` that queues and delivers.
"""

from __future__ import annotations

from django_pydantic_agent.webhooks.delivery import (
    DELIVERED,
    FAILED,
    PENDING,
    WebhookDispatcher,
    Webhooks,
)
from django_pydantic_agent.webhooks.events import (
    EVENT_TYPES,
    RUN_CANCELLED,
    RUN_ERRORED,
    RUN_FINISHED,
    THREAD_DELETED,
    WebhookDelivery,
    WebhookMessage,
    WebhookQueue,
)
from django_pydantic_agent.webhooks.signing import new_secret
from django_pydantic_agent.webhooks.targets import WebhookTargetError, check_target

__all__ = [
    "DELIVERED",
    "EVENT_TYPES",
    "FAILED",
    "PENDING",
    "RUN_CANCELLED",
    "RUN_ERRORED",
    "RUN_FINISHED",
    "THREAD_DELETED",
    "WebhookDelivery",
    "WebhookDispatcher",
    "WebhookMessage",
    "WebhookQueue",
    "WebhookTargetError",
    "Webhooks",
    "check_target",
    "new_secret",
]
