"""The archived flag of a thread, and the message text index of full-text search.

PostgreSQL: a stored generated ``tsvector`` column (``dpa_search_vector``, unknown to the
model; NULL for messages not indexed) of user and assistant messages no longer ``active``,
and a GIN index on it. Adding it rewrites the message table. A later migration cannot change
the type of ``content``, ``role`` or ``status`` without dropping the column first. SQLite: a contentless FTS5 table of the same texts,
kept by triggers on the message table, filled from the existing rows. Other databases get
neither (search falls back to titles). The SQL is ``contrib.store.search``'s.
"""

from django.db import migrations, models

from django_pydantic_agent.contrib.store.search import drop_index_statements, index_statements


def forwards(apps, schema_editor) -> None:
    model = apps.get_model("django_pydantic_agent_store", "StoredMessage")
    table = schema_editor.quote_name(model._meta.db_table)
    for statement in index_statements(schema_editor.connection.vendor, table):
        schema_editor.execute(statement, params=None)


def backwards(apps, schema_editor) -> None:
    model = apps.get_model("django_pydantic_agent_store", "StoredMessage")
    table = schema_editor.quote_name(model._meta.db_table)
    for statement in drop_index_statements(schema_editor.connection.vendor, table):
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0013_branches"),
    ]

    operations = [
        migrations.AddField(
            model_name="storedconversation",
            name="archived",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
