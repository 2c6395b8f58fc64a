"""Attachment lifecycle helpers: reconciliation, deletion passes, inline-bytes stripping."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

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
    StoredMessage.objects.create(conversation=old, position=0, data={})
    StoredMessage.objects.create(conversation=old, position=1, data={})
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
