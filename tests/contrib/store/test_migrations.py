"""The migration chain: 0.28.3's history (0001-0005), then ours, and nothing lost between.

Each test migrates a scratch SQLite database of its own (the suite's database stays at the
latest state). ``tests/e2e/test_upgrade.py`` upgrades a database the predecessor itself
filled, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import importlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections, migrations
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations.base import Operation
from django.db.migrations.recorder import MigrationRecorder
from django.db.migrations.state import ProjectState
from django.test import override_settings

from django_pydantic_agent.contrib.store.migrations._predecessor import (
    BATCH_CONVERSATIONS,
    CopyPredecessorData,
    OnPredecessorSchema,
)
from django_pydantic_agent.contrib.store.rows import saved_wire

APP = "django_pydantic_agent_store"
LATEST = "0021_storedfeedback"
PREDECESSOR_LEAF = (APP, "0005_storedmemory_storedmemoryoperation")
DEV_MIGRATIONS = {APP: "tests.contrib.store.dev_schema.migrations"}
SCRATCH = "upgrade_scratch"


@pytest.fixture
def scratch(tmp_path: Path, django_db_blocker: Any) -> Iterator[BaseDatabaseWrapper]:
    """A connection to an empty SQLite file, registered as ``upgrade_scratch``."""
    config = {**connections.settings["default"], "NAME": str(tmp_path / "scratch.sqlite3")}
    config["ENGINE"] = "django.db.backends.sqlite3"
    connections.settings[SCRATCH] = config
    with django_db_blocker.unblock():
        try:
            yield connections[SCRATCH]
        finally:
            connections[SCRATCH].close()
            del connections[SCRATCH]
            del connections.settings[SCRATCH]


def _migrate(connection: BaseDatabaseWrapper, target: tuple[str, str] | None = None) -> None:
    executor = MigrationExecutor(connection)
    leaf = target or executor.loader.graph.leaf_nodes(APP)[0]
    executor.migrate([leaf])


def _apps_at(connection: BaseDatabaseWrapper, node: tuple[str, str]) -> Any:
    return MigrationLoader(connection).project_state(node).apps


def _applied(connection: BaseDatabaseWrapper) -> list[str]:
    return sorted(
        name for app, name in MigrationRecorder(connection).applied_migrations() if app == APP
    )


def _plan() -> list[migrations.Migration]:
    loader = MigrationLoader(None, ignore_no_migrations=True)
    leaf = loader.graph.leaf_nodes(APP)[0]
    return [loader.graph.nodes[node] for node in loader.graph.forwards_plan(leaf)]


def _flat(operations: list[Operation]) -> Iterator[Operation]:
    for operation in operations:
        if isinstance(operation, migrations.SeparateDatabaseAndState):
            yield from _flat(operation.database_operations)
        else:
            yield operation


def test_the_chain_starts_with_the_predecessors_history() -> None:
    names = [migration.name for migration in _plan()]
    assert names[:5] == [
        "0001_initial",
        "0002_snapshot_state",
        "0003_attachment_content_hash_and_conversation_links",
        "0004_alter_storedattachment_file",
        "0005_storedmemory_storedmemoryoperation",
    ]
    assert names[5:] == [
        "0006_successor_schema",
        "0007_copy_predecessor_data",
        "0008_drop_predecessor_columns",
        "0009_chat_records_and_run_records",
        "0010_storedmessage_wire",
        "0011_one_message_shape",
        "0012_one_message_shape_columns",
        "0013_branches",
        "0014_thread_search_and_archive",
        "0015_spend_and_usage",
        "0016_message_agui_id_index",
        "0017_storedagentrun_resumes",
        "0018_lazy_search_index",
        "0019_storedsummary",
        "0020_storedmessage_no_conversation_index",
        "0021_storedfeedback",
    ]


def test_no_column_or_table_goes_before_a_migration_copies_it() -> None:
    """Walk the plan: a drop or a type change of a predecessor column needs an earlier copy.

    Columns are followed through renames; a copy counts only for later migrations (each
    migration commits on its own, so the copy is durable before the drop runs).
    """
    state = ProjectState()
    old: set[tuple[str, str]] = set()  # predecessor columns, under their current names
    copied: set[tuple[str, str]] = set()
    refused: list[str] = []
    for migration in _plan():
        if migration.name == "0006_successor_schema":
            old = {
                (name, field) for (_, name), model in state.models.items() for field in model.fields
            }
        copied_here: set[tuple[str, str]] = set()
        for operation in _flat(migration.operations):
            where = f"{migration.name}: {operation.describe()}"
            if isinstance(operation, CopyPredecessorData):
                copied_here |= operation.copies
            elif isinstance(operation, migrations.RenameModel):
                renamed = {(m, f) for m, f in old if m == operation.old_name_lower}
                old = (old - renamed) | {(operation.new_name_lower, f) for _, f in renamed}
            elif isinstance(operation, migrations.RemoveField):
                key = (operation.model_name_lower, operation.name_lower)
                if key in old and key not in copied:
                    refused.append(where)
            elif isinstance(operation, migrations.DeleteModel):
                if any(m == operation.name_lower for m, _ in old):
                    refused.append(where)
            elif isinstance(operation, migrations.AlterField):
                key = (operation.model_name_lower, operation.name_lower)
                field = state.models[APP, key[0]].fields[key[1]]
                retyped = field.get_internal_type() != operation.field.get_internal_type()
                if key in old and retyped and key not in copied:
                    refused.append(where)
            elif isinstance(operation, migrations.RunSQL) and re.search(
                r"\bDROP\b", str(operation.sql), re.IGNORECASE
            ):
                refused.append(where)
            operation.state_forwards(APP, state)
        copied |= copied_here
    assert not refused, "dropped or retyped before a data copy:\n" + "\n".join(refused)
    assert ("storedconversation", "messages") in copied
    assert ("storedattachment", "attachment_id") in copied


def _columns(connection: BaseDatabaseWrapper) -> dict[str, set[str]]:
    with connection.cursor() as cursor:
        return {
            table: {c.name for c in connection.introspection.get_table_description(cursor, table)}
            for table in connection.introspection.table_names(cursor)
            if table.startswith(APP)
        }


def test_sqlmigrate_drops_only_what_an_earlier_migration_copied(
    scratch: BaseDatabaseWrapper,
) -> None:
    """What ``sqlmigrate`` shows for a 0.28.3 database drops nothing that was not copied first.

    Per migration: every ``DROP COLUMN`` names a copied column; every ``DROP TABLE`` is
    SQLite's rebuild (``INSERT INTO "new__t" ... SELECT ... FROM "t"`` first); and, applied,
    every column the migration made disappear (a rebuild that leaves one out included) was
    copied by an earlier migration.
    """
    _migrate(scratch, PREDECESSOR_LEAF)
    copied: set[tuple[str, str]] = set()
    refused: list[str] = []
    for migration in _plan()[5:]:
        sql = "\n".join(MigrationExecutor(scratch).loader.collect_sql([(migration, False)]))
        for table, column in re.findall(r'ALTER TABLE "(\w+)" DROP COLUMN "(\w+)"', sql):
            if (table.removeprefix(f"{APP}_"), column) not in copied:
                refused.append(f"{migration.name}: drops {table}.{column}")
        for table in re.findall(r'DROP TABLE "(\w+)"', sql):
            if f'INSERT INTO "new__{table}"' not in sql:
                refused.append(f"{migration.name}: drops table {table}")
        renamed = {
            old: new
            for old, new in re.findall(r'ALTER TABLE "(\w+)" RENAME TO "(\w+)"', sql)
            if not old.startswith("new__")
        }
        before = _columns(scratch)
        MigrationExecutor(scratch).migrate([(APP, migration.name)])
        after = _columns(scratch)
        for table, columns in before.items():
            for column in sorted(columns - after.get(renamed.get(table, table), set())):
                if (table.removeprefix(f"{APP}_"), column) not in copied:
                    refused.append(f"{migration.name}: loses {table}.{column}")
        for operation in _flat(migration.operations):
            if isinstance(operation, CopyPredecessorData):
                copied |= operation.copies
    assert not refused, "\n".join(refused)
    assert copied, "no migration copied anything"


def test_a_fresh_database_and_an_upgraded_one_meet_at_the_same_state(
    scratch: BaseDatabaseWrapper,
) -> None:
    _migrate(scratch)
    assert _applied(scratch)[-1] == LATEST
    with scratch.cursor() as cursor:
        tables = set(scratch.introspection.table_names(cursor))
        conversation = {
            c.name
            for c in scratch.introspection.get_table_description(
                cursor, f"{APP}_storedconversation"
            )
        }
    assert f"{APP}_storedmessage" in tables
    assert f"{APP}_conversationattachment" not in tables
    assert f"{APP}_storedmemory" not in tables
    assert "messages" not in conversation


def _predecessor_rows(connection: BaseDatabaseWrapper, threads: int) -> tuple[Any, Any]:
    apps = _apps_at(connection, PREDECESSOR_LEAF)
    conversation = apps.get_model(APP, "StoredConversation")
    attachment = apps.get_model(APP, "StoredAttachment")
    db = connection.alias
    for number in range(threads):
        conversation.objects.using(db).create(
            owner_id="7",
            thread_id=f"t{number}",
            title=f"Thread {number}",
            messages=[
                {"id": f"m{number}-{i}", "role": "user" if i % 2 == 0 else "assistant"}
                for i in range(3)
            ],
        )
    dashed = str(uuid.uuid4())
    attachment.objects.using(db).create(
        owner_id="7", attachment_id=dashed, thread_id="t1", name="a.txt", file="x/a"
    )
    attachment.objects.using(db).create(
        owner_id="7", attachment_id=uuid.uuid4().hex, thread_id="nowhere", file="x/b"
    )
    return conversation, dashed


def test_the_copy_makes_one_row_per_message_and_keeps_labels_as_links(
    scratch: BaseDatabaseWrapper,
) -> None:
    _migrate(scratch, PREDECESSOR_LEAF)
    _predecessor_rows(scratch, BATCH_CONVERSATIONS + 5)  # more than one batch
    _migrate(scratch)

    apps = _apps_at(scratch, (APP, LATEST))
    message = apps.get_model(APP, "StoredMessage")
    rows = message.objects.using(SCRATCH).filter(conversation__thread_id="t204")
    assert [
        (row.position, row.message_id, row.role, saved_wire(row))
        for row in rows.order_by("position")
    ] == [
        (0, "m204-0", "user", [{"id": "m204-0", "role": "user"}]),
        (1, "m204-1", "assistant", [{"id": "m204-1", "role": "assistant"}]),
        (2, "m204-2", "user", [{"id": "m204-2", "role": "user"}]),
    ]
    assert message.objects.using(SCRATCH).count() == 3 * (BATCH_CONVERSATIONS + 5)

    link = apps.get_model(APP, "StoredConversationAttachment")
    linked = link.objects.using(SCRATCH).values_list("conversation__thread_id", "attachment__name")
    assert list(linked) == [("t1", "a.txt")]  # the label naming no thread links nothing


def test_the_copy_is_idempotent(scratch: BaseDatabaseWrapper) -> None:
    from django_pydantic_agent.contrib.store.migrations._predecessor import (
        copy_predecessor_data,
    )

    _migrate(scratch, PREDECESSOR_LEAF)
    _predecessor_rows(scratch, 3)
    _migrate(scratch, (APP, "0007_copy_predecessor_data"))
    apps = _apps_at(scratch, (APP, "0007_copy_predecessor_data"))
    with scratch.schema_editor() as editor:
        copy_predecessor_data(apps, editor)
    message = apps.get_model(APP, "StoredMessage")
    assert message.objects.using(SCRATCH).count() == 9
    link = apps.get_model(APP, "StoredConversationAttachment")
    assert link.objects.using(SCRATCH).count() == 1


def test_attachment_ids_become_uuids_that_our_store_finds(scratch: BaseDatabaseWrapper) -> None:
    _migrate(scratch, PREDECESSOR_LEAF)
    _, dashed = _predecessor_rows(scratch, 2)
    _migrate(scratch)
    apps = _apps_at(scratch, (APP, LATEST))
    attachment = apps.get_model(APP, "StoredAttachment")
    found = attachment.objects.using(SCRATCH).get(attachment_id=uuid.UUID(dashed))
    assert found.name == "a.txt"


def test_an_id_that_cannot_be_a_uuid_stops_the_upgrade_before_any_change(
    scratch: BaseDatabaseWrapper,
) -> None:
    _migrate(scratch, PREDECESSOR_LEAF)
    apps = _apps_at(scratch, PREDECESSOR_LEAF)
    attachment = apps.get_model(APP, "StoredAttachment")
    attachment.objects.using(SCRATCH).create(owner_id="7", attachment_id="hand-made", file="x")
    with pytest.raises(ValueError, match=r"'hand-made' is not a UUID.*nothing has been changed"):
        _migrate(scratch)
    assert _applied(scratch)[-1] == PREDECESSOR_LEAF[1]
    with scratch.cursor() as cursor:
        assert f"{APP}_storedmessage" not in scratch.introspection.table_names(cursor)


def test_renamed_models_take_their_content_types_and_permissions_along(
    scratch: BaseDatabaseWrapper,
) -> None:
    executor = MigrationExecutor(scratch)
    executor.migrate([PREDECESSOR_LEAF, *executor.loader.graph.leaf_nodes("contenttypes")])
    content_types = _apps_at(scratch, ("contenttypes", "0002_remove_content_type_name"))
    content_type = content_types.get_model("contenttypes", "ContentType")
    old = content_type.objects.using(SCRATCH).create(app_label=APP, model="storedmemory")

    _migrate(scratch)

    renamed = content_type.objects.using(SCRATCH).get(pk=old.pk)
    assert renamed.model == "storedmemoryfile"
    _migrate(scratch, PREDECESSOR_LEAF)
    assert content_type.objects.using(SCRATCH).get(pk=old.pk).model == "storedmemory"


def test_a_database_built_by_the_development_0001_is_left_as_it_is(
    scratch: BaseDatabaseWrapper,
) -> None:
    """The unreleased 1.0 ``0001_initial`` built our schema: 0002-0008 only record themselves."""
    with override_settings(MIGRATION_MODULES=DEV_MIGRATIONS):
        _migrate(scratch, (APP, "0001_initial"))
        dev = _apps_at(scratch, (APP, "0001_initial"))
    from django_pydantic_agent.contrib.store.models import StoredMessage

    row = (
        dev.get_model(APP, "StoredConversation")
        .objects.using(SCRATCH)
        .create(owner_id="1", thread_id="dev")
    )
    dev.get_model(APP, "StoredMessage").objects.using(SCRATCH).create(
        conversation=row, position=0, data={"id": "m", "role": "user"}
    )

    assert isinstance(_plan()[1].operations[0], OnPredecessorSchema)
    _migrate(scratch)

    assert _applied(scratch)[-1] == LATEST
    kept = StoredMessage.objects.using(SCRATCH).get(conversation__thread_id="dev")
    assert saved_wire(kept) == [{"id": "m", "role": "user"}]


_SAVED = [
    {"id": "u1", "role": "user", "content": "weather?", "attachments": [{"id": "x"}]},
    {"id": "r1", "role": "reasoning", "content": "think"},
    {
        "id": "a1",
        "role": "assistant",
        "toolCalls": [
            {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
        ],
    },
    {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "sunny"},
    {"id": "a2", "role": "assistant", "content": "It is sunny", "odd": [1, None, "é"]},
    "not a message",
]


def _at_0009(connection: BaseDatabaseWrapper, threads: int) -> Any:
    """Rows as 0.29 left them: threads saved whole (wire rows), and one a run wrote."""
    _migrate(connection, (APP, "0009_chat_records_and_run_records"))
    apps = _apps_at(connection, (APP, "0009_chat_records_and_run_records"))
    conversation = apps.get_model(APP, "StoredConversation")
    message = apps.get_model(APP, "StoredMessage")
    db = connection.alias
    for number in range(threads):
        row = conversation.objects.using(db).create(
            owner_id="7", thread_id=f"saved{number}", chat_uuid=uuid.uuid4(), save_state="x"
        )
        message.objects.using(db).bulk_create(
            message(conversation=row, position=10 * p, data=item, message_id="", role="")
            for p, item in enumerate(_SAVED)
        )
    ran = conversation.objects.using(db).create(
        owner_id="7", thread_id="ran", chat_uuid=uuid.uuid4()
    )
    record = {"role": "user", "status": "complete", "wire_extras": {"attachments": [{"id": "y"}]}}
    message.objects.using(db).create(
        conversation=ran,
        position=0,
        message_uuid=uuid.uuid4(),
        role="user",
        content="hi",
        record=record,
        tool_calls=[],
        reasonings=[],
        status="complete",
    )
    return message


def _shape(connection: BaseDatabaseWrapper) -> list[tuple[Any, ...]]:
    message = _apps_at(connection, (APP, LATEST)).get_model(APP, "StoredMessage")
    rows = message.objects.using(connection.alias).order_by("conversation_id", "position")
    return [
        (r.conversation.thread_id, r.position, r.message_uuid, r.role, r.content, saved_wire(r))
        for r in rows.select_related("conversation")
    ]


def test_every_row_becomes_a_record_row_in_batches_and_back(scratch: BaseDatabaseWrapper) -> None:
    from django_pydantic_agent.contrib.store.migrations import _predecessor

    threads = 105  # 0011 converts 100 conversations per transaction
    _at_0009(scratch, threads)
    _migrate(scratch)

    shape = _shape(scratch)
    saved = [row for row in shape if row[0] == "saved104"]
    # One record per message, its reasoning and tool result with it; the rest verbatim.
    assert [(p, role, content) for _, p, _, role, content, _ in saved] == [
        (0, "user", "weather?"),
        (10, "assistant", ""),
        (40, "assistant", "It is sunny"),
        (50, "activity", ""),
    ]
    assert [item for row in saved for item in row[5]] == _SAVED
    assert len({row[2] for row in shape}) == len(shape)  # uuids unique across threads
    message = _apps_at(scratch, (APP, LATEST)).get_model(APP, "StoredMessage")
    call = message.objects.using(SCRATCH).get(conversation__thread_id="saved0", position=10)
    assert [(c["tool_call_id"], c["content"]) for c in call.tool_calls] == [("c1", "sunny")]
    ran = message.objects.using(SCRATCH).get(conversation__thread_id="ran")
    assert ran.wire is None
    assert ran.record["wire_extra"] == {"attachments": [{"id": "y"}]}
    assert "wire_extras" not in ran.record
    conversation = _apps_at(scratch, (APP, LATEST)).get_model(APP, "StoredConversation")
    assert set(conversation.objects.using(SCRATCH).values_list("save_state", flat=True)) == {""}

    # Idempotent: run again, nothing changes.
    executor = MigrationExecutor(scratch)
    apps = executor.loader.project_state((APP, "0011_one_message_shape")).apps
    with scratch.schema_editor() as editor:
        importlib.import_module(
            "django_pydantic_agent.contrib.store.migrations.0011_one_message_shape"
        ).to_record_rows(apps, editor)
    assert _shape(scratch) == shape

    # Reversible: back at 0009, 0.29 finds its wire rows again, the run's record row kept.
    _migrate(scratch, (APP, "0009_chat_records_and_run_records"))
    old = _apps_at(scratch, (APP, "0009_chat_records_and_run_records"))
    rows = old.get_model(APP, "StoredMessage").objects.using(SCRATCH)
    back = rows.filter(conversation__thread_id="saved3").order_by("position")
    assert list(back.values_list("position", "data", "message_uuid")) == [
        (p, item, None) for p, item in enumerate(_SAVED)
    ]
    assert back.first().digest == _predecessor.message_digest(_SAVED[0])
    assert rows.get(conversation__thread_id="ran").content == "hi"

    _migrate(scratch)  # and forwards again, to the same records (positions renumbered)
    assert [row[:1] + row[2:] for row in _shape(scratch)] == [row[:1] + row[2:] for row in shape]


def _matches(connection: BaseDatabaseWrapper, word: str) -> list[int]:
    from django_pydantic_agent.contrib.store.search_index import FTS_TABLE

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s ORDER BY rowid", [word]
        )
        return [row[0] for row in cursor.fetchall()]


def test_0018_keeps_every_indexed_message_searchable_and_back(
    scratch: BaseDatabaseWrapper,
) -> None:
    """0014's eager index, upgraded to the lazy one: what was indexed stays found (even when
    a table rebuild had dropped 0014's triggers), edits reach it, and reversing brings the
    eager triggers back with the index whole."""
    from django_pydantic_agent.contrib.store.search_index import MARK_TABLE, catch_up

    _migrate(scratch, (APP, "0017_storedagentrun_resumes"))
    apps = _apps_at(scratch, (APP, "0017_storedagentrun_resumes"))
    conversation = apps.get_model(APP, "StoredConversation").objects.using(SCRATCH)
    message = apps.get_model(APP, "StoredMessage").objects.using(SCRATCH)
    thread = conversation.create(owner_id="1", thread_id="t", chat_uuid=uuid.uuid4())
    kept, edited = (
        message.create(
            conversation=thread,
            position=p,
            message_uuid=uuid.uuid4(),
            role="user",
            content=text,
            status="complete",
        )
        for p, text in ((0, "an old narwhal"), (1, "an old walrus"))
    )
    with scratch.cursor() as cursor:  # as a rebuild of the message table would
        cursor.execute("DROP TRIGGER dpa_store_message_fts_ai")
    late = message.create(
        conversation=thread,
        position=2,
        message_uuid=uuid.uuid4(),
        role="assistant",
        content="a late narwhal",
        status="complete",
    )
    assert _matches(scratch, "narwhal") == [kept.pk]  # 0014 missed it without its trigger

    _migrate(scratch)
    assert _matches(scratch, "narwhal") == [kept.pk, late.pk]
    with scratch.cursor() as cursor:
        cursor.execute(f"SELECT indexed_through FROM {MARK_TABLE}")
        assert cursor.fetchone()[0] == late.pk
    message.filter(pk=edited.pk).update(content="a new walrus")  # under the mark: re-indexed
    assert _matches(scratch, "old") == [kept.pk]
    message.filter(pk=late.pk).delete()
    assert _matches(scratch, "narwhal") == [kept.pk]
    new = message.create(
        conversation=thread,
        position=3,
        message_uuid=uuid.uuid4(),
        role="user",
        content="a fresh narwhal",
        status="complete",
    )
    assert _matches(scratch, "fresh") == []  # lazily: only once a search catches up
    assert catch_up(SCRATCH) == 1
    assert _matches(scratch, "narwhal") == [kept.pk, new.pk]

    _migrate(scratch, (APP, "0017_storedagentrun_resumes"))
    assert _matches(scratch, "narwhal") == [kept.pk, new.pk]
    assert _matches(scratch, "walrus") == [edited.pk]
    eager = message.create(
        conversation=thread,
        position=4,
        message_uuid=uuid.uuid4(),
        role="user",
        content="an eager narwhal",
        status="complete",
    )
    assert _matches(scratch, "eager") == [eager.pk]  # 0014's insert trigger again
