"""Run records remember how often another worker took them over, and what to run them with."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0016_message_agui_id_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="storedagentrun",
            name="resumes",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="storedagentrun",
            name="resume_input",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
