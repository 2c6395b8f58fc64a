"""``StoredRunUsage.estimated``: the ledger row of a run stopped or failed before its provider
reported all its tokens holds an estimate, and says so."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0022_pins_and_tags"),
    ]

    operations = [
        migrations.AddField(
            model_name="storedrunusage",
            name="estimated",
            field=models.BooleanField(default=False),
        ),
    ]
