"""Compaction summaries: a row of their own, beside the messages they stand for."""

from __future__ import annotations

import uuid

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0018_lazy_search_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="StoredSummary",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("summary_uuid", models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                ("text", models.TextField()),
                ("run_id", models.CharField(blank=True, default="", max_length=255)),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                (
                    "conversation",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="summaries",
                        to="django_pydantic_agent_store.storedconversation",
                    ),
                ),
                (
                    "through",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="summaries",
                        to="django_pydantic_agent_store.storedmessage",
                        to_field="message_uuid",
                    ),
                ),
            ],
            options={
                "verbose_name": "summary",
                "verbose_name_plural": "summaries",
                "indexes": [
                    models.Index(fields=["conversation", "-id"], name="dpa_store_summary_newest")
                ],
            },
        ),
    ]
