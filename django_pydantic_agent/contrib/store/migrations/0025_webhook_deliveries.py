"""The webhook delivery log (``StoredWebhookDelivery``), the queue of ``DefaultWebhookQueue``."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0024_storedshare"),
    ]

    operations = [
        migrations.CreateModel(
            name="StoredWebhookDelivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("event_id", models.CharField(max_length=64)),
                ("event_type", models.CharField(max_length=32)),
                ("url", models.CharField(max_length=2000)),
                ("payload", models.TextField()),
                ("owner_id", models.CharField(blank=True, default="", max_length=255)),
                ("thread_id", models.CharField(blank=True, default="", max_length=255)),
                ("run_id", models.CharField(blank=True, default="", max_length=255)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("delivered", "Delivered"),
                            ("failed", "Failed"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("last_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("delivered_at", models.DateTimeField(blank=True, null=True)),
                ("response_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("last_error", models.TextField(blank=True, default="")),
            ],
            options={
                "verbose_name": "webhook delivery",
                "verbose_name_plural": "webhook deliveries",
                "indexes": [
                    models.Index(fields=["status", "next_attempt_at"], name="dpa_store_webhook_due")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("event_id", "url"), name="dpa_store_webhook_unique"
                    )
                ],
            },
        ),
    ]
