"""The agent_store_* management commands, driven through call_command."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_pydantic_agent.contrib.store.management.commands._common import parse_duration
from django_pydantic_agent.contrib.store.models import (
    StoredAttachment,
    StoredConversation,
    StoredMessage,
)
from django_pydantic_agent.contrib.store.rows import saved_wire
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import Conversation

pytestmark = pytest.mark.django_db
OnCommit = Callable[..., Any]


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(name: str, *args: str, stdout: io.StringIO | None = None) -> tuple[str, str]:
    out, err = stdout or io.StringIO(), io.StringIO()
    call_command(name, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def blob_attachment(
    name: str, content: bytes, *, age: timedelta, **fields: Any
) -> StoredAttachment:
    if not default_storage.exists(name):
        default_storage.save(name, ContentFile(content))
    return StoredAttachment.objects.create(
        file=name,
        size=len(content),
        created_at=timezone.now() - age,
        **{"owner_id": "1", **fields},
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("45s", timedelta(seconds=45)),
        ("30m", timedelta(minutes=30)),
        ("24h", timedelta(hours=24)),
        (" 7D ", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
    ],
)
def test_parse_duration(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "24", "-1h", "1.5h", "h", "7 days", "1y", "24hh"])
def test_parse_duration_rejects_garbage(text: str) -> None:
    with pytest.raises(CommandError, match=r"--older-than=.* is not a duration"):
        parse_duration(text)


def test_parse_duration_rejects_absurd_values() -> None:
    with pytest.raises(CommandError, match="too large"):
        parse_duration("99999999999999w")


@pytest.mark.parametrize("text", ["0s", "0h", "00d"])
def test_parse_duration_rejects_zero(text: str) -> None:
    with pytest.raises(CommandError, match=r"is not a positive duration: pass at least 1s"):
        parse_duration(text)


PRUNE_COMMANDS = ["agent_store_prune_attachments", "agent_store_prune_conversations"]


@pytest.mark.parametrize("command", PRUNE_COMMANDS)
@pytest.mark.parametrize("text", ["3000000d", "500000w", "99999999999999w"])
def test_older_than_beyond_the_calendar_fails_with_a_clear_message(command: str, text: str) -> None:
    """Regression: 3000000d fits a timedelta but not now() minus it (OverflowError)."""
    with pytest.raises(CommandError, match=rf"--older-than='{text}' is too large"):
        run(command, "--older-than", text)


@pytest.mark.parametrize("command", PRUNE_COMMANDS)
def test_zero_older_than_is_refused(command: str) -> None:
    with pytest.raises(CommandError, match="'0s' is not a positive duration"):
        run(command, "--older-than", "0s")


@pytest.mark.parametrize("command", PRUNE_COMMANDS)
def test_bare_number_is_hours_with_a_deprecation_notice(command: str) -> None:
    """Predecessor 0.28.3 read ``--older-than 48`` as hours; old cron jobs keep working."""
    StoredConversation.objects.create(owner_id="1", thread_id="t")
    StoredConversation.objects.filter(thread_id="t").update(
        updated_at=timezone.now() - timedelta(hours=47)
    )
    StoredAttachment.objects.create(owner_id="1", created_at=timezone.now() - timedelta(hours=47))

    out, err = run(command, "--older-than", "48", "--dry-run")
    assert out.startswith("Would delete 0 ")
    assert "--older-than='48' has no unit and is read as 48h" in err
    assert "deprecated" in err

    out, _ = run(command, "--older-than", "46", "--dry-run")
    assert out.startswith("Would delete 1 ")


@pytest.mark.parametrize("command", PRUNE_COMMANDS)
def test_bad_older_than_fails_with_a_clear_message(command: str) -> None:
    with pytest.raises(CommandError, match="'soon' is not a duration"):
        run(command, "--older-than", "soon")


def test_prune_conversations_requires_older_than() -> None:
    with pytest.raises(CommandError, match="--older-than"):
        run("agent_store_prune_conversations")


def test_prune_attachments_deletes_old_orphans_only(on_commit: OnCommit) -> None:
    old = timedelta(days=2)
    blob_attachment("b/old-orphan", b"12345", age=old)
    blob_attachment("b/fresh-orphan", b"123", age=timedelta(minutes=5))
    used = blob_attachment("b/used", b"1", age=old)
    StoredConversation.objects.create(owner_id="1", thread_id="t").attachments.add(used)
    # Two old orphans sharing one blob with a live row: rows go, the blob stays.
    blob_attachment("b/shared", b"xy", age=old)
    shared_live = blob_attachment("b/shared", b"xy", age=old)
    StoredConversation.objects.create(owner_id="1", thread_id="u").attachments.add(shared_live)

    out, err = run("agent_store_prune_attachments", "--older-than", "24h", "--dry-run")
    assert out == "Would delete 2 orphan attachment(s) and 1 blob(s), freeing 5 byte(s).\n"
    assert err == ""
    assert StoredAttachment.objects.count() == 5

    with on_commit(execute=True):
        out, _ = run("agent_store_prune_attachments", "--older-than", "24h")
    assert out == "Deleted 2 orphan attachment(s) and 1 blob(s), freeing 5 byte(s).\n"
    assert not default_storage.exists("b/old-orphan")
    assert default_storage.exists("b/fresh-orphan")
    assert default_storage.exists("b/shared")
    assert StoredAttachment.objects.count() == 3

    out, _ = run("agent_store_prune_attachments")
    assert out.startswith("Deleted 0 orphan attachment(s)")


def test_progress_is_drawn_only_on_a_tty() -> None:
    blob_attachment("b/p", b"1", age=timedelta(days=3))

    tty = TTY()
    run("agent_store_prune_attachments", "--dry-run", stdout=tty)
    assert "\rAttachments: 1/1 (100%)" in tty.getvalue()

    out, _ = run("agent_store_prune_attachments", "--dry-run")
    assert "\r" not in out


def test_prune_conversations_by_last_update(on_commit: OnCommit) -> None:
    now = timezone.now()
    stale = StoredConversation.objects.create(
        owner_id="1", thread_id="stale", updated_at=now - timedelta(days=100)
    )
    StoredMessage.objects.create(conversation=stale, position=0, message_uuid=uuid.uuid4())
    fresh = StoredConversation.objects.create(owner_id="1", thread_id="fresh", updated_at=now)
    stale.attachments.add(blob_attachment("b/stale", b"abc", age=timedelta(days=100)))

    out, err = run("agent_store_prune_conversations", "--older-than", "90d", "--dry-run")
    assert out == (
        "Would delete 1 conversation(s) with 1 message(s), 1 attachment(s) and 1 blob(s), "
        "freeing 3 byte(s); and 0 run(s), 0 step event(s), 0 snapshot(s) and 0 tool "
        "effect(s).\n"
    )
    assert err == ""
    assert StoredConversation.objects.count() == 2

    tty = TTY()
    with on_commit(execute=True):
        run("agent_store_prune_conversations", "--older-than", "90d", stdout=tty)
    assert "Deleted 1 conversation(s) with 1 message(s), 1 attachment(s)" in tty.getvalue()
    assert "\rConversations: 1/1 (100%)" in tty.getvalue()
    assert list(StoredConversation.objects.all()) == [fresh]
    assert not default_storage.exists("b/stale")


def test_strip_inline_bytes_rewrites_only_changed_rows() -> None:
    fat = {
        "id": "u1",
        "role": "user",
        "attachments": [{"id": "ref"}],
        "content": [
            {"type": "text", "text": "see"},
            {"type": "document", "source": {"type": "data", "value": "A" * 1000}},
        ],
    }
    lean = {"id": "a1", "role": "assistant", "content": "ok"}
    DefaultConversationStore()._store(Conversation(thread_id="t", messages=[fat, lean]), "1")

    out, _ = run("agent_store_strip_inline_bytes", "--dry-run")
    assert out.startswith("Would rewrite 1 message(s), reclaiming ")
    reclaimed = int(out.split("reclaiming ")[1].split(" ")[0])
    assert reclaimed > 1000
    assert saved_wire(StoredMessage.objects.get(position=0)) == [fat]

    out, _ = run("agent_store_strip_inline_bytes", stdout=TTY())
    assert f"Rewrote 1 message(s), reclaiming {reclaimed} byte(s) of JSON." in out
    stripped = StoredMessage.objects.get(position=0)
    assert saved_wire(stripped) == [{**fat, "content": [{"type": "text", "text": "see"}]}]
    assert stripped.record["content_parts"] == [{"type": "text", "text": "see"}]
    assert saved_wire(StoredMessage.objects.get(position=1)) == [lean]
    loaded = DefaultConversationStore()._fetch("t", "1")
    assert loaded is not None
    assert loaded.messages == [saved_wire(stripped)[0], lean]

    out, _ = run("agent_store_strip_inline_bytes")
    assert out == "Rewrote 0 message(s), reclaiming 0 byte(s) of JSON.\n"


def test_backfill_hashes() -> None:
    import hashlib

    ok = blob_attachment("b/ok", b"content", age=timedelta(0), sha256="")
    lost = StoredAttachment.objects.create(owner_id="1", file="b/lost", sha256="")
    StoredAttachment.objects.create(owner_id="1", sha256="")  # no blob: nothing to hash
    done = blob_attachment("b/done", b"x", age=timedelta(0), sha256="f" * 64)

    out, err = run("agent_store_backfill_hashes", "--dry-run")
    assert out == "Would hash 2 attachment(s).\n"
    assert err == ""

    tty = TTY()
    out, err = run("agent_store_backfill_hashes", stdout=tty)
    assert "Hashed 1 attachment(s); skipped 1 unreadable." in tty.getvalue()
    assert f"Skipped attachment {lost.attachment_id.hex}" in err
    assert "'b/lost'" in err
    ok.refresh_from_db()
    done.refresh_from_db()
    assert ok.sha256 == hashlib.sha256(b"content").hexdigest()
    assert done.sha256 == "f" * 64


def test_prune_keeps_attachments_quoted_only_under_metadata(on_commit: OnCommit) -> None:
    """Regression (predecessor 0.28.3): refs under ``metadata.attachments`` were not linked,
    so pruning deleted files that conversations still showed."""
    from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
    from django_pydantic_agent.persistence import Conversation

    quoted = blob_attachment("b/quoted", b"pdf", age=timedelta(days=30))
    message = {
        "id": "u1",
        "role": "user",
        "content": "see attached",
        "metadata": {"attachments": [{"id": quoted.attachment_id.hex, "name": "a.pdf"}]},
    }
    DefaultConversationStore()._store(Conversation(thread_id="t", messages=[message]), "1")

    with on_commit(execute=True):
        out, _ = run("agent_store_prune_attachments", "--older-than", "1s")

    assert out.startswith("Deleted 0 orphan attachment(s)")
    assert StoredAttachment.objects.filter(pk=quoted.pk).exists()
    assert default_storage.exists("b/quoted")
