"""``DefaultConversationStore.find_threads``: pages of one owner's threads, and full-text search.

Without search words a page is the owner's threads newest first, paged by ``(updated_at, id)``.
With words, threads whose title contains every word come first (newest first), then threads
with a message whose text has every word (as a word prefix), by the best such message's rank:
``ts_rank`` over the expression GIN index ``dpa_store_msg_fts`` on PostgreSQL, ``bm25`` over
the FTS5 table ``dpa_store_message_fts`` on SQLite (both made by migration 0014; SQLite's is
kept lazily since 0018: a search first indexes what was written since the last one,
``contrib.store.search_index``). Only user and assistant texts are indexed, and only once
their message is no longer ``active``, so a streaming run's appends cost the index nothing.
Every query joins the owner's threads: another owner's text never matches, ranks or reaches
a snippet. Other databases search titles only. The figures are in docs/benchmarks.md ("Search").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connections, router
from django.db.models import Q, QuerySet

from django_pydantic_agent.contrib.store.search_index import (
    FTS_TABLE,
    INDEXED_ROLES,
    PG_COLUMN,
    PG_CONFIG,
    PG_INDEX,
    TRIGGERS,
    catch_up,
    drop_triggers,
    eager_fill,
    eager_triggers,
    has_mark,
    indexed,
    lazy_fill,
    sqlite_triggers,
)
from django_pydantic_agent.contrib.store.tags import tags_of
from django_pydantic_agent.persistence.base import ConversationMeta
from django_pydantic_agent.persistence.listing import (
    CursorError,
    ThreadHit,
    ThreadPage,
    ThreadQuery,
    snippet,
)

__all__ = [
    "FTS_TABLE",
    "INDEXED_ROLES",
    "META_COLUMNS",
    "PG_COLUMN",
    "PG_INDEX",
    "RANK_WINDOW",
    "SEARCH_DEPTH",
    "drop_index_statements",
    "find_threads",
    "index_statements",
    "metas",
    "repair_sqlite_index",
    "search_vendor",
]

#: A search pages through at most this many threads.
SEARCH_DEPTH = 1000
#: PostgreSQL ranks the owner's newest this many matching messages (all of them for a word
#: that is not in more): a word in most messages costs the same as a rarer one.
RANK_WINDOW = 500


def index_statements(vendor: str, table: str) -> list[str]:
    """The SQL that creates the message text index of ``vendor`` over ``table`` (quoted) and
    fills it; ``[]`` for a database without one. Run by migration 0014."""
    if vendor == "postgresql":
        vector = f"to_tsvector('{PG_CONFIG}'::regconfig, content)"
        return [
            f"ALTER TABLE {table} ADD COLUMN {PG_COLUMN} tsvector GENERATED ALWAYS AS "
            f"(CASE WHEN {indexed()} THEN {vector} END) STORED",
            f"CREATE INDEX {PG_INDEX} ON {table} USING gin ({PG_COLUMN})",
        ]
    if vendor == "sqlite":
        return [
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(content, content='', "
            "tokenize='unicode61 remove_diacritics 2')",
            *eager_triggers(table),
            *eager_fill(table),
        ]
    return []


def drop_index_statements(vendor: str, table: str) -> list[str]:
    """The SQL that drops what ``index_statements`` created."""
    if vendor == "postgresql":
        return [
            f"DROP INDEX IF EXISTS {PG_INDEX}",
            f"ALTER TABLE {table} DROP COLUMN IF EXISTS {PG_COLUMN}",
        ]
    if vendor == "sqlite":
        drops = [f"DROP TRIGGER IF EXISTS {FTS_TABLE}_{suffix}" for suffix in TRIGGERS]
        return [*drops, f"DROP TABLE IF EXISTS {FTS_TABLE}"]
    return []


def repair_sqlite_index(using: str) -> bool:
    """Recreate SQLite's triggers when a later migration rebuilt the message table (SQLite
    drops a table's triggers with it), and refill the index; ``True`` when it had to. With
    migration 0018's lazy index the refill empties the index and its mark: the next search
    indexes every row (``contrib.store.search_index``).

    Connected to ``post_migrate``; a no-op elsewhere and before migration 0014.
    """
    from django_pydantic_agent.contrib.store.models import StoredMessage

    connection = connections[using]
    if connection.vendor != "sqlite":
        return False
    names = [f"{FTS_TABLE}_{suffix}" for suffix in TRIGGERS]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE (type = 'trigger' AND name IN (%s, %s, %s)) "
            "OR (type = 'table' AND name = %s)",
            [*names, FTS_TABLE],
        )
        found = {name for (name,) in cursor.fetchall()}
        if FTS_TABLE not in found or found >= set(names):
            return False
        table = connection.ops.quote_name(StoredMessage._meta.db_table)
        if has_mark(using):
            statements = [*drop_triggers(), *lazy_fill(table), *sqlite_triggers(table)]
        else:
            statements = [*drop_triggers(), *eager_triggers(table), *eager_fill(table)]
        for statement in statements:
            cursor.execute(statement)
    return True


def search_vendor(using: str) -> str | None:
    """``"postgresql"`` or ``"sqlite"`` when the database ``using`` has the message text
    index, else ``None`` (titles only)."""
    vendor = connections[using].vendor
    return vendor if vendor in ("postgresql", "sqlite") else None


def _threads(owner_id: str, query: ThreadQuery) -> QuerySet[Any]:
    from django_pydantic_agent.contrib.store.models import StoredConversation

    threads = StoredConversation.objects.filter(owner_id=owner_id)
    if query.prefix:
        threads = threads.filter(thread_id__startswith=query.prefix)
    if query.archived is not None:
        threads = threads.filter(archived=query.archived)
    if query.pinned is not None:
        threads = threads.filter(pinned=query.pinned)
    if query.tag:
        threads = threads.filter(tag_rows__tag=query.tag)
    if query.updated_after is not None:
        threads = threads.filter(updated_at__gt=query.updated_after)
    if query.updated_before is not None:
        threads = threads.filter(updated_at__lt=query.updated_before)
    return threads


#: The columns of a drawer row (``metas``).
META_COLUMNS = ("id", "thread_id", "title", "updated_at", "preview", "archived", "pinned")


def metas(
    rows: Sequence[Sequence[Any]], owner_id: str, prefix: str = "", *, tags: bool = True
) -> list[ConversationMeta]:
    """Drawer rows of ``rows`` (``META_COLUMNS`` values), thread ids without ``prefix``, with
    their tags (one query; ``tags=False``: none read, ``list()`` stays one query)."""
    found = tags_of(row[0] for row in rows) if tags else {}
    return [
        ConversationMeta(
            thread_id=thread_id[len(prefix) :],
            title=title,
            updated_at=updated_at,
            preview=preview,
            owner_id=owner_id,
            archived=archived,
            pinned=pinned,
            tags=found.get(pk, ()),
        )
        for pk, thread_id, title, updated_at, preview, archived, pinned in rows
    ]


def find_threads(owner_id: str, query: ThreadQuery) -> ThreadPage:
    """The owner's page of threads for ``query`` (sync; run it in a worker thread).

    Raises ``CursorError`` for an ``after`` position this module did not make.
    """
    if query.terms:
        return _search(owner_id, query)
    threads = _threads(owner_id, query)
    after = query.after
    if after is not None:
        if len(after) != 3 or after[0] != "k" or not isinstance(after[2], int):
            raise CursorError(f"{after!r} is not a position of the thread list.")
        try:
            stamp = datetime.fromisoformat(after[1])
        except (TypeError, ValueError):
            raise CursorError(f"{after!r} is not a position of the thread list.") from None
        threads = threads.filter(Q(updated_at__lt=stamp) | Q(updated_at=stamp, id__lt=after[2]))
    ordered = threads.order_by("-updated_at", "-id").values_list(*META_COLUMNS)
    rows = list(ordered[: query.limit + 1])
    page, more = rows[: query.limit], len(rows) > query.limit
    hits = [ThreadHit(meta=meta) for meta in metas(page, owner_id, query.prefix)]
    position = ["k", page[-1][3].isoformat(), page[-1][0]] if more else None
    return ThreadPage(hits=hits, next_position=position)


def _offset(query: ThreadQuery) -> int:
    after = query.after
    if after is None:
        return 0
    if len(after) != 2 or after[0] != "s" or not isinstance(after[1], int) or after[1] < 0:
        raise CursorError(f"{after!r} is not a position of a search.")
    return int(after[1])


def _search(owner_id: str, query: ThreadQuery) -> ThreadPage:
    from django_pydantic_agent.contrib.store.models import StoredConversation

    terms = query.terms
    offset = _offset(query)
    wanted = min(offset + query.limit + 1, SEARCH_DEPTH)
    threads = _threads(owner_id, query)
    titled = threads
    for term in terms:
        titled = titled.filter(title__icontains=term)
    by_title = list(titled.order_by("-updated_at", "-id").values_list("id", flat=True)[:wanted])
    using = router.db_for_read(StoredConversation)
    by_text = _message_matches(using, threads, owner_id, query, wanted)
    seen = set(by_title)
    order = [*by_title, *(cid for cid, _ in by_text if cid not in seen)]
    page_ids = order[offset : offset + query.limit]
    more = len(order) > offset + query.limit and offset + query.limit < SEARCH_DEPTH
    best = dict(by_text)
    found = StoredConversation.objects.filter(id__in=page_ids).values_list(*META_COLUMNS)
    rows = {row[0]: row for row in found}
    metas_by_id = dict(
        zip(page_ids, metas([rows[cid] for cid in page_ids], owner_id, query.prefix), strict=True)
    )
    texts = dict(_texts(using, [best[cid] for cid in page_ids if cid in best and cid not in seen]))
    hits = []
    for cid in page_ids:
        meta = metas_by_id[cid]
        if cid in seen:
            excerpt = snippet(meta.title, terms) or meta.title
        else:
            excerpt = snippet(texts.get(best[cid], ""), terms) or meta.preview
        hits.append(ThreadHit(meta=meta, snippet=excerpt))
    position = ["s", offset + query.limit] if more else None
    return ThreadPage(hits=hits, next_position=position)


def _texts(using: str, message_ids: list[int]) -> list[tuple[int, str]]:
    from django_pydantic_agent.contrib.store.models import StoredMessage

    if not message_ids:
        return []
    rows = StoredMessage.objects.using(using).filter(id__in=message_ids)
    return list(rows.values_list("id", "content"))


def _thread_conditions(owner_id: str, query: ThreadQuery) -> tuple[str, list[Any]]:
    """``_threads``' conditions as SQL on the thread table aliased ``c``, and their values."""
    conditions = ["c.owner_id = %s"]
    params: list[Any] = [owner_id]
    if query.prefix:
        escaped = query.prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        conditions.append("c.thread_id LIKE %s ESCAPE '\\'")
        params.append(f"{escaped}%")
    if query.archived is not None:
        conditions.append("c.archived = %s")
        params.append(query.archived)
    if query.pinned is not None:
        conditions.append("c.pinned = %s")
        params.append(query.pinned)
    if query.tag:
        from django_pydantic_agent.contrib.store.models import StoredThreadTag

        table = StoredThreadTag._meta.db_table
        conditions.append(
            f'EXISTS (SELECT 1 FROM "{table}" t WHERE t.conversation_id = c.id AND t.tag = %s)'
        )
        params.append(query.tag)
    if query.updated_after is not None:
        conditions.append("c.updated_at > %s")
        params.append(query.updated_after)
    if query.updated_before is not None:
        conditions.append("c.updated_at < %s")
        params.append(query.updated_before)
    return " AND ".join(conditions), params


