# mypy: ignore-errors
# (runs under the predecessor package, django-pydantic-agent 0.28.3, in a virtualenv of its own)
"""Fill a fresh database through the predecessor's own stores, and dump what it wrote.

Run as a script by ``tests/e2e/test_upgrade.py`` from the ``.venv-predecessor`` virtualenv
(never with this repository on ``sys.path``: the import names clash)::

    .venv-predecessor/bin/python tests/e2e/predecessor_fill.py \
        --database sqlite:///path/db.sqlite3 --media /path/blobs --out /path/written.json

``--database`` is ``sqlite:///<path>`` or ``postgres://user:password@host:port/name``. The
script migrates the database with the predecessor's migrations, then writes through
``DefaultConversationStore``, ``DefaultAttachmentStore``, ``DefaultMemoryStore`` and
``DefaultStepStore`` for several owners, and dumps to ``--out`` what each store reads back.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import hashlib
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import django
from django.conf import settings

OWNER_USERS = ("alice", "bob", "carol")
MESSAGES_PER_TURN = 4
TURNS = 10  # 40 messages in the long threads


def configure(database: str, media: Path) -> None:
    url = urlparse(database)
    if url.scheme == "sqlite":
        db = {"ENGINE": "django.db.backends.sqlite3", "NAME": url.path}
    else:
        db = {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": url.path.lstrip("/"),
            "USER": url.username,
            "PASSWORD": url.password,
            "HOST": url.hostname,
            "PORT": url.port or 5432,
        }
    settings.configure(
        SECRET_KEY="predecessor-fill-not-secret",
        USE_TZ=True,
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django_pydantic_agent",
            "django_pydantic_agent.contrib.store",
        ],
        DATABASES={"default": db},
        STORAGES={
            "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
            "django_pydantic_agent_attachments": {
                "BACKEND": "django.core.files.storage.FileSystemStorage",
                "OPTIONS": {"location": str(media)},
            },
        },
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()


def iso(value):
    return None if value is None else value.isoformat()


def record(value):
    """A harness dataclass as JSON (datetimes as ISO 8601)."""
    out = {}
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        out[field.name] = iso(item) if isinstance(item, datetime) else item
    return out


def turn(owner: str, thread: int, index: int, attachment) -> list[dict]:
    """Four AG-UI wire messages: a user turn, a tool call, its result and the answer."""
    call = f"call-{owner}-{thread}-{index}"
    user = {
        "id": f"user-{thread}-{index}",
        "role": "user",
        "content": f"Question {index} from {owner} in thread {thread}: "
        "caf\u00e9 \u2603 \U0001f680?",
    }
    if attachment is not None:
        user["attachments"] = [
            {
                "id": attachment.id,
                "name": attachment.name,
                "mime": attachment.mime,
                "size": attachment.size,
            }
        ]
    if index % 3 == 2:
        user["content"] = [
            {"type": "text", "text": f"Look at part {index}"},
            {"type": "binary", "mimeType": "text/plain", "url": "https://example.com/x.txt"},
        ]
    return [
        user,
        {
            "id": f"assistant-call-{thread}-{index}",
            "role": "assistant",
            "content": "",
            "toolCalls": [
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "lookup", "arguments": json.dumps({"q": index})},
                }
            ],
        },
        {
            "id": f"tool-{thread}-{index}",
            "role": "tool",
            "toolCallId": call,
            "content": json.dumps({"answer": index * 7, "nested": {"ok": True, "none": None}}),
        },
        {
            "id": f"assistant-{thread}-{index}",
            "role": "assistant",
            "content": f'The answer is {index * 7}.\nLine two with "quotes" and \\backslash.',
        },
    ]


async def fill(out: Path, reread: Path | None) -> None:
    from asgiref.sync import sync_to_async
    from django.contrib.auth.models import AnonymousUser, User
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.core.management import call_command
    from django.http import HttpRequest
    from pydantic_ai.messages import (
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        UserPromptPart,
    )
    from pydantic_ai_harness.memory import MemoryOperation
    from pydantic_ai_harness.step_persistence import (
        ContinuableSnapshot,
        RunRecord,
        StepEvent,
        ToolEffectRecord,
    )

    from django_pydantic_agent.contrib.store.default_attachment_store import (
        DefaultAttachmentStore,
    )
    from django_pydantic_agent.contrib.store.default_conversation_store import (
        DefaultConversationStore,
    )
    from django_pydantic_agent.contrib.store.default_memory_store import DefaultMemoryStore
    from django_pydantic_agent.contrib.store.default_step_store import DefaultStepStore
    from django_pydantic_agent.contrib.store.models import (
        ConversationAttachment,
        StoredAttachment,
    )
    from django_pydantic_agent.persistence.types.conversation import Conversation

    def make_requests():
        requests = []
        for name in OWNER_USERS:
            request = HttpRequest()
            request.user = User.objects.create_user(name, password="x")
            requests.append((name, request))
        request = HttpRequest()
        request.user = AnonymousUser()
        request.session = SessionStore()
        requests.append(("anonymous", request))
        return requests

    def find_requests(written):
        requests = []
        for owner in written["owners"]:
            request = HttpRequest()
            if owner["session_key"]:
                request.user = AnonymousUser()
                request.session = SessionStore(session_key=owner["session_key"])
            else:
                request.user = User.objects.get(username=owner["name"])
            requests.append((owner["name"], request))
        return requests

    if reread is None:
        await sync_to_async(call_command)("migrate", verbosity=0)
        requests = await sync_to_async(make_requests)()
    else:
        written = json.loads(await sync_to_async(reread.read_text)("utf-8"))
        requests = await sync_to_async(find_requests)(written)
    conversations = DefaultConversationStore(allow_anonymous=True)
    attachments = DefaultAttachmentStore(allow_anonymous=True)
    dump = {"owners": [], "namespace_memory": []}
    start = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

    for number, (name, request) in enumerate(requests if reread is None else []):
        # Attachments: two distinct files and a re-upload of the first (deduplicated).
        payloads = [
            (f"notes-{name}.txt", "text/plain", f"notes of {name}\n".encode() * 50),
            ("pixel.png", "image/png", bytes(range(256)) * 4),
            (f"copy-of-notes-{name}.txt", "text/plain", f"notes of {name}\n".encode() * 50),
        ]
        refs = []
        for filename, mime, content in payloads:
            refs.append(
                await attachments.save(
                    SimpleUploadedFile(filename, content, content_type=mime), request=request
                )
            )
        await attachments.save(  # never sent: an orphan
            SimpleUploadedFile("never-sent.bin", b"\x00\x01\x02orphan", "application/octet-stream"),
            request=request,
        )

        # Conversations, saved after every turn as the transport does; one renamed, one deleted.
        threads = [f"thread-{name}-{i}" for i in range(3)]
        for t, thread_id in enumerate(threads):
            messages = []
            for index in range(TURNS if t == 0 else 3):
                attachment = refs[index % 2] if index < 2 and t < 2 else None
                if t == 1 and index == 0:
                    attachment = refs[2]
                messages.extend(turn(name, t, index, attachment))
                await conversations.save(
                    Conversation(thread_id=thread_id, messages=list(messages)), request=request
                )
        await conversations.rename(threads[1], f"Renamed by {name} \u2014 ok", request=request)
        await conversations.save(
            Conversation(thread_id=f"doomed-{name}", messages=turn(name, 9, 0, None)),
            request=request,
        )
        await conversations.delete(f"doomed-{name}", request=request)

        # Memory, request-bound: files, one rewritten under compare-and-set, one deleted.
        memory = DefaultMemoryStore(request, allow_anonymous=True)
        paths = [
            f"{name}-space/agent/notes.md",
            f"{name}-space/agent/prefs.md",
            f"{name}-space/other/todo.md",
        ]
        for index, path in enumerate(paths):
            operation = MemoryOperation(id=f"op-{name}-{index}", fingerprint=f"fp-{index}")
            await memory.write(
                path,
                f"# {path}\n- fact {index} <memory>kept</memory>\n",
                expected_version=None,
                operation=operation,
            )
        first = await memory.read(paths[0], max_chars=10_000)
        await memory.write(
            paths[0],
            first.content + "- appended later\n",
            expected_version=first.version,
            operation=MemoryOperation(id=f"op-{name}-rewrite", fingerprint="fp-r"),
        )
        gone = await memory.read(paths[2], max_chars=10_000)
        await memory.delete(
            paths[2],
            expected_version=gone.version,
            operation=MemoryOperation(id=f"op-{name}-delete", fingerprint="fp-d"),
        )
        # Step records: two runs (the second delegated), events, snapshots, tool effects.
        steps = DefaultStepStore(request, allow_anonymous=True)
        base = start + timedelta(days=number)
        for r, run_id in enumerate([f"run-{name}-a", f"run-{name}-b"]):
            await steps.register_run(
                RunRecord(
                    run_id=run_id,
                    conversation_id=threads[0],
                    parent_run_id=None if r == 0 else f"run-{name}-a",
                    agent_name="helper" if r else None,
                    metadata={"origin": "upgrade-test", "n": str(r)},
                    started_at=base + timedelta(minutes=r),
                )
            )
            kinds = [
                "run_started",
                "model_request_started",
                "model_request_completed",
                "tool_call_started",
                "tool_call_failed",
                "run_failed",
            ]
            for i, kind in enumerate(kinds):
                await steps.append_event(
                    StepEvent(
                        run_id=run_id,
                        kind=kind,
                        step_index=i,
                        timestamp=base + timedelta(minutes=r, seconds=i),
                        conversation_id=threads[0],
                        agent_name="helper",
                        tool_call_id="tc-1" if "tool" in kind else None,
                        tool_name="lookup" if "tool" in kind else None,
                        error="ValueError('boom')" if kind.endswith("failed") else None,
                        metadata={"i": str(i)},
                    )
                )
            history = [
                ModelRequest(parts=[UserPromptPart(content=f"hello from {name}", timestamp=base)]),
                ModelResponse(
                    parts=[
                        TextPart(content="thinking"),
                        ToolCallPart(tool_name="lookup", args={"q": r}, tool_call_id="tc-1"),
                    ],
                    timestamp=base,
                ),
            ]
            for step, state in ((1, "complete"), (2, "interrupted")):
                await steps.save_snapshot(
                    ContinuableSnapshot(
                        run_id=run_id,
                        step_index=step,
                        messages=history[:step],
                        conversation_id=threads[0],
                        agent_name="helper",
                        timestamp=base + timedelta(minutes=r, seconds=10 + step),
                        state=state,
                    )
                )
            await steps.record_tool_effect(
                ToolEffectRecord(
                    tool_call_id="tc-1",
                    tool_name="lookup",
                    run_id=run_id,
                    status="started",
                    started_at=base,
                    idempotency_key=f"idem-{run_id}",
                )
            )
            await steps.record_tool_effect(
                ToolEffectRecord(
                    tool_call_id="tc-2",
                    tool_name="send_mail",
                    run_id=run_id,
                    status="started",
                    started_at=base,
                    effect_summary="mail to bob, maybe sent",
                )
            )
            await steps.record_tool_effect(
                ToolEffectRecord(
                    tool_call_id="tc-1",
                    tool_name="lookup",
                    run_id=run_id,
                    status="completed",
                    started_at=base,
                    ended_at=base + timedelta(seconds=3),
                    idempotency_key=f"idem-{run_id}",
                    effect_summary="looked up",
                )
            )

    for name, request in requests:
        threads = [f"thread-{name}-{i}" for i in range(3)]
        memory = DefaultMemoryStore(request, allow_anonymous=True)
        steps = DefaultStepStore(request, allow_anonymous=True)
        listed = await conversations.list(request=request)
        owner_id = listed[0].owner_id or ""
        owner = {
            "name": name,
            "owner_id": owner_id,
            "session_key": getattr(getattr(request, "session", None), "session_key", None),
            "list": [
                {
                    "thread_id": m.thread_id,
                    "title": m.title,
                    "preview": m.preview,
                    "updated_at": iso(m.updated_at),
                }
                for m in listed
            ],
            "conversations": {},
            "attachments": [],
            "memory": [],
            "receipts": [],
            "runs": [],
        }
        for meta in listed:
            loaded = await conversations.load(meta.thread_id, request=request)
            owner["conversations"][meta.thread_id] = loaded.messages

        def attachment_rows(owner_id=owner_id):
            rows = []
            for row in StoredAttachment.objects.filter(owner_id=owner_id).order_by("pk"):
                with row.file.open("rb") as handle:
                    content = handle.read()
                rows.append(
                    {
                        "id": row.attachment_id,
                        "name": row.name,
                        "mime": row.mime,
                        "size": row.size,
                        "sha256": row.sha256,
                        "blob": row.file.name,
                        "content_b64": base64.b64encode(content).decode(),
                        "content_sha256": hashlib.sha256(content).hexdigest(),
                        "threads": sorted(
                            ConversationAttachment.objects.filter(attachment=row).values_list(
                                "conversation__thread_id", flat=True
                            )
                        ),
                    }
                )
            return rows

        owner["attachments"] = await sync_to_async(attachment_rows)()
        assert any(not a["threads"] for a in owner["attachments"]), "the orphan upload is linked"

        for path in await memory.list_paths(f"{name}-space/", limit=100):
            file = await memory.read(path, max_chars=100_000)
            owner["memory"].append(
                {
                    "path": path,
                    "content": file.content,
                    "version": file.version,
                    "operation_id": file.operation_id,
                }
            )
        for op_id, fingerprint in [(f"op-{name}-{i}", f"fp-{i}") for i in range(3)] + [
            (f"op-{name}-rewrite", "fp-r"),
            (f"op-{name}-delete", "fp-d"),
        ]:
            mutation = await memory.get_operation(
                MemoryOperation(id=op_id, fingerprint=fingerprint)
            )
            owner["receipts"].append(
                {
                    "id": op_id,
                    "fingerprint": fingerprint,
                    "version": mutation.version,
                    "existed": mutation.existed,
                }
            )

        for run_id in (f"run-{name}-a", f"run-{name}-b"):
            latest = await steps.latest_snapshot(run_id=run_id, include_interrupted=True)
            latest_complete = await steps.latest_snapshot(run_id=run_id)
            owner["runs"].append(
                {
                    "run": record(await steps.get_run(run_id=run_id)),
                    "events": [record(e) for e in await steps.list_events(run_id=run_id)],
                    "latest_snapshot": {
                        **record(latest),
                        "messages": ModelMessagesTypeAdapter.dump_python(
                            latest.messages, mode="json"
                        ),
                    },
                    "latest_complete_step": latest_complete.step_index,
                    "effects": {
                        call: record(await steps.get_tool_effect(run_id=run_id, tool_call_id=call))
                        for call in ("tc-1", "tc-2")
                    },
                    "unresolved": [
                        e.tool_call_id
                        for e in await steps.list_unresolved_tool_effects(run_id=run_id)
                    ],
                }
            )
        owner["children"] = [r.run_id for r in await steps.list_runs(parent_run_id=f"run-{name}-a")]
        dump["owners"].append(owner)

    # Memory, namespace-scoped (a mount-time capability): the owner is the first segment.
    shared = DefaultMemoryStore()
    for path in ("team-7/agent/handbook.md", "team-7/agent/glossary.md"):
        if reread is None:
            await shared.write(path, f"shared {path}", expected_version=None, operation=None)
        file = await shared.read(path, max_chars=10_000)
        dump["namespace_memory"].append(
            {"path": path, "content": file.content, "version": file.version}
        )

    await sync_to_async(out.write_text)(json.dumps(dump, indent=1, sort_keys=True), "utf-8")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True)
    parser.add_argument("--media", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument(
        "--reread", type=Path, help="write nothing: dump again the owners this JSON names"
    )
    args = parser.parse_args(argv)
    configure(args.database, args.media)
    import django_pydantic_agent

    where = django_pydantic_agent.__file__ or ""
    assert "site-packages" in where, f"this script must run the predecessor, not {where}"
    asyncio.run(fill(args.out, args.reread))


if __name__ == "__main__":
    main(sys.argv[1:])
