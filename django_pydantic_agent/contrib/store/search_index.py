"""The message text index, kept lazily: writes index nothing, a search catches up first.

Migration 0014 indexed every user and assistant message as it was written (an FTS5 trigger on
SQLite, a stored generated ``tsvector`` column on PostgreSQL), which made first saves far
slower than 0.28.3's (``python -m bench --suite store``). Since migration 0018:

SQLite keeps a watermark (``dpa_store_message_fts_mark``: the highest message id the index
has seen) and three triggers that touch only rows at or under it: an insert at or under the
mark (an explicit id, or ids reused after a sequence reset) is indexed at once, the usual
insert above it costs one comparison; a delete removes the row's text; an update of its text,
role or status replaces it (an ``active`` message that completes gets indexed that way).
``catch_up`` indexes the rows above the mark in one ``INSERT … SELECT`` and moves the mark to
the highest id, in one transaction: SQLite has one writer at a time, so two searches never
index a row twice, and a row written meanwhile is either under the new mark or above it. Ids
never go down (Django's SQLite ``AUTOINCREMENT``).

PostgreSQL keeps the ``dpa_search_vector`` column, no longer generated: NULL until a search
fills it. A partial index lists the indexed rows without a vector (sequence order is not
commit order, so no watermark); a trigger clears the vector of a row whose text, role or
status changes. ``catch_up`` fills them in one ``UPDATE``, skipping rows another transaction
holds locked. The figures are in docs/benchmarks.md ("The lazy index").
"""

from __future__ import annotations

from django.db import connections

from django_pydantic_agent.persistence.transactions import write_transaction

__all__ = [
    "FTS_TABLE",
    "INDEXED_ROLES",
    "MARK_TABLE",
    "PG_COLUMN",
    "PG_CONFIG",
    "PG_INDEX",
    "PG_RESET",
    "PG_TODO",
    "TRIGGERS",
    "catch_up",
    "drop_lazy_statements",
    "drop_triggers",
    "eager_fill",
    "eager_triggers",
    "has_mark",
    "indexed",
    "lazy_fill",
    "lazy_statements",
    "pg_drop_lazy_statements",
    "pg_lazy_statements",
    "sqlite_triggers",
]

#: SQLite's FTS5 table of message texts (rowid = the ``StoredMessage`` id).
FTS_TABLE = "dpa_store_message_fts"
#: SQLite's one-row table of the highest message id the FTS5 table has seen.
MARK_TABLE = "dpa_store_message_fts_mark"
#: The roles whose message text is indexed.
INDEXED_ROLES = ("user", "assistant")
#: PostgreSQL's text search configuration (no stemming: words of any language match as typed).
PG_CONFIG = "simple"
#: PostgreSQL's ``tsvector`` column of each indexed message (unknown to the model; ``ts_rank``
#: reads it instead of parsing the text again). NULL until a search indexes the message.
PG_COLUMN = "dpa_search_vector"
#: PostgreSQL's GIN index of that column.
PG_INDEX = "dpa_store_msg_fts"
#: PostgreSQL's partial index of the messages a search has yet to index.
PG_TODO = "dpa_store_msg_fts_todo"
#: PostgreSQL's trigger (and its function) that clears the vector of an edited message.
PG_RESET = "dpa_store_msg_fts_reset"
#: The suffixes of the triggers' names.
TRIGGERS = ("ai", "ad", "au")

_ROLES = "(" + ", ".join(f"'{role}'" for role in INDEXED_ROLES) + ")"
_MARK = f"(SELECT indexed_through FROM {MARK_TABLE} WHERE id = 1)"


def indexed(row: str = "") -> str:
    """The SQL condition of an indexed message row (``row``: ``new.`` / ``old.`` or none)."""
    return f"{row}role IN {_ROLES} AND {row}status <> 'active'"


def eager_triggers(table: str) -> list[str]:
    """Migration 0014's triggers: every write of an indexed row reaches the index."""
    fts = FTS_TABLE
    new, old = indexed("new."), indexed("old.")
    return [
        f"CREATE TRIGGER IF NOT EXISTS {fts}_ai AFTER INSERT ON {table} WHEN {new} BEGIN "
        f"INSERT INTO {fts}(rowid, content) VALUES (new.id, new.content); END",
        f"CREATE TRIGGER IF NOT EXISTS {fts}_ad AFTER DELETE ON {table} WHEN {old} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, content) VALUES ('delete', old.id, old.content); END",
        f"CREATE TRIGGER IF NOT EXISTS {fts}_au AFTER UPDATE OF content, role, status "
        f"ON {table} WHEN ({old}) OR ({new}) BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, content) SELECT 'delete', old.id, old.content "
        f"WHERE {old}; "
        f"INSERT INTO {fts}(rowid, content) SELECT new.id, new.content WHERE {new}; END",
    ]


