"""Model-backed stores over the test-only models, written as a project would write its own."""

from __future__ import annotations

import uuid

from django.core.files.uploadedfile import UploadedFile
from django.utils import timezone

from django_pydantic_agent.persistence import (
    AttachmentRef,
    Conversation,
    ConversationMeta,
    ConversationMetaList,
    ModelAttachmentStore,
    ModelConversationStore,
    OpenedAttachment,
    derive_preview,
    derive_title,
)
from tests.testapp.models import Thread, Upload


class MinimalThreadStore(ModelConversationStore):
    """Only the three required hooks: the optional ones keep the base class defaults."""

    def _fetch(self, thread_id: str, owner_id: str) -> Conversation | None:
        row = Thread.objects.filter(owner_id=owner_id, thread_id=thread_id).first()
        if row is None:
            return None
        return Conversation(thread_id=row.thread_id, messages=row.messages, owner_id=owner_id)

    def _store(self, conversation: Conversation, owner_id: str) -> None:
        messages = list(conversation.messages)
        row, created = Thread.objects.get_or_create(
            owner_id=owner_id,
            thread_id=conversation.thread_id,
            defaults={
                "messages": messages,
                "title": derive_title(messages),
                "preview": derive_preview(messages),
                "updated_at": timezone.now(),
            },
        )
        if not created:
            row.messages = messages
            row.preview = derive_preview(messages)
            row.updated_at = timezone.now()
            row.save(update_fields=["messages", "preview", "updated_at"])

    def _remove(self, thread_id: str, owner_id: str) -> None:
        Thread.objects.filter(owner_id=owner_id, thread_id=thread_id).delete()


class ThreadStore(MinimalThreadStore):
    """Every optional hook implemented too, each as one owner-filtered query."""

    overrides = frozenset({"_archive"})

    def _list(self, owner_id: str, limit: int | None) -> ConversationMetaList:
        rows = (
            Thread.objects.filter(owner_id=owner_id)
            .order_by("-updated_at", "-id")
            .values_list("thread_id", "title", "preview", "updated_at", "archived")
        )
        if limit is not None:
            rows = rows[:limit]
        return [
            ConversationMeta(
                thread_id=thread_id,
                title=title,
                preview=preview,
                updated_at=updated_at,
                owner_id=owner_id,
                archived=archived,
            )
            for thread_id, title, preview, updated_at, archived in rows
        ]

    def _archive(self, thread_id: str, archived: bool, owner_id: str) -> bool:
        rows = Thread.objects.filter(owner_id=owner_id, thread_id=thread_id)
        return bool(rows.update(archived=archived))

    def _exists(self, thread_id: str, owner_id: str) -> bool:
        return Thread.objects.filter(owner_id=owner_id, thread_id=thread_id).exists()

    def _rename(self, thread_id: str, title: str, owner_id: str) -> None:
        Thread.objects.filter(owner_id=owner_id, thread_id=thread_id).update(title=title)


class UploadStore(ModelAttachmentStore):
    """Bytes in Django ``Storage`` (the test settings' in-memory default), metadata in a row."""

    def _save(self, upload: UploadedFile[bytes], owner_id: str) -> AttachmentRef:
        attachment_id = uuid.uuid4().hex
        row = Upload(
            owner_id=owner_id,
            attachment_id=attachment_id,
            name=upload.name or "attachment",
            mime=upload.content_type or "application/octet-stream",
            size=upload.size or 0,
        )
        row.file.save(attachment_id, upload, save=True)
        return self._ref(row)

    def _open(self, attachment_id: str, owner_id: str) -> OpenedAttachment | None:
        row = Upload.objects.filter(owner_id=owner_id, attachment_id=attachment_id).first()
        if row is None:
            return None
        return OpenedAttachment(ref=self._ref(row), content=row.file.open("rb"))

    def _remove(self, attachment_id: str, owner_id: str) -> None:
        row = Upload.objects.filter(owner_id=owner_id, attachment_id=attachment_id).first()
        if row is not None:
            row.file.delete(save=False)
            row.delete()

    @staticmethod
    def _ref(row: Upload) -> AttachmentRef:
        return AttachmentRef(id=row.attachment_id, name=row.name, mime=row.mime, size=row.size)
