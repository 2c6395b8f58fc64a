"""Helpers for the migrations that carry a 0.28.3 (predecessor) database to our schema.

Not a migration (the loader skips modules starting with ``_``). Two pieces:

- ``OnPredecessorSchema`` wraps the operations of migrations 0002 to 0009. They always change
  the migration state, but skip the database when it already holds our own schema, as created
  by the unreleased development ``0001_initial`` of 1.0 (recorded under the same name as the
  predecessor's). Such a database already is the end state of the chain.
- ``CopyPredecessorData`` is a ``RunPython`` that declares which old columns it copies, so a
  test can prove that nothing is dropped before it has been copied.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable
from typing import Any

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState

CONVERSATION_TABLE = "django_pydantic_agent_store_storedconversation"
MESSAGE_TABLE = "django_pydantic_agent_store_storedmessage"


def holds_current_schema(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    """Whether the database already holds our schema (message rows, no ``messages`` column).

    True only for a database built by the development ``0001_initial`` of 1.0: on the
    predecessor's path the ``messages`` column exists until migration 0009 drops it, and that
    migration checks before dropping.
    """
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
        if MESSAGE_TABLE not in tables or CONVERSATION_TABLE not in tables:
            return False
        columns = {
            column.name
            for column in connection.introspection.get_table_description(
                cursor, CONVERSATION_TABLE
            )
        }
    return "messages" not in columns


class OnPredecessorSchema(migrations.SeparateDatabaseAndState):
    """Apply ``operations`` to the state always, and to the database unless it is already ours.

    Going backwards never skips: at any point of the chain a database that was ours and one
    that was the predecessor's hold the same schema.
    """

    def __init__(self, *operations: Operation) -> None:
        super().__init__(database_operations=list(operations), state_operations=list(operations))

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (self.__class__.__qualname__, list(self.database_operations), {})

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if holds_current_schema(schema_editor):
            return
        super().database_forwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"On a predecessor schema: {len(self.database_operations)} operations"


class CopyPredecessorData(migrations.RunPython):
    """A ``RunPython`` that saves the data of the old columns it names before they go.

    ``copies`` holds ``(model_name, field_name)`` pairs, lower case, as in ``RemoveField``.
    """

    def __init__(
        self,
        code: Any,
        reverse_code: Any,
        *,
        copies: Iterable[tuple[str, str]],
    ) -> None:
        super().__init__(code, reverse_code)
        self.copies = frozenset(copies)


APP_LABEL = "django_pydantic_agent_store"
#: Conversations whose messages are copied per query, and message rows per INSERT.
BATCH_CONVERSATIONS = 200
BATCH_ROWS = 500


def check_attachment_ids(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Refuse, before anything changes, attachment ids that cannot become our UUID ids.

    The predecessor's ``DefaultAttachmentStore`` wrote ``uuid4().hex``, unique per owner; ours
    is a UUID column unique across owners. Only hand-written rows can fail this.
    """
    attachment = apps.get_model(APP_LABEL, "StoredAttachment")
    seen: dict[str, str] = {}
    bad: list[str] = []
    rows = attachment.objects.using(schema_editor.connection.alias).values_list(
        "attachment_id", flat=True
    )
    for raw in rows.iterator(chunk_size=2000):
        try:
            key = uuid.UUID(str(raw)).hex
        except ValueError:
            bad.append(f"{raw!r} is not a UUID")
            continue
        if key in seen:
            bad.append(f"{raw!r} is used by more than one row (also as {seen[key]!r})")
        seen[key] = str(raw)
    if bad:
        listed = "; ".join(bad[:5]) + ("; ..." if len(bad) > 5 else "")
        raise ValueError(
            f"{len(bad)} StoredAttachment.attachment_id value(s) cannot become the UUID ids of "
            f"django-pydantic-agent 1.0: {listed}. Give each row a unique UUID (and update the "
            "messages that quote it), then run migrate again; nothing has been changed."
        )


def _as_list(messages: Any) -> list[Any]:
    if messages is None:
        return []
    return messages if isinstance(messages, list) else [messages]


def _text(message: Any, name: str, limit: int) -> str:
    value = message.get(name) if isinstance(message, dict) else None
    return value[:limit] if isinstance(value, str) else ""


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def message_digest(message: Any) -> str:
    """The SHA-256 hex digest of a message's canonical JSON (the column 0011 drops)."""
    return hashlib.sha256(_CANONICAL.encode(message).encode("utf-8")).hexdigest()


