"""Feedback on messages (``StoredFeedback``): a rating and a comment per message of a thread."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0020_storedmessage_no_conversation_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="StoredFeedback",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("message_id", models.CharField(max_length=255)),
                (
                    "rating",
                    models.CharField(
                        blank=True,
                        choices=[("up", "Up"), ("down", "Down")],
                        default="",
                        max_length=4,
                    ),
                ),
                ("comment", models.TextField(blank=True, default="")),
                ("run_id", models.CharField(blank=True, default="", max_length=255)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "conversation",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="feedback",
                        to="django_pydantic_agent_store.storedconversation",
                    ),
                ),
            ],
            options={
                "verbose_name": "message feedback",
                "verbose_name_plural": "message feedback",
                "indexes": [
                    models.Index(fields=["rating", "updated_at"], name="dpa_store_feedback_rating")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("conversation", "message_id"),
                        name="dpa_store_feedback_one_per_message",
                    )
                ],
            },
        ),
    ]
