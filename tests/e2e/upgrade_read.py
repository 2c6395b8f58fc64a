"""Read a migrated predecessor database back through our stores, for ``test_upgrade.py``.

Run in a subprocess, with this repository first on ``sys.path`` and
``DJANGO_SETTINGS_MODULE=tests.e2e.upgrade_settings``::

    python -m tests.e2e.upgrade_read written.json read.json   # what our stores return
    python -m tests.e2e.upgrade_read --schema schema.json     # the app's tables, introspected

The first form reads, through ``DefaultConversationStore``, ``DefaultAttachmentStore``,
``DefaultMemoryStore`` and ``DefaultStepStore``, everything ``predecessor_fill.py`` reports it
wrote, then checks the data still works: an append, a deduplicated re-upload and a
compare-and-set write on the migrated rows.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import django

APP_TABLES = "django_pydantic_agent_store_"


def _record(value: Any) -> dict[str, Any]:
    out = {}
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        out[field.name] = item.isoformat() if isinstance(item, datetime) else item
    return out


def schema() -> dict[str, Any]:
    """The app's tables: columns, and constraints and indexes without auto-generated names.

    Only our own ``dpa_*`` names are kept: a renamed table keeps the names PostgreSQL gave
    its primary key and foreign keys under the old table name, which nothing depends on.
    """
    from django.db import connection

    tables: dict[str, Any] = {}
    with connection.cursor() as cursor:
        for table in sorted(connection.introspection.table_names(cursor)):
            if not table.startswith(APP_TABLES):
                continue
            columns = sorted(
                [
                    column.name,
                    str(column.type_code),
                    column.internal_size,
                    column.display_size,
                    column.null_ok,
                    getattr(column, "collation", None),
                ]
                for column in connection.introspection.get_table_description(cursor, table)
            )
            constraints = sorted(
                json.dumps(
                    {
                        "name": name if name.startswith("dpa_") else "",
                        **{
                            key: value
                            for key, value in info.items()
                            if key not in {"definition", "options"}
                        },
                    },
                    sort_keys=True,
                    default=str,
                )
                for name, info in connection.introspection.get_constraints(cursor, table).items()
            )
            tables[table] = {"columns": columns, "constraints": constraints}
    return tables


async def read(written: dict[str, Any]) -> dict[str, Any]:
    from asgiref.sync import sync_to_async
    from django.contrib.auth.models import AnonymousUser, User
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.http import HttpRequest
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai_harness.memory import MemoryOperation

    from django_pydantic_agent.contrib.store.models import (
        StoredAttachment,
        StoredConversationAttachment,
        StoredMessage,
    )
    from django_pydantic_agent.contrib.store.rows import saved_wire as row_wire
    from django_pydantic_agent.contrib.store.stores import (
        DefaultAttachmentStore,
        DefaultConversationStore,
        DefaultMemoryStore,
        DefaultStepStore,
    )
    from django_pydantic_agent.persistence import Conversation

    conversations = DefaultConversationStore(allow_anonymous=True)
    attachments = DefaultAttachmentStore(allow_anonymous=True)
    out: dict[str, Any] = {"owners": [], "namespace_memory": [], "afterwards": {}}

    def request_for(owner: dict[str, Any]) -> HttpRequest:
        request = HttpRequest()
        if owner["session_key"]:
            request.user = AnonymousUser()
            request.session = SessionStore(session_key=owner["session_key"])
        else:
            request.user = User.objects.get(username=owner["name"])
        return request

    for owner in written["owners"]:
        request = await sync_to_async(request_for)(owner)
        listed = await conversations.list(request=request)
        got: dict[str, Any] = {
            "name": owner["name"],
            "owner_id": listed[0].owner_id,
            "list": [
                {
                    "thread_id": meta.thread_id,
                    "title": meta.title,
                    "preview": meta.preview,
                    "updated_at": meta.updated_at.isoformat(),
                }
                for meta in listed
            ],
            "conversations": {},
            "attachments": [],
            "memory": [],
            "receipts": [],
            "runs": [],
        }
        for meta in listed:
            loaded = await conversations.load(meta.thread_id, request=request)
            assert loaded is not None
            got["conversations"][meta.thread_id] = loaded.messages

        for row in owner["attachments"]:
            opened = await attachments.open(row["id"], request=request)
            assert opened is not None, f"attachment {row['id']} did not open"
            with opened.content as handle:
                content = handle.read()

            def stored(attachment_id: str = row["id"]) -> tuple[str, str, list[str]]:
                model = StoredAttachment.objects.get(attachment_id=attachment_id)
                threads = StoredConversationAttachment.objects.filter(attachment=model)
                return (
                    model.sha256,
                    str(model.file.name),
                    sorted(threads.values_list("conversation__thread_id", flat=True)),
                )

            sha256, blob, threads = await sync_to_async(stored)()
            got["attachments"].append(
                {
                    "id": opened.ref.id,
                    "name": opened.ref.name,
                    "mime": opened.ref.mime,
                    "size": opened.ref.size,
                    "sha256": sha256,
                    "blob": blob,
                    "content_b64": base64.b64encode(content).decode(),
                    "content_sha256": hashlib.sha256(content).hexdigest(),
                    "threads": threads,
                }
            )

        memory = DefaultMemoryStore(request, allow_anonymous=True)
        prefix = f"{owner['name']}-space/"
        for path in await memory.list_paths(prefix, limit=100):
            file = await memory.read(path, max_chars=100_000)
            assert file is not None
            got["memory"].append(
                {
                    "path": path,
                    "content": file.content,
                    "version": file.version,
                    "operation_id": file.operation_id,
                }
            )
        for receipt in owner["receipts"]:
            mutation = await memory.get_operation(
                MemoryOperation(id=receipt["id"], fingerprint=receipt["fingerprint"])
            )
            assert mutation is not None, f"receipt {receipt['id']} is gone"
            got["receipts"].append(
                {
                    "id": receipt["id"],
                    "fingerprint": receipt["fingerprint"],
                    "version": mutation.version,
                    "existed": mutation.existed,
                }
            )

        steps = DefaultStepStore(request, allow_anonymous=True)
        for run in owner["runs"]:
            run_id = run["run"]["run_id"]
            record = await steps.get_run(run_id=run_id)
            latest = await steps.latest_snapshot(run_id=run_id, include_interrupted=True)
            complete = await steps.latest_snapshot(run_id=run_id)
            assert record is not None, run_id
            assert latest is not None, run_id
            assert complete is not None, run_id
            got["runs"].append(
                {
                    "run": _record(record),
                    "events": [_record(event) for event in await steps.list_events(run_id=run_id)],
                    "latest_snapshot": {
                        **_record(latest),
                        "messages": ModelMessagesTypeAdapter.dump_python(
                            latest.messages, mode="json"
                        ),
                    },
                    "latest_complete_step": complete.step_index,
                    "effects": {
                        call: _record(effect)
                        for call in ("tc-1", "tc-2")
                        if (effect := await steps.get_tool_effect(run_id=run_id, tool_call_id=call))
                    },
                    "unresolved": [
                        effect.tool_call_id
                        for effect in await steps.list_unresolved_tool_effects(run_id=run_id)
                    ],
                }
            )
        got["children"] = [
            record.run_id
            for record in await steps.list_runs(parent_run_id=owner["runs"][0]["run"]["run_id"])
        ]
        out["owners"].append(got)

    shared = DefaultMemoryStore()
    for entry in written["namespace_memory"]:
        file = await shared.read(entry["path"], max_chars=10_000)
        assert file is not None
        out["namespace_memory"].append(
            {"path": entry["path"], "content": file.content, "version": file.version}
        )

    # The migrated rows keep working: an append compares rows (one INSERT, no rewrite), a
    # re-upload of known bytes reuses the blob, a compare-and-set write takes the old version.
    owner = written["owners"][0]
    request = await sync_to_async(request_for)(owner)
    thread_id = owner["list"][-1]["thread_id"]

    def message_rows() -> list[tuple[int, int]]:
        return list(
            StoredMessage.objects.filter(conversation__thread_id=thread_id)
            .order_by("position")
            .values_list("pk", "position")
        )

    def saved_wire() -> list[Any]:
        rows = StoredMessage.objects.filter(conversation__thread_id=thread_id)
        return [item for row in rows.order_by("position") for item in row_wire(row)]

    before = await sync_to_async(message_rows)()
    messages = owner["conversations"][thread_id] + [
        {"id": "after-upgrade", "role": "user", "content": "still here?"}
    ]
    await conversations.save(Conversation(thread_id=thread_id, messages=messages), request=request)
    after = await sync_to_async(message_rows)()
    reloaded = await conversations.load(thread_id, request=request)
    assert reloaded is not None
    notes = owner["attachments"][0]
    ref = await attachments.save(
        SimpleUploadedFile("again.txt", base64.b64decode(notes["content_b64"]), "text/plain"),
        request=request,
    )

    def blob_of(attachment_id: str) -> str:
        return str(StoredAttachment.objects.get(attachment_id=attachment_id).file.name)

    memory = DefaultMemoryStore(request, allow_anonymous=True)
    first = owner["memory"][0]
    mutation = await memory.write(
        first["path"],
        "rewritten after the upgrade",
        expected_version=first["version"],
        operation=MemoryOperation(id="after-upgrade", fingerprint="fp"),
    )

    def content_types() -> list[str]:
        from django.contrib.contenttypes.models import ContentType

        return sorted(
            ContentType.objects.filter(app_label="django_pydantic_agent_store").values_list(
                "model", flat=True
            )
        )

    # The migrated texts are searchable (migration 0014 indexed them, 0018 kept them).
    from django_pydantic_agent.persistence.listing import ThreadQuery

    page = await conversations.find_threads(ThreadQuery(text="quotes"), request=request)
    searched = sorted(hit.meta.thread_id for hit in page.hits)
    quoting = sorted(
        thread
        for thread, items in owner["conversations"].items()
        if any(
            item.get("role") in ("user", "assistant")
            and isinstance(item.get("content"), str)
            and "quotes" in item["content"]
            for item in items
        )
    )

    out["content_types"] = await sync_to_async(content_types)()
    out["afterwards"] = {
        "kept_row_pks": before == after[: len(before)],
        "rows": len(after),
        "messages_after_append": len(reloaded.messages),
        "appended_loads_verbatim": reloaded.messages == messages,
        "appended": messages,
        "saved_wire": await sync_to_async(saved_wire)(),
        "reupload_blob": await sync_to_async(blob_of)(ref.id),
        "memory_write_existed": mutation.existed,
        "searched": searched,
        "quoting": quoting,
    }
    return out


def main(argv: list[str]) -> None:
    django.setup()
    if argv[0] == "--schema":
        Path(argv[1]).write_text(json.dumps(schema(), indent=1), encoding="utf-8")
        return
    written = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    result = asyncio.run(read(written))
    Path(argv[1]).write_text(json.dumps(result, indent=1, sort_keys=True), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
