"""The message text index kept lazily (migration 0018): a write indexes nothing, a search
catches up first, and what changes after that (an edit, a delete, a purge, a retention prune)
is what the next search finds. On SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.core.management import call_command
from django.db import close_old_connections, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage
from django_pydantic_agent.contrib.store.retention import RetentionPolicy, apply_retention, due_ids
from django_pydantic_agent.contrib.store.search import find_threads
from django_pydantic_agent.contrib.store.search_index import (
    FTS_TABLE,
    MARK_TABLE,
    PG_COLUMN,
    catch_up,
)
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import Conversation
from django_pydantic_agent.persistence.listing import ThreadQuery

pytestmark = pytest.mark.django_db(transaction=True)

STORE = DefaultConversationStore()


def save(owner: str, thread_id: str, *texts: str) -> None:
    messages = [
        {"id": f"{thread_id}-{i}", "role": "user" if i == 0 else "assistant", "content": text}
        for i, text in enumerate(texts)
    ]
    STORE._store(Conversation(thread_id=thread_id, messages=messages), owner)


def found(owner: str, text: str, **query: Any) -> list[str]:
    page = find_threads(owner, ThreadQuery(text=text, archived=None, **query))
    return [hit.meta.thread_id for hit in page.hits]


def _sqlite() -> None:
    if connection.vendor != "sqlite":
        # The reason names no database: REQUIRE_POSTGRES=1 fails skips that name one.
        pytest.skip("The FTS5 index's watermark: other databases keep no mark.")


def _fts_rows() -> int:
    """How many messages the index holds."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"SELECT COUNT(*) FROM {StoredMessage._meta.db_table} WHERE {PG_COLUMN} IS NOT NULL"
            )
        else:
            cursor.execute(f"SELECT COUNT(*) FROM {FTS_TABLE}_docsize")
        return int(cursor.fetchone()[0])


def _mark() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT indexed_through FROM {MARK_TABLE}")
        return int(cursor.fetchone()[0])


def test_a_save_indexes_nothing_and_the_next_search_catches_up_once() -> None:
    before = _fts_rows()
    save("1", "cats", "About cats", "a tabby naps", "the tabby purrs")
    assert _fts_rows() == before  # the write path touched no index
    assert found("1", "tabby") == ["cats"]
    assert _fts_rows() == before + 3
    assert catch_up("default") == 0  # nothing new
    assert found("1", "tabby") == ["cats"]
    assert _fts_rows() == before + 3  # never indexed twice


def test_sqlite_catches_up_past_a_mark_and_writes_nothing_when_nothing_is_new() -> None:
    _sqlite()
    save("1", "cats", "About cats", "a tabby naps")
    assert found("1", "tabby") == ["cats"]
    assert _mark() == StoredMessage.objects.order_by("-id").values_list("id", flat=True)[0]
    with CaptureQueriesContext(connection) as queries:
        assert found("1", "tabby") == ["cats"]
    assert not any(q["sql"].startswith(("INSERT", "UPDATE")) for q in queries.captured_queries)


def test_a_search_does_not_wait_for_a_row_a_write_holds(django_db_blocker: Any) -> None:
    """PostgreSQL: a row another transaction holds locked is left to the next search, which
    finds it; the search neither waits nor deadlocks."""
    if connection.vendor != "postgresql":
        pytest.skip("SKIP LOCKED: SQLite has one writer at a time.")
    save("1", "held", "Held", "a llama in a lock")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with django_db_blocker.unblock():
            try:
                with transaction.atomic():
                    list(
                        StoredMessage.objects.select_for_update().filter(content__contains="llama")
                    )
                    held.set()
                    release.wait(10)
            finally:
                close_old_connections()
                connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        assert found("1", "llama") == []  # not indexed yet: skipped, not waited for
    finally:
        release.set()
        holder.join(10)
    assert found("1", "llama") == ["held"]


