"""Pins and tags on threads: ``StoredConversation.pinned`` and ``StoredThreadTag``."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0021_storedfeedback"),
    ]

    operations = [
        migrations.AddField(
            model_name="storedconversation",
            name="pinned",
            field=models.BooleanField(default=False),
        ),
        migrations.CreateModel(
            name="StoredThreadTag",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tag", models.CharField(max_length=50)),
                (
                    "conversation",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="tag_rows",
                        to="django_pydantic_agent_store.storedconversation",
                    ),
                ),
            ],
            options={
                "verbose_name": "thread tag",
                "indexes": [
                    models.Index(fields=["tag", "conversation"], name="dpa_store_tag_threads")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("conversation", "tag"), name="dpa_store_tag_once"
                    )
                ],
            },
        ),
    ]
