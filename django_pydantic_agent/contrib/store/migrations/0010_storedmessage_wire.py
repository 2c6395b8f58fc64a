"""``StoredMessage.wire``: the wire messages a saved record was read from (see ``rows``)."""

from django.db import migrations

import django_pydantic_agent.contrib.store.models.conversations


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0009_chat_records_and_run_records"),
    ]

    operations = [
        migrations.AddField(
            model_name="storedmessage",
            name="wire",
            field=django_pydantic_agent.contrib.store.models.conversations.JSONTextField(
                blank=True, editable=False, null=True
            ),
        ),
    ]
