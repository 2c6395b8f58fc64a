"""``StoredMessage.wire``: the wire messages a saved record was read from (see ``rows``)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0009_chat_records_and_run_records"),
    ]

    operations = [
        migrations.AddField(
            model_name="storedmessage",
            name="wire",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
    ]
