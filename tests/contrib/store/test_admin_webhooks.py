"""The admin's webhook delivery log: status, attempts and the receiver's answer per delivery,
the URL without its query (a receiver's token), and an action that sends chosen ones again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from django_pydantic_agent.contrib.store.models import StoredWebhookDelivery

pytestmark = pytest.mark.django_db
PREFIX = "/admin/django_pydantic_agent_store/storedwebhookdelivery"


def test_the_log_lists_deliveries_without_the_receivers_token_and_sends_one_again(
    admin_client: Client,
) -> None:
    failed = StoredWebhookDelivery.objects.create(
        event_id="msg_failed",
        event_type="run.errored",
        url="https://hooks.example.com/agent?token=receiver-token",
        payload="{}",
        status="failed",
        attempts=10,
        response_status=500,
        next_attempt_at=timezone.now() - timedelta(days=1),
    )
    page = admin_client.get(f"{PREFIX}/").content.decode()
    assert "msg_failed" in page
    assert "https://hooks.example.com/agent" in page
    assert "receiver-token" not in page
    assert admin_client.get(f"{PREFIX}/{failed.pk}/change/").status_code == 200
    assert (
        "receiver-token" not in admin_client.get(f"{PREFIX}/{failed.pk}/change/").content.decode()
    )
    response = admin_client.post(
        f"{PREFIX}/", {"action": "send_again", "_selected_action": [failed.pk]}
    )
    assert response.status_code == 302
    failed.refresh_from_db()
    assert (failed.status, failed.attempts) == ("pending", 0)
    assert failed.next_attempt_at <= timezone.now()
