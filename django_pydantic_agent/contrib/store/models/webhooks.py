"""The webhook delivery log: one row per event and URL, kept until delivered or given up.

``DefaultWebhookQueue`` (``contrib.store.webhooks``) writes and claims these rows; the admin
lists them (status, attempts, the receiver's last answer) and can send one again.
"""

from __future__ import annotations

from django.db import models
from django.utils import timezone

__all__ = ["StoredWebhookDelivery"]

_APP_LABEL = "django_pydantic_agent_store"


class StoredWebhookDelivery(models.Model):
    """One webhook event bound for one URL (a ``webhooks.WebhookMessage``) and how its
    delivery went.

    ``payload`` is the JSON body sent, byte for byte, on every attempt; ``event_id`` the
    ``webhook-id`` of each. A ``pending`` row is due at ``next_attempt_at`` (pushed ahead while
    a worker attempts it); ``attempts`` counts the attempts begun.
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    event_id = models.CharField(max_length=64)
    event_type = models.CharField(max_length=32)
    url = models.CharField(max_length=2000)
    payload = models.TextField()
    owner_id = models.CharField(max_length=255, blank=True, default="")
    thread_id = models.CharField(max_length=255, blank=True, default="")
    run_id = models.CharField(max_length=255, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        app_label = _APP_LABEL
        verbose_name = "webhook delivery"
        verbose_name_plural = "webhook deliveries"
        constraints = [
            models.UniqueConstraint(fields=["event_id", "url"], name="dpa_store_webhook_unique"),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="dpa_store_webhook_due"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id}"
