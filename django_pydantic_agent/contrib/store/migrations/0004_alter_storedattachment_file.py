"""The predecessor's 0004 (0.28.3): attachment bytes in their own storage (a state change)."""

from django.db import migrations, models

import django_pydantic_agent.contrib.store.models.conversations
from django_pydantic_agent.contrib.store.migrations._predecessor import OnPredecessorSchema


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0003_attachment_content_hash_and_conversation_links")
    ]

    operations = [
        OnPredecessorSchema(
            migrations.AlterField(
                model_name="storedattachment",
                name="file",
                field=models.FileField(
                    db_index=True,
                    storage=django_pydantic_agent.contrib.store.models.conversations.attachment_storage,
                    upload_to="django_pydantic_agent/attachments/",
                ),
            ),
        ),
    ]
