"""The message text index is kept lazily: a write indexes nothing, a search catches up first.

Migration 0014 indexed every user and assistant message as it was written (SQLite's insert
trigger, PostgreSQL's generated column), which made a first save of 1,000 messages ten times
slower than 0.28.3. SQLite: 0014's triggers are replaced by triggers on the rows a search has
already indexed (edits and deletes) and a one-row mark table, ``dpa_store_message_fts_mark``
(the highest message id the index has seen); the index is rebuilt from the stored messages.
PostgreSQL: the generated ``dpa_search_vector`` column becomes a plain one, its vectors kept;
a partial index lists the messages still to index and a trigger clears an edited message's
vector. Every existing message stays searchable. Reversed, 0014's index comes back (SQLite
rebuilds it; PostgreSQL rewrites the table). Other databases: nothing. The SQL is
``contrib.store.search_index``'s.
"""

from django.db import migrations

from django_pydantic_agent.contrib.store.search_index import (
    drop_lazy_statements,
    lazy_statements,
    pg_drop_lazy_statements,
    pg_lazy_statements,
)


def _run(apps, schema_editor, sqlite, postgresql) -> None:
    statements = {"sqlite": sqlite, "postgresql": postgresql}.get(schema_editor.connection.vendor)
    if statements is None:
        return
    model = apps.get_model("django_pydantic_agent_store", "StoredMessage")
    for statement in statements(schema_editor.quote_name(model._meta.db_table)):
        schema_editor.execute(statement, params=None)


def forwards(apps, schema_editor) -> None:
    _run(apps, schema_editor, lazy_statements, pg_lazy_statements)


def backwards(apps, schema_editor) -> None:
    _run(apps, schema_editor, drop_lazy_statements, pg_drop_lazy_statements)


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0017_storedagentrun_resumes"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
