"""SQLite's message text index is kept lazily: writes index nothing, a search catches up.

Migration 0014's triggers indexed every user and assistant message as it was inserted, which
made a first save of 1,000 messages ten times slower than 0.28.3. This migration replaces them
by triggers on the rows a search has already indexed (edits and deletes) and a one-row mark
table, ``dpa_store_message_fts_mark``: the highest message id the index has seen. The index is
rebuilt from the stored messages, so every existing message stays searchable. Reversed,
0014's triggers come back and the index is rebuilt again. PostgreSQL and other databases are
unchanged. The SQL is ``contrib.store.search_index``'s.
"""

from django.db import migrations

from django_pydantic_agent.contrib.store.search_index import (
    drop_lazy_statements,
    lazy_statements,
)


def _run(apps, schema_editor, statements) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    model = apps.get_model("django_pydantic_agent_store", "StoredMessage")
    for statement in statements(schema_editor.quote_name(model._meta.db_table)):
        schema_editor.execute(statement, params=None)


def forwards(apps, schema_editor) -> None:
    _run(apps, schema_editor, lazy_statements)


def backwards(apps, schema_editor) -> None:
    _run(apps, schema_editor, drop_lazy_statements)


class Migration(migrations.Migration):
    dependencies = [
        ("django_pydantic_agent_store", "0017_storedagentrun_resumes"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards, elidable=False),
    ]
