"""The predecessor's 0002 (0.28.3): a snapshot's ``state``. A no-op on our own schema."""

from django.db import migrations, models

from django_pydantic_agent.contrib.store.migrations._predecessor import OnPredecessorSchema


class Migration(migrations.Migration):
    dependencies = [("django_pydantic_agent_store", "0001_initial")]

    operations = [
        OnPredecessorSchema(
            migrations.AddField(
                model_name="storedsnapshot",
                name="state",
                field=models.CharField(
                    choices=[("complete", "complete"), ("interrupted", "interrupted")],
                    default="complete",
                    max_length=16,
                ),
            ),
        ),
    ]
