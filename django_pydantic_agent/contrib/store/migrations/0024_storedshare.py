"""Share links: ``StoredShare``, a thread's snapshot behind a token kept only as its digest."""

from __future__ import annotations

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import django_pydantic_agent.contrib.store.models.conversations


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0023_storedrunusage_estimated"),
    ]

    operations = [
        migrations.CreateModel(
            name="StoredShare",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("owner_id", models.CharField(editable=False, max_length=255)),
                ("token_digest", models.CharField(editable=False, max_length=64, unique=True)),
                ("title", models.CharField(blank=True, default="", editable=False, max_length=255)),
                (
                    "snapshot",
                    django_pydantic_agent.contrib.store.models.conversations.JSONTextField(
                        blank=True, default=list, editable=False
                    ),
                ),
                ("include_attachments", models.BooleanField(default=False, editable=False)),
                (
                    "created_at",
                    models.DateTimeField(default=django.utils.timezone.now, editable=False),
                ),
                ("expires_at", models.DateTimeField()),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                (
                    "conversation",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="shares",
                        to="django_pydantic_agent_store.storedconversation",
                    ),
                ),
            ],
            options={
                "verbose_name": "share link",
                "verbose_name_plural": "share links",
                "indexes": [
                    models.Index(fields=["owner_id", "-created_at"], name="dpa_store_share_owner")
                ],
            },
        ),
    ]
