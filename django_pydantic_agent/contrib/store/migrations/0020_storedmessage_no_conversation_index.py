"""Drop the index of ``StoredMessage.conversation`` alone (``dpa_store_msg_agui_id`` starts with
the column, so nothing loses its index).

PostgreSQL took it, the smallest index on the column, whenever its statistics took a thread for
one row (a thread new since the table was last analysed), and then read every row of the thread
to find its newest: 10,001 rows at message 10,000 where the ``(conversation, position)`` index
reads one (docs/benchmarks.md). Every message insert also paid for it.

Only the index goes: ``AlterField`` would rebuild the table on SQLite (copying every row and
dropping the search index's triggers, migration 0018) and drop and re-validate the foreign key
on PostgreSQL.
"""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

TABLE = "django_pydantic_agent_store_storedmessage"


def _conversation_indexes(schema_editor: Any) -> list[str]:
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, TABLE)
    return [
        name
        for name, info in constraints.items()
        if info["columns"] == ["conversation_id"]
        and info["index"]
        and not info["unique"]
        and not info["primary_key"]
        and not info["foreign_key"]
    ]


def drop_index(apps: Any, schema_editor: Any) -> None:
    model = apps.get_model("django_pydantic_agent_store", "StoredMessage")
    for name in _conversation_indexes(schema_editor):
        schema_editor.execute(schema_editor._delete_index_sql(model, name))


def create_index(apps: Any, schema_editor: Any) -> None:
    if _conversation_indexes(schema_editor):
        return
    model = apps.get_model("django_pydantic_agent_store", "StoredMessage")
    field = model._meta.get_field("conversation")
    schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0019_storedsummary"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="storedmessage",
                    name="conversation",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="message_rows",
                        to="django_pydantic_agent_store.storedconversation",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop_index, create_index)],
        ),
    ]
