"""Every message row becomes a record row (``contrib.store.rows``): batched, idempotent, reversible.

Forwards, for each conversation holding wire rows (``message_uuid`` NULL: written by
``save()`` or by 0.28.3), its wire messages are read into records as ``save()`` reads them,
each record taking the position of its first message and keeping those messages verbatim in
``wire``; a record row of 0.29 that kept wire keys under ``record["wire_extras"]`` has them
moved to ``record["wire_extra"]``. Backwards, every row holding ``wire`` becomes one wire row
per message again (positions renumbered), which 0.29 reads. Each batch of conversations is its
own transaction, so an interrupted run resumes where it stopped; a converted conversation is
never converted twice.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, transaction

from django_pydantic_agent.contrib.store.migrations._predecessor import CopyPredecessorData

APP_LABEL = "django_pydantic_agent_store"
BATCH_CONVERSATIONS = 100
BATCH_ROWS = 500
_LEGACY_EXTRAS = "wire_extras"


def _batches(queryset: Any) -> Any:
    """Conversation pks of ``queryset`` in batches, each read after the last was written."""
    last = 0
    while True:
        pks = list(
            queryset.filter(conversation_id__gt=last)
            .order_by("conversation_id")
            .values_list("conversation_id", flat=True)
            .distinct()[:BATCH_CONVERSATIONS]
        )
        if not pks:
            return
        yield pks
        last = pks[-1]


def _text(item: Any, key: str, limit: int) -> str:
    """``item[key]`` cut to ``limit`` when ``item`` is an object with a string there, else ``""``."""
    value = item.get(key) if isinstance(item, dict) else None
    return value[:limit] if isinstance(value, str) else ""


def to_record_rows(apps: Any, schema_editor: Any) -> None:
    from django_pydantic_agent.contrib.store.rows import insert, saved_records

    alias = schema_editor.connection.alias
    conversation = apps.get_model(APP_LABEL, "StoredConversation")
    message = apps.get_model(APP_LABEL, "StoredMessage")
    rows = message.objects.using(alias)
    for pks in _batches(rows.filter(message_uuid__isnull=True)):
        with transaction.atomic(using=alias):
            threads = conversation.objects.using(alias).filter(pk__in=pks)
            inserts = []
            for pk, thread_id, chat_uuid in threads.values_list("pk", "thread_id", "chat_uuid"):
                wire_rows = list(
                    rows.filter(conversation_id=pk, message_uuid__isnull=True)
                    .order_by("position")
                    .values_list("position", "data")
                )
                saved = saved_records(
                    [data for _, data in wire_rows], chat_uuid=chat_uuid, salt=thread_id
                )
                positions = [position for position, _ in wire_rows]
                inserts.extend((pk, positions[item.index], item) for item in saved or [])
            rows.filter(conversation_id__in=pks, message_uuid__isnull=True).delete()
            insert(message, inserts, using=alias)
            # What the last save() stored no longer describes the rows: the next one compares.
            threads.update(save_state="")
    legacy = rows.filter(record__has_key=_LEGACY_EXTRAS)
    for pks in _batches(legacy):
        with transaction.atomic(using=alias):
            changed = []
            for row in legacy.filter(conversation_id__in=pks):
                record = dict(row.record)
                extras = record.pop(_LEGACY_EXTRAS) or {}
                record["wire_extra"] = {**(record.get("wire_extra") or {}), **extras} or None
                row.record = record
                changed.append(row)
            rows.bulk_update(changed, ["record"], batch_size=BATCH_ROWS)
    for name, empty in (("record", {}), ("tool_calls", []), ("reasonings", [])):
        rows.filter(**{f"{name}__isnull": True}).update(**{name: empty})


def to_wire_rows(apps: Any, schema_editor: Any) -> None:
    from django_pydantic_agent.contrib.store.migrations._predecessor import message_digest
    from django_pydantic_agent.contrib.store.rows import wire_of

    alias = schema_editor.connection.alias
    conversation = apps.get_model(APP_LABEL, "StoredConversation")
    message = apps.get_model(APP_LABEL, "StoredMessage")
    rows = message.objects.using(alias)
    for pks in _batches(rows.filter(wire__isnull=False)):
        with transaction.atomic(using=alias):
            kept = list(
                rows.filter(conversation_id__in=pks).order_by("conversation_id", "position")
            )
            rows.filter(conversation_id__in=pks).delete()
            inserts = []
            position: dict[int, int] = {}
            for row in kept:
                following = position.get(row.conversation_id, 0)
                if row.wire is None:  # written by a run: 0.29 reads record rows as they are
                    row.pk = None
                    row.position = following
                    inserts.append(row)
                    following += 1
                else:
                    for item in wire_of(row.wire, row.message_id, row.role, row.content):
                        inserts.append(
                            message(
                                conversation_id=row.conversation_id,
                                position=following,
                                message_id=_text(item, "id", 255),
                                role=_text(item, "role", 32),
                                data=item,
                                digest=message_digest(item),
                                record=None,
                                tool_calls=None,
                                reasonings=None,
                            )
                        )
                        following += 1
                position[row.conversation_id] = following
            rows.bulk_create(inserts, batch_size=BATCH_ROWS)
            conversation.objects.using(alias).filter(pk__in=pks).update(save_state="")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_pydantic_agent_store", "0010_storedmessage_wire"),
    ]

    operations = [
        CopyPredecessorData(
            to_record_rows,
            to_wire_rows,
            copies=[("storedmessage", "data"), ("storedmessage", "digest")],
        ),
    ]