def test_edits_after_indexing_replace_the_old_text() -> None:
    save("1", "t", "Trip", "we fly to lisbon")
    assert found("1", "lisbon") == ["t"]
    # A save that rewrites the answer (a regenerate or an edit through save()).
    save("1", "t", "Trip", "we drive to porto")
    assert found("1", "lisbon") == []
    assert found("1", "porto") == ["t"]
    StoredMessage.objects.filter(content="we drive to porto").update(content="we sail to faro")
    assert found("1", "porto") == []
    assert found("1", "faro") == ["t"]


def test_a_message_that_completes_after_a_search_is_found() -> None:
    save("1", "live", "Live", "half an answer")
    StoredMessage.objects.filter(content="half an answer").update(status="active")
    assert found("1", "answer") == []  # caught up past it, but active: not indexed
    StoredMessage.objects.filter(content="half an answer").update(
        content="a whole answer", status="complete"
    )
    assert found("1", "whole") == ["live"]
    assert found("1", "half") == []


def test_deleting_a_thread_a_purge_and_a_retention_prune_take_the_texts_along() -> None:
    for name in ("deleted", "pruned", "purged", "kept"):
        save("1", name, name.title(), f"zebra {name}")
    assert sorted(found("1", "zebra")) == ["deleted", "kept", "pruned", "purged"]
    STORE._remove("deleted", "1")
    StoredConversation.objects.filter(thread_id="purged").delete()
    assert sorted(found("1", "zebra")) == ["kept", "pruned"]
    StoredConversation.objects.filter(thread_id="kept").update(updated_at="2099-01-01T00:00Z")
    apply_retention(due_ids([RetentionPolicy(keep_newest=1)]))
    assert found("1", "zebra") == ["kept"]
    call_command("agent_store_prune_conversations", "--keep-newest", "1", stdout=None)
    assert found("1", "zebra") == ["kept"]
    assert _fts_rows() == StoredMessage.objects.count()  # no text of a gone message left


def test_a_row_written_under_the_mark_is_indexed_at_once() -> None:
    """Ids under the mark (an import that keeps ids, a reset sequence) skip no text."""
    _sqlite()
    save("1", "first", "First", "an okapi")
    assert found("1", "okapi") == ["first"]
    row = StoredMessage.objects.get(content="an okapi")
    StoredMessage.objects.filter(pk=row.pk).delete()
    row.content = "an okapi again"
    row.save(force_insert=True)  # the same id, under the mark
    assert row.pk <= _mark()
    assert found("1", "again") == ["first"]


def test_another_owners_text_is_caught_up_but_never_found() -> None:
    save("2", "bobs", "Bob", "a secret walrus")
    save("1", "alices", "Alice", "a public walrus")
    assert found("1", "walrus") == ["alices"]
    assert found("1", "secret") == []
    assert found("2", "walrus") == ["bobs"]


class _ReadsFromReplica:
    """A router that reads the store's models from the ``replica`` alias."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "default"


def test_a_search_routed_to_a_read_replica_writes_the_index_on_the_primary() -> None:
    from django.db import connections
    from django.test import override_settings

    save("1", "cats", "About cats", "a tabby naps")
    # The replica: the same database under another alias, refusing every write.
    primary = connections["default"]
    connections["replica"] = type(primary)({**primary.settings_dict}, alias="replica")
    refused: list[str] = []

    def read_only(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip().split(None, 1)[0].upper() in {"INSERT", "UPDATE", "DELETE"}:
            refused.append(sql)
            raise RuntimeError("cannot execute a write on a read-only replica")
        return execute(sql, params, many, context)

    try:
        with (
            override_settings(DATABASE_ROUTERS=[f"{__name__}._ReadsFromReplica"]),
            connections["replica"].execute_wrapper(read_only),
        ):
            assert found("1", "tabby") == ["cats"]
    finally:
        connections["replica"].close()
        del connections["replica"]
    assert refused == []
    assert _fts_rows() >= 2  # caught up on the primary