def copy_predecessor_data(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Copy what the predecessor kept in columns that 0008 drops; safe to run twice.

    - Each conversation's ``messages`` list becomes one ``StoredMessage`` row per message
      (only for conversations that have no rows yet), batched.
    - Attachment ids are rewritten as 32-digit hex, the form a UUID column compares on SQLite.
    - An attachment's ``thread_id`` label, when it names a thread of the same owner, becomes a
      link to that conversation (the only meaning the label had).
    """
    alias = schema_editor.connection.alias
    conversation = apps.get_model(APP_LABEL, "StoredConversation")
    message = apps.get_model(APP_LABEL, "StoredMessage")
    attachment = apps.get_model(APP_LABEL, "StoredAttachment")
    link = apps.get_model(APP_LABEL, "StoredConversationAttachment")

    pending = list(
        conversation.objects.using(alias)
        .filter(message_rows__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for start in range(0, len(pending), BATCH_CONVERSATIONS):
        batch = pending[start : start + BATCH_CONVERSATIONS]
        rows = [
            message(
                conversation_id=pk,
                position=position,
                message_id=_text(item, "id", 255),
                role=_text(item, "role", 32),
                data=item,
                digest=message_digest(item),
            )
            for pk, messages in conversation.objects.using(alias)
            .filter(pk__in=batch)
            .values_list("pk", "messages")
            for position, item in enumerate(_as_list(messages))
        ]
        message.objects.using(alias).bulk_create(rows, batch_size=BATCH_ROWS)

    for pk, raw in attachment.objects.using(alias).values_list("pk", "attachment_id").iterator():
        key = uuid.UUID(str(raw)).hex
        if key != raw:
            attachment.objects.using(alias).filter(pk=pk).update(attachment_id=key)

    labelled = attachment.objects.using(alias).exclude(thread_id="")
    for pk, owner_id, thread_id in labelled.values_list("pk", "owner_id", "thread_id").iterator():
        target = (
            conversation.objects.using(alias)
            .filter(owner_id=owner_id, thread_id=thread_id)
            .values_list("pk", flat=True)
            .first()
        )
        if target is not None:
            link.objects.using(alias).get_or_create(conversation_id=target, attachment_id=pk)


def restore_predecessor_data(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """The way back (``migrate django_pydantic_agent_store 0005``): rows into ``messages``.

    Also writes attachment ids back as hex, which a PostgreSQL ``uuid`` column cast to text
    spells with dashes. The message rows are left for the reverse of 0006, which drops them.
    """
    alias = schema_editor.connection.alias
    conversation = apps.get_model(APP_LABEL, "StoredConversation")
    message = apps.get_model(APP_LABEL, "StoredMessage")
    attachment = apps.get_model(APP_LABEL, "StoredAttachment")

    pks = list(conversation.objects.using(alias).order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(pks), BATCH_CONVERSATIONS):
        batch = pks[start : start + BATCH_CONVERSATIONS]
        collected: dict[int, list[Any]] = {pk: [] for pk in batch}
        for pk, data in (
            message.objects.using(alias)
            .filter(conversation_id__in=batch)
            .order_by("conversation_id", "position")
            .values_list("conversation_id", "data")
        ):
            collected[pk].append(data)
        for pk, messages in collected.items():
            conversation.objects.using(alias).filter(pk=pk).update(messages=messages)

    for pk, raw in attachment.objects.using(alias).values_list("pk", "attachment_id").iterator():
        key = uuid.UUID(str(raw)).hex
        if key != raw:
            attachment.objects.using(alias).filter(pk=pk).update(attachment_id=key)


#: The models 0006 renames, as ``(old, new)`` model names.
RENAMED_MODELS = (
    ("conversationattachment", "storedconversationattachment"),
    ("storedmemory", "storedmemoryfile"),
)


def _rename_content_types(schema_editor: BaseDatabaseSchemaEditor, *, backwards: bool) -> None:
    """Rename the content types of the renamed models, as Django does for a plain RenameModel.

    Django only does it for a ``RenameModel`` at the top level of a migration, and ours sit
    inside ``OnPredecessorSchema``. Keeps admin log entries and object permissions attached.
    Skipped without ``django.contrib.contenttypes`` or before its table exists.
    """
    from django.apps import apps as global_apps

    if not global_apps.is_installed("django.contrib.contenttypes"):
        return
    from django.contrib.contenttypes.models import ContentType

    connection = schema_editor.connection
    with connection.cursor() as cursor:
        if ContentType._meta.db_table not in connection.introspection.table_names(cursor):
            return
    content_types = ContentType.objects.db_manager(connection.alias)
    for old, new in RENAMED_MODELS:
        source, target = (new, old) if backwards else (old, new)
        if not content_types.filter(app_label=APP_LABEL, model=target).exists():
            content_types.filter(app_label=APP_LABEL, model=source).update(model=target)
    ContentType.objects.clear_cache()


def rename_content_types(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _rename_content_types(schema_editor, backwards=False)


def restore_content_types(apps: Any, schema_editor: BaseDatabaseSchemaEditor) -> None:
    _rename_content_types(schema_editor, backwards=True)
