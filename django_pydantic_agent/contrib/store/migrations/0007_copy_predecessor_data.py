"""Copy the predecessor's data into our shape before 0008 drops its columns.

A conversation's ``messages`` JSON becomes ``StoredMessage`` rows, attachment ids become
32-digit hex, and an attachment's ``thread_id`` label becomes a link. Reversible: going back
writes the rows into ``messages`` again.
"""

from django.db import migrations

from django_pydantic_agent.contrib.store.migrations._predecessor import (
    CopyPredecessorData,
    OnPredecessorSchema,
    copy_predecessor_data,
    restore_predecessor_data,
)


class Migration(migrations.Migration):
    dependencies = [("django_pydantic_agent_store", "0006_successor_schema")]

    operations = [
        OnPredecessorSchema(
            CopyPredecessorData(
                copy_predecessor_data,
                restore_predecessor_data,
                copies=[
                    ("storedconversation", "messages"),
                    ("storedattachment", "thread_id"),
                    ("storedattachment", "attachment_id"),
                ],
            ),
        ),
    ]