def sqlite_triggers(table: str) -> list[str]:
    """The lazy index's triggers (migration 0018): only rows at or under the mark."""
    fts = FTS_TABLE
    new, old = indexed("new."), indexed("old.")
    return [
        f"CREATE TRIGGER IF NOT EXISTS {fts}_ai AFTER INSERT ON {table} "
        f"WHEN {new} AND new.id <= {_MARK} BEGIN "
        f"INSERT INTO {fts}(rowid, content) VALUES (new.id, new.content); END",
        f"CREATE TRIGGER IF NOT EXISTS {fts}_ad AFTER DELETE ON {table} "
        f"WHEN {old} AND old.id <= {_MARK} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, content) VALUES ('delete', old.id, old.content); END",
        f"CREATE TRIGGER IF NOT EXISTS {fts}_au AFTER UPDATE OF content, role, status "
        f"ON {table} WHEN (({old}) OR ({new})) AND old.id <= {_MARK} BEGIN "
        f"INSERT INTO {fts}({fts}, rowid, content) SELECT 'delete', old.id, old.content "
        f"WHERE {old}; "
        f"INSERT INTO {fts}(rowid, content) SELECT new.id, new.content WHERE {new}; END",
    ]


def eager_fill(table: str) -> list[str]:
    """Empty the FTS5 table and index every indexed row of ``table``."""
    return [
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('delete-all')",
        f"INSERT INTO {FTS_TABLE}(rowid, content) SELECT id, content FROM {table} "
        f"WHERE {indexed()}",
    ]


def lazy_fill(table: str) -> list[str]:
    """Empty the FTS5 table and the mark: the next search indexes every row."""
    return [
        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('delete-all')",
        f"UPDATE {MARK_TABLE} SET indexed_through = 0 WHERE id = 1",
    ]


def drop_triggers() -> list[str]:
    """Drop the index's triggers, whichever design made them."""
    return [f"DROP TRIGGER IF EXISTS {FTS_TABLE}_{suffix}" for suffix in TRIGGERS]


def lazy_statements(table: str) -> list[str]:
    """Migration 0018 on SQLite: 0014's eager triggers become the lazy ones, and the index is
    rebuilt from the stored rows (a table rebuild in 0015 to 0017 may have dropped 0014's
    triggers before ``post_migrate`` restored them), its mark at the highest id."""
    return [
        *drop_triggers(),
        f"CREATE TABLE IF NOT EXISTS {MARK_TABLE} (id integer NOT NULL PRIMARY KEY "
        "CHECK (id = 1), indexed_through integer NOT NULL)",
        f"INSERT OR IGNORE INTO {MARK_TABLE} (id, indexed_through) VALUES (1, 0)",
        *eager_fill(table),
        f"UPDATE {MARK_TABLE} SET indexed_through = "
        f"(SELECT COALESCE(MAX(id), 0) FROM {table}) WHERE id = 1",
        *sqlite_triggers(table),
    ]


def pg_lazy_statements(table: str) -> list[str]:
    """Migration 0018 on PostgreSQL: 0014's generated column becomes a plain one, its vectors
    kept (``DROP EXPRESSION`` rewrites nothing); a partial index lists the messages still to
    index, and a trigger clears the vector of a message whose text, role or status changes."""
    changed = " OR ".join(
        f"OLD.{column} IS DISTINCT FROM NEW.{column}" for column in ("content", "role", "status")
    )
    return [
        f"ALTER TABLE {table} ALTER COLUMN {PG_COLUMN} DROP EXPRESSION",
        f"CREATE INDEX IF NOT EXISTS {PG_TODO} ON {table} (id) "
        f"WHERE {PG_COLUMN} IS NULL AND {indexed()}",
        f"CREATE OR REPLACE FUNCTION {PG_RESET}() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN NEW.{PG_COLUMN} := NULL; RETURN NEW; END $$",
        f"CREATE TRIGGER {PG_RESET} BEFORE UPDATE OF content, role, status ON {table} "
        f"FOR EACH ROW WHEN ({changed}) EXECUTE FUNCTION {PG_RESET}()",
    ]


