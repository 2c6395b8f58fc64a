"""Drop the predecessor's columns that 0007 copied, and make attachment ids UUIDs.

The last migration that changes a predecessor database; after it the schema is exactly the
one a fresh 1.0 database has.
"""

import uuid

from django.db import migrations, models

from django_pydantic_agent.contrib.store.migrations._predecessor import OnPredecessorSchema


class Migration(migrations.Migration):
    dependencies = [("django_pydantic_agent_store", "0007_copy_predecessor_data")]

    operations = [
        OnPredecessorSchema(
            migrations.AlterField(
                model_name="storedattachment",
                name="attachment_id",
                field=models.UUIDField(default=uuid.uuid4, editable=False, unique=True),
            ),
            migrations.RemoveField(model_name="storedattachment", name="thread_id"),
            migrations.RemoveField(model_name="storedconversation", name="messages"),
        ),
    ]
