"""Attachment lifecycle helpers: reconciliation, deletion passes, inline-bytes stripping."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.utils import timezone

from django_pydantic_agent.contrib.store.lifecycle import (
    AttachmentDeletion,
    ConversationDeletion,
    attachment_ids_in,
    delete_attachments,
    delete_conversations,
    preview_attachment_deletion,
    reconcile_conversation_attachments,
    strip_inline_binary_parts,
)
from django_pydantic_agent.contrib.store.models import (
    StoredAttachment,
    StoredConversation,
    StoredMessage,
)

pytestmark = pytest.mark.django_db
OnCommit = Callable[..., Any]


def attachment(owner: str = "1", blob: str | None = None, size: int = 10) -> StoredAttachment:
    row = StoredAttachment.objects.create(owner_id=owner, name="f", size=size)
    if blob is not None:
        if not default_storage.exists(blob):
            default_storage.save(blob, ContentFile(b"x" * size))
        row.file.name = blob
        row.save()
    return row


def conversation(owner: str = "1", thread: str = "t") -> StoredConversation:
    return StoredConversation.objects.create(owner_id=owner, thread_id=thread)


def linked(conv: StoredConversation) -> set[str]:
    return {a.attachment_id.hex for a in conv.attachments.all()}


def test_reconcile_reads_top_level_and_metadata_refs() -> None:
    conv = conversation()
    top, meta, bare = attachment(), attachment(), attachment()
    messages = [
        {"role": "user", "attachments": [{"id": top.attachment_id.hex}]},
        {"role": "user", "metadata": {"attachments": [{"id": str(meta.attachment_id)}]}},
        {"role": "assistant", "attachments": [bare.attachment_id.hex]},
    ]

    reconcile_conversation_attachments(conv, messages)

    assert linked(conv) == {top.attachment_id.hex, meta.attachment_id.hex, bare.attachment_id.hex}


def test_reconcile_links_only_the_owners_own_attachments() -> None:
    conv = conversation(owner="1")
    foreign = attachment(owner="2")

    reconcile_conversation_attachments(conv, [{"attachments": [{"id": foreign.attachment_id.hex}]}])

    assert linked(conv) == set()
    assert foreign.conversation_links.count() == 0


def test_reconcile_follows_the_conversation_as_it_stands() -> None:
    conv = conversation()
    a, b = attachment(), attachment()
    reconcile_conversation_attachments(conv, [{"attachments": [{"id": a.attachment_id.hex}]}])
    reconcile_conversation_attachments(conv, [{"attachments": [{"id": b.attachment_id.hex}]}])
    assert linked(conv) == {b.attachment_id.hex}
    # the dropped attachment is unlinked, not deleted: pruning collects it later
    assert StoredAttachment.objects.filter(pk=a.pk).exists()


@pytest.mark.parametrize(
    "messages",
    [
        None,
        "text",
        {"attachments": []},
        [None, 3, "x", ["nested"]],
        [{"attachments": "abc"}, {"attachments": {"id": "x"}}, {"metadata": "m"}],
        [{"attachments": [None, 3, {"id": 5}, {"name": "no id"}, "not-a-uuid"]}],
        [{"metadata": {"attachments": [{"id": "00000000-0000-0000-0000-000000000000"}]}}],
    ],
)
def test_reconcile_never_raises_on_malformed_input(messages: Any) -> None:
    conv = conversation()
    reconcile_conversation_attachments(conv, messages)
    assert linked(conv) == set()


def test_attachment_ids_in_deduplicates() -> None:
    a = attachment()
    ids = attachment_ids_in(
        [
            {
                "attachments": [a.attachment_id.hex],
                "metadata": {"attachments": [str(a.attachment_id)]},
            }
        ]
    )
    assert ids == {a.attachment_id}


def test_delete_attachments_counts_rows_blobs_and_bytes(on_commit: OnCommit) -> None:
    a1 = attachment(blob="b/shared", size=100)
    a2 = attachment(blob="b/shared", size=100)
    attachment(blob="b/kept", size=7)  # a third row keeps its own blob
    a4 = attachment(blob="b/single", size=5)
    blobless = attachment()
    rows = StoredAttachment.objects.filter(pk__in=[a1.pk, a2.pk, a4.pk, blobless.pk])

    assert preview_attachment_deletion(rows) == AttachmentDeletion(rows=4, blobs=2, bytes_freed=105)
    assert StoredAttachment.objects.count() == 5
    with on_commit(execute=True):
        result = delete_attachments(rows)

    assert result == AttachmentDeletion(rows=4, blobs=2, bytes_freed=105)
    assert not default_storage.exists("b/shared")
    assert not default_storage.exists("b/single")
    assert default_storage.exists("b/kept")


def test_deleting_one_of_two_rows_sharing_a_blob_frees_nothing(on_commit: OnCommit) -> None:
    a1 = attachment(blob="b/pair", size=50)
    attachment(blob="b/pair", size=50)
    rows = StoredAttachment.objects.filter(pk=a1.pk)

    assert preview_attachment_deletion(rows) == AttachmentDeletion(rows=1, blobs=0, bytes_freed=0)
    with on_commit(execute=True):
        assert delete_attachments(rows) == AttachmentDeletion(rows=1, blobs=0, bytes_freed=0)
    assert default_storage.exists("b/pair")


def test_deletion_is_batched_with_progress_callbacks(on_commit: OnCommit) -> None:
    for i in range(1203):
        StoredAttachment.objects.create(owner_id="1", file=f"b/{i:05d}", size=1)
    seen: list[int] = []

    preview = preview_attachment_deletion(StoredAttachment.objects.all())
    with on_commit(execute=True):
        result = delete_attachments(StoredAttachment.objects.all(), on_batch=seen.append)

    assert preview == result == AttachmentDeletion(rows=1203, blobs=1203, bytes_freed=1203)
    assert seen == [500, 500, 203]


def test_attachment_deletion_adds_up() -> None:
    total = AttachmentDeletion(rows=1, blobs=1, bytes_freed=3) + AttachmentDeletion(rows=2)
    assert total == AttachmentDeletion(rows=3, blobs=1, bytes_freed=3)
    with pytest.raises(AttributeError):
        total.rows = 5  # type: ignore[misc]


def test_delete_conversations_takes_exclusive_attachments_along(on_commit: OnCommit) -> None:
    old, other = conversation(thread="old"), conversation(thread="other")
    StoredMessage.objects.create(conversation=old, position=0, message_uuid=uuid.uuid4())
    StoredMessage.objects.create(conversation=old, position=1, message_uuid=uuid.uuid4())
    exclusive = attachment(blob="b/exclusive", size=9)
    shared = attachment(blob="b/shared", size=4)
    orphan = attachment(blob="b/orphan", size=1)  # linked nowhere: not this pass's business
    old.attachments.add(exclusive, shared)
    other.attachments.add(shared)
    rows = StoredConversation.objects.filter(pk=old.pk)

    expected = ConversationDeletion(
        conversations=1,
        messages=2,
        attachments=AttachmentDeletion(rows=1, blobs=1, bytes_freed=9),
    )
    assert delete_conversations(rows, dry_run=True) == expected
    assert StoredConversation.objects.count() == 2
    with on_commit(execute=True):
        assert delete_conversations(rows) == expected

    assert set(StoredAttachment.objects.values_list("pk", flat=True)) == {shared.pk, orphan.pk}
    assert not default_storage.exists("b/exclusive")
    assert StoredMessage.objects.count() == 0


def test_conversation_dry_run_counts_attachments_shared_across_batches_once() -> None:
    shared = attachment(blob="b/shared-across", size=3)
    for i in range(501):  # two batches
        conversation(thread=f"t{i}").attachments.add(shared)
    batches: list[int] = []

    result = delete_conversations(
        StoredConversation.objects.all(), dry_run=True, on_batch=batches.append
    )

    assert batches == [500, 1]
    assert result.conversations == 501
    assert result.attachments == AttachmentDeletion(rows=1, blobs=1, bytes_freed=3)
    assert delete_conversations(StoredConversation.objects.all()).attachments == result.attachments


def test_strip_drops_only_inline_bytes_and_keeps_ids_and_refs() -> None:
    messages = [
        {
            "id": "u1",
            "role": "user",
            "attachments": [{"id": "abc"}],
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "x"}},
                {"type": "image", "source": {"type": "url", "value": "https://x/y.png"}},
                {"type": "binary", "mimeType": "application/pdf", "data": "JVBER"},
                {"type": "binary", "mimeType": "application/pdf", "url": "https://x/z.pdf"},
                {"type": "document", "source": "weird"},
                "not a part",
            ],
        },
        {"id": "u2", "role": "user", "content": [{"type": "audio", "source": {"type": "data"}}]},
        {"id": "a1", "role": "assistant", "content": "plain"},
        "not a message",
    ]
    original = copy.deepcopy(messages)

    stripped, changed = strip_inline_binary_parts(messages)

    assert changed
    assert messages == original  # input untouched
    assert [
        part if isinstance(part, str) else part.get("type") for part in stripped[0]["content"]
    ] == [
        "text",
        "image",
        "binary",
        "document",
        "not a part",
    ]
    assert stripped[0]["attachments"] == [{"id": "abc"}]
    assert stripped[1] == {"id": "u2", "role": "user", "content": []}
    assert stripped[2:] == messages[2:]


@pytest.mark.parametrize("value", [None, "x", {"content": []}, [], [{"content": "text"}]])
def test_strip_leaves_other_shapes_alone(value: Any) -> None:
    result, changed = strip_inline_binary_parts(value)
    assert result is value
    assert not changed


def harness_rows(owner: str, thread: str, run: str) -> None:
    """One run of ``thread`` with an event, a snapshot, a snapshot key and a tool effect."""
    from django_pydantic_agent.contrib.store.models import (
        StoredRun,
        StoredSnapshot,
        StoredSnapshotKey,
        StoredStepEvent,
        StoredToolEffect,
    )

    now = timezone.now()
    ids = {"owner_id": owner, "run_id": run}
    StoredRun.objects.create(**ids, conversation_id=thread, started_at=now)
    StoredStepEvent.objects.create(
        **ids, conversation_id=thread, kind="step", step_index=0, timestamp=now
    )
    StoredSnapshot.objects.create(
        **ids, conversation_id=thread, step_index=0, timestamp=now, messages=[{"secret": 1}]
    )
    StoredSnapshotKey.objects.create(**ids, idempotency_key="k")
    StoredToolEffect.objects.create(
        **ids, tool_call_id="c", tool_name="t", status="completed", started_at=now
    )


def harness_counts() -> dict[str, list[tuple[str, str]]]:
    from django_pydantic_agent.contrib.store.models import (
        StoredRun,
        StoredSnapshot,
        StoredSnapshotKey,
        StoredStepEvent,
        StoredToolEffect,
    )

    return {
        model.__name__: sorted(model.objects.values_list("owner_id", "run_id"))
        for model in (
            StoredRun,
            StoredStepEvent,
            StoredSnapshot,
            StoredSnapshotKey,
            StoredToolEffect,
        )
    }


@pytest.mark.parametrize("dry_run", [True, False])
def test_deleting_a_thread_deletes_its_harness_rows(dry_run: bool) -> None:
    """Regression: runs, events and snapshots (a full copy of the conversation) outlived the
    deleted thread."""
    conversation("1", "t")
    conversation("2", "t")
    harness_rows("1", "t", "r-gone")
    harness_rows("2", "t", "r-other-owner")  # same thread id, another owner: kept
    harness_rows("1", "u", "r-other-thread")  # same owner, another thread: kept
    before = harness_counts()

    result = delete_conversations(
        StoredConversation.objects.filter(owner_id="1", thread_id="t"), dry_run=dry_run
    )

    assert (result.runs, result.step_events, result.snapshots, result.tool_effects) == (1,) * 4
    kept = [("1", "r-other-thread"), ("2", "r-other-owner")]
    after = harness_counts()
    assert after == before if dry_run else all(rows == kept for rows in after.values())


def test_the_conversation_store_delete_removes_the_harness_rows() -> None:
    from django_pydantic_agent.contrib.store.stores import DefaultConversationStore

    conversation("1", "t")
    harness_rows("1", "t", "r")
    harness_rows("1", "u", "r2")

    DefaultConversationStore()._remove("t", "1")

    assert harness_counts() == {model: [("1", "r2")] for model in harness_counts()}


def test_conversation_dry_run_counts_a_blob_shared_across_batches_like_the_real_run(
    on_commit: OnCommit,
) -> None:
    """Regression: two deduplicated rows quoted from different batches each looked like the
    blob survived elsewhere, so the dry run reported 0 blobs while the real run freed 1."""
    first = attachment(blob="b/dedup-across", size=3)
    second = attachment(blob="b/dedup-across", size=3)
    conversation(thread="t-first").attachments.add(first)
    for i in range(499):
        conversation(thread=f"filler-{i}")
    conversation(thread="t-second").attachments.add(second)  # in the second batch

    preview = delete_conversations(StoredConversation.objects.all(), dry_run=True)
    with on_commit(execute=True):
        real = delete_conversations(StoredConversation.objects.all())

    assert preview.attachments == AttachmentDeletion(rows=2, blobs=1, bytes_freed=3)
    assert real == preview
    assert not default_storage.exists("b/dedup-across")


def test_blob_deletion_costs_a_constant_number_of_queries(on_commit: OnCommit) -> None:
    """The commit-time re-check is one query per batch, not one per blob."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    for i in range(40):
        attachment(blob=f"b/many-{i}", size=1)
    with CaptureQueriesContext(connection) as queries, on_commit(execute=True):
        result = delete_attachments(StoredAttachment.objects.all())

    assert result == AttachmentDeletion(rows=40, blobs=40, bytes_freed=40)
    assert len(queries) < 15
    assert not any(default_storage.exists(f"b/many-{i}") for i in range(40))


def test_a_blob_that_fails_to_delete_is_logged_and_the_others_go(
    on_commit: OnCommit, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    attachment(blob="b/stuck", size=1)
    attachment(blob="b/free", size=1)
    real_delete = default_storage.delete

    def delete(name: str) -> None:
        if name == "b/stuck":
            raise OSError("permission denied")
        real_delete(name)

    monkeypatch.setattr(default_storage, "delete", delete)
    with on_commit(execute=True):
        delete_attachments(StoredAttachment.objects.all())

    assert default_storage.exists("b/stuck")
    assert not default_storage.exists("b/free")
    assert "Could not delete blob 'b/stuck'" in caplog.text