def pg_drop_lazy_statements(table: str) -> list[str]:
    """Migration 0018 reversed on PostgreSQL: the trigger and the partial index go, and the
    column is generated again (0014's statements: the table is rewritten)."""
    vector = f"to_tsvector('{PG_CONFIG}'::regconfig, content)"
    return [
        f"DROP TRIGGER IF EXISTS {PG_RESET} ON {table}",
        f"DROP FUNCTION IF EXISTS {PG_RESET}()",
        f"DROP INDEX IF EXISTS {PG_TODO}",
        f"DROP INDEX IF EXISTS {PG_INDEX}",
        f"ALTER TABLE {table} DROP COLUMN IF EXISTS {PG_COLUMN}",
        f"ALTER TABLE {table} ADD COLUMN {PG_COLUMN} tsvector GENERATED ALWAYS AS "
        f"(CASE WHEN {indexed()} THEN {vector} END) STORED",
        f"CREATE INDEX {PG_INDEX} ON {table} USING gin ({PG_COLUMN})",
    ]


def drop_lazy_statements(table: str) -> list[str]:
    """Migration 0018 reversed on SQLite: 0014's eager triggers, and the index filled."""
    return [
        *drop_triggers(),
        f"DROP TABLE IF EXISTS {MARK_TABLE}",
        *eager_triggers(table),
        *eager_fill(table),
    ]


def catch_up(using: str) -> int:
    """Index the messages written since the last search of the database ``using`` (SQLite or
    PostgreSQL); the number of rows indexed. Sync; a no-op before migration 0018.

    SQLite: when a row is above the mark (else one read, no write), one ``INSERT … SELECT``
    and the mark moved, in one transaction. PostgreSQL: one ``UPDATE`` of the rows the partial
    index lists; a row another transaction holds locked is left to the next search
    (``SKIP LOCKED``: a search never waits for, or deadlocks with, a write).
    """
    connection = connections[using]
    if connection.vendor == "postgresql":
        return _pg_catch_up(using)
    from django_pydantic_agent.contrib.store.models import StoredMessage

    table = connection.ops.quote_name(StoredMessage._meta.db_table)
    if not has_mark(using):
        return 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {table} WHERE id > {_MARK} LIMIT 1")
        if cursor.fetchone() is None:
            return 0
    with write_transaction(using=using), connection.cursor() as cursor:
        # The INSERT is the transaction's first statement: it takes SQLite's write lock
        # before it reads the mark, so a concurrent search waits and then sees the new mark.
        cursor.execute(
            f"INSERT INTO {FTS_TABLE}(rowid, content) SELECT id, content FROM {table} "
            f"WHERE id > {_MARK} AND {indexed()}"
        )
        added = max(int(cursor.rowcount), 0)
        cursor.execute(
            f"UPDATE {MARK_TABLE} SET indexed_through = MAX(indexed_through, "
            f"(SELECT COALESCE(MAX(id), 0) FROM {table})) WHERE id = 1"
        )
    return added


def _pg_catch_up(using: str) -> int:
    from django_pydantic_agent.contrib.store.models import StoredMessage

    connection = connections[using]
    name = StoredMessage._meta.db_table
    table = connection.ops.quote_name(name)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attgenerated FROM pg_attribute WHERE attrelid = %s::regclass AND attname = %s",
            [table, PG_COLUMN],
        )
        row = cursor.fetchone()
        if row is None or row[0]:  # no column, or 0014's generated one
            return 0
        cursor.execute(
            f"UPDATE {table} SET {PG_COLUMN} = to_tsvector('{PG_CONFIG}'::regconfig, content) "
            f"WHERE id IN (SELECT id FROM {table} WHERE {PG_COLUMN} IS NULL AND {indexed()} "
            "FOR UPDATE SKIP LOCKED)"
        )
        return max(int(cursor.rowcount), 0)


def has_mark(using: str) -> bool:
    """Whether the SQLite database ``using`` has the lazy index's mark (migration 0018)."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = %s", [MARK_TABLE]
        )
        return cursor.fetchone() is not None