def _message_matches(
    using: str, threads: QuerySet[Any], owner_id: str, query: ThreadQuery, wanted: int
) -> list[tuple[int, int]]:
    """``(thread id, best message id)`` of the threads with a message matching every term,
    best first, at most ``wanted``."""
    vendor = search_vendor(using)
    if vendor is None:
        return []
    from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage

    terms = query.terms
    connection = connections[using]
    quote = connection.ops.quote_name
    table = quote(StoredMessage._meta.db_table)
    threads_table = quote(StoredConversation._meta.db_table)
    inner_sql, inner_params = threads.values("id").query.sql_with_params()
    # The lazy index is written where messages are (a read replica takes it from there).
    catch_up(router.db_for_write(StoredMessage))
    if vendor == "postgresql":
        tsquery = " & ".join(f"'{term}':*" for term in terms)
        to_query = f"to_tsquery('{PG_CONFIG}'::regconfig, %s)"
        where, where_params = _thread_conditions(owner_id, query)
        # The owner's threads first, newest first: only their newest RANK_WINDOW matches are
        # ranked, so a word in most messages costs no more than a rare one.
        sql = (
            "SELECT conversation_id, id FROM ("
            "SELECT DISTINCT ON (h.conversation_id) h.conversation_id, h.id, "
            f"ts_rank(h.{PG_COLUMN}, {to_query}) AS r "
            f"FROM (SELECT m.id, m.conversation_id, m.{PG_COLUMN} "
            f"FROM {threads_table} c JOIN {table} m ON m.conversation_id = c.id "
            f"WHERE {where} AND m.{PG_COLUMN} @@ {to_query} "
            f"ORDER BY c.updated_at DESC, c.id DESC LIMIT %s) h "
            "ORDER BY h.conversation_id, r DESC, h.id DESC) best "
            "ORDER BY r DESC, conversation_id DESC LIMIT %s"
        )
        params: list[Any] = [tsquery, *where_params, tsquery, RANK_WINDOW, wanted]
    else:
        match = " ".join(f'"{term}"*' for term in terms)
        sql = (
            "SELECT conversation_id, id FROM ("
            f"SELECT m.conversation_id AS conversation_id, m.id AS id, MIN(f.rank) AS r "
            f"FROM {FTS_TABLE} f JOIN {table} m ON m.id = f.rowid "
            f"WHERE {FTS_TABLE} MATCH %s AND m.conversation_id IN ({inner_sql}) "
            "GROUP BY m.conversation_id) best "
            "ORDER BY r, conversation_id DESC LIMIT %s"
        )
        params = [match, *inner_params, wanted]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(int(cid), int(mid)) for cid, mid in cursor.fetchall()]
