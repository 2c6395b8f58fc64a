"""Conversation and attachment models behind ``DefaultConversationStore`` and friends.

A conversation is one ``StoredConversation`` row (owner, thread id, title, preview,
timestamps) plus one ``StoredMessage`` row per logical AG-UI message, so appending a message
is one INSERT and growing the last message is one UPDATE of its row. Attachments are
``StoredAttachment`` rows (metadata, owner, content hash) pointing at a blob in Django
``Storage``; ``StoredConversationAttachment`` links them to the conversations that quote them.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.files.storage import Storage, default_storage, storages
from django.db import models
from django.utils import timezone

if TYPE_CHECKING:
    from datetime import datetime

    from django.core.files.base import File

__all__ = [
    "ATTACHMENT_STORAGE_ALIAS",
    "JSONTextField",
    "StoredAgentRun",
    "StoredAttachment",
    "StoredConversation",
    "StoredConversationAttachment",
    "StoredMessage",
    "attachment_storage",
    "resolve_attachment_storage",
]

#: The ``STORAGES`` alias that, when defined, holds attachment bytes instead of the default.
ATTACHMENT_STORAGE_ALIAS = "django_pydantic_agent_attachments"


def resolve_attachment_storage() -> Storage:
    """Return the storage attachment bytes live in, resolved from the current settings.

    The ``STORAGES`` alias ``"django_pydantic_agent_attachments"`` when it is defined, else
    ``default_storage``. A defined alias whose backend cannot be loaded raises (Django's
    ``InvalidStorageError`` or the backend's own import error) rather than falling back, so
    private files never land silently in a public default bucket.
    """
    if ATTACHMENT_STORAGE_ALIAS in settings.STORAGES:
        return storages[ATTACHMENT_STORAGE_ALIAS]
    return default_storage


class _AttachmentStorage(Storage):
    """A ``Storage`` that forwards every call to ``resolve_attachment_storage()``.

    Resolved on each use rather than when the model class is built, so a broken alias surfaces
    where it is used (and in system check ``django_pydantic_agent.E002``) instead of crashing
    app loading, and ``override_settings(STORAGES=...)`` takes effect.
    """

    def _target(self) -> Storage:
        return resolve_attachment_storage()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def open(self, name: str, mode: str = "rb") -> File[Any]:
        return self._target().open(name, mode)

    def save(self, name: str | None, content: Any, max_length: int | None = None) -> str:
        return self._target().save(name, content, max_length=max_length)

    def get_valid_name(self, name: str) -> str:
        return self._target().get_valid_name(name)

    def get_alternative_name(self, file_root: str, file_ext: str) -> str:
        return self._target().get_alternative_name(file_root, file_ext)

    def get_available_name(self, name: str, max_length: int | None = None) -> str:
        return self._target().get_available_name(name, max_length=max_length)

    def generate_filename(self, filename: str | os.PathLike[str]) -> str:
        return self._target().generate_filename(filename)

    def path(self, name: str) -> str:
        return self._target().path(name)

    def delete(self, name: str) -> None:
        self._target().delete(name)

    def exists(self, name: str) -> bool:
        return self._target().exists(name)

    def listdir(self, path: str) -> tuple[list[str], list[str]]:
        return self._target().listdir(path)

    def size(self, name: str) -> int:
        return self._target().size(name)

    def url(self, name: str | None) -> str:
        return self._target().url(name)

    def get_accessed_time(self, name: str) -> datetime:
        return self._target().get_accessed_time(name)

    def get_created_time(self, name: str) -> datetime:
        return self._target().get_created_time(name)

    def get_modified_time(self, name: str) -> datetime:
        return self._target().get_modified_time(name)


_attachment_storage = _AttachmentStorage()


def attachment_storage() -> Storage:
    """Return the ``storage=`` of ``StoredAttachment.file``: a proxy resolved on each use."""
    return _attachment_storage


class JSONTextField(models.TextField):  # type: ignore[type-arg]
    """JSON kept as the text ``json.dumps`` wrote: a number, a key order or an escape comes
    back as it went in, where a ``jsonb`` column normalises them (``1e16`` would read back as
    ``10000000000000000``). Python values in and out, like ``JSONField``; ``None`` is NULL."""

    def get_prep_value(self, value: Any) -> Any:
        return None if value is None else json.dumps(value, separators=(",", ":"))

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return None if value is None else json.loads(value)


class StoredConversation(models.Model):
    """One thread of one owner: metadata only; the messages are ``StoredMessage`` rows.

    Unique on ``(owner_id, thread_id)``. The ``(owner_id, -updated_at)`` index serves the
    thread drawer's ``WHERE owner_id = %s ORDER BY updated_at DESC LIMIT n`` in one query.
    """

    owner_id = models.CharField(max_length=255, blank=True, default="")
    thread_id = models.CharField(max_length=255)
    chat_uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    """The ``chat_history.Chat.chat_uuid`` of the thread (the ORM repositories' handle)."""
    title = models.CharField(max_length=255, blank=True, default="")
    preview = models.TextField(blank=True, default="")
    archived = models.BooleanField(default=False)
    """Hidden from the thread drawer unless asked for (``PATCH threads/<id>/``)."""
    save_state = models.CharField(max_length=200, blank=True, default="", editable=False)
    """What the last ``save`` stored (see ``save_plan``), or ``""``."""
    active_branch = models.PositiveIntegerField(default=0, editable=False)
    """The branch new message rows join: the branch of the active branch's last row."""
    branches = models.PositiveIntegerField(default=0, editable=False)
    """The highest branch number of the thread (``0``: it never branched)."""
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now, editable=False)
    attachments: models.ManyToManyField[StoredAttachment, StoredConversationAttachment] = (
        models.ManyToManyField(
            "StoredAttachment",
            through="StoredConversationAttachment",
            related_name="conversations",
            blank=True,
        )
    )

    class Meta:
        verbose_name = "conversation"
        verbose_name_plural = "conversations"
        constraints = [
            models.UniqueConstraint(
                fields=["owner_id", "thread_id"], name="dpa_store_conversation_owner_thread"
            )
        ]
        indexes = [
            models.Index(
                fields=["owner_id", "-updated_at", "-id"], name="dpa_store_conv_owner_upd"
            ),
            models.Index(fields=["updated_at"], name="dpa_store_conv_updated"),
        ]

    def __str__(self) -> str:
        return self.title or self.thread_id


class StoredMessage(models.Model):
    """One message of a conversation (a ``chat_history.Message`` record), at ``position``.

    Every row has this one shape, whoever wrote it; ``contrib.store.rows`` builds its columns.
    ``message_uuid`` is the record's uuid, ``message_id`` its AG-UI id; ``role``, ``content``
    (the text, appended in place during a run), ``status`` and ``run_id`` are the record's;
    ``record`` holds its other fields and ``tool_calls`` / ``reasonings`` its nested records.
    ``wire`` is the list of AG-UI wire messages ``DefaultConversationStore.save`` was given
    for this record, returned verbatim by ``load``; it is ``NULL`` for a record a run wrote or
    changed, which ``load`` renders from the record. Positions are 0-based; gaps are allowed.

    Messages form a tree (``contrib.store.branches``): ``branch`` numbers the chain a row was
    written on (``0`` until the thread first branches) and ``parent_uuid`` is the row it
    follows (``NULL``: the row before it on its branch, or none). ``active`` rows are the
    thread's active branch, the only ones ``load`` and a run read; positions are unique among
    them, and a row of another branch keeps the position it had.
    """

    # No index of its own: ``dpa_store_msg_agui_id`` starts with it. One on this column alone
    # was the cheapest index for PostgreSQL whenever its statistics took a thread for one row
    # (a thread new since the table was last analysed): it then read every row of the thread
    # to find its newest, where the (conversation, position) index reads one (migration 0020,
    # ``python -m bench --suite run-path``).
    conversation = models.ForeignKey(
        StoredConversation,
        on_delete=models.CASCADE,
        related_name="message_rows",
        db_index=False,
    )
    position = models.PositiveIntegerField()
    message_uuid = models.UUIDField(unique=True, editable=False)
    message_id = models.CharField(max_length=255, blank=True, default="")
    role = models.CharField(max_length=32, blank=True, default="")
    content = models.TextField(blank=True, default="")
    record = JSONTextField(default=dict, blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    reasonings = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, blank=True, default="")
    run_id = models.CharField(max_length=255, blank=True, default="")
    wire = JSONTextField(null=True, blank=True, editable=False)
    active = models.BooleanField(default=True, editable=False)
    branch = models.PositiveIntegerField(default=0, editable=False)
    parent_uuid = models.UUIDField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "message"
        verbose_name_plural = "messages"
        ordering = ["conversation", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "position"],
                condition=models.Q(active=True),
                name="dpa_store_message_active_pos",
            ),
        ]
        indexes = [
            # Partial: a saved message that names no run costs no index entry on insert.
            models.Index(
                fields=["run_id", "status"],
                condition=~models.Q(run_id=""),
                name="dpa_store_msg_run_status2",
            ),
            # A run looks up an echoed message by its AG-UI id without reading the thread.
            models.Index(fields=["conversation", "message_id"], name="dpa_store_msg_agui_id"),
        ]

    def __str__(self) -> str:
        return f"{self.role or 'message'} #{self.position}"


class StoredAgentRun(models.Model):
    """One agent run on a thread: who, where, how it went, and whether its worker is alive.

    ``status`` is ``running`` until the run ends (``complete``, ``interrupted``, ``errored``,
    or ``interrupt`` when it waits for a human). ``heartbeat_at`` is renewed by the worker
    running it (``worker_id``); a ``running`` run whose heartbeat is older than the lease is
    finalised as ``errored`` by the sweeper. ``usage`` is the run's token usage (JSON),
    ``last_seq`` the sequence number of its last event. At most one run per thread is
    ``running`` (a partial unique constraint). ``resumes`` counts the times another worker
    took the run over after its worker drained or died; ``resume_input`` is what that worker
    runs it again with (the run's ``RunAgentInput`` without its messages, as JSON).
    """

    owner_id = models.CharField(max_length=255, blank=True, default="")
    thread_id = models.CharField(max_length=255)
    run_id = models.CharField(max_length=255)
    status = models.CharField(max_length=16, default="running")
    worker_id = models.CharField(max_length=255, blank=True, default="")
    heartbeat_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    last_seq = models.PositiveBigIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    resumes = models.PositiveSmallIntegerField(default=0)
    resume_input = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name = "run record"
        verbose_name_plural = "run records"
        constraints = [
            models.UniqueConstraint(
                fields=["owner_id", "thread_id", "run_id"], name="dpa_store_arun_unique"
            ),
            models.UniqueConstraint(
                fields=["owner_id", "thread_id"],
                condition=models.Q(status="running"),
                name="dpa_store_arun_one_running",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "heartbeat_at"], name="dpa_store_arun_status_hb"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} ({self.status})"


class StoredAttachment(models.Model):
    """Metadata of one upload; the bytes are the blob ``file`` names in attachment storage.

    ``attachment_id`` is the public, opaque handle (a UUID), independent of the blob's name.
    Rows of one owner with the same ``sha256`` may share one blob (per-owner deduplication),
    so a blob is deleted only when the last row naming it goes. The ``(owner_id, sha256)``
    index leads with the owner, so no query finds a file by hash across owners.
    """

    attachment_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    owner_id = models.CharField(max_length=255, blank=True, default="")
    name = models.CharField(max_length=255, blank=True, default="")
    mime = models.CharField(max_length=255, blank=True, default="")
    size = models.PositiveBigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True, default="")
    file = models.FileField(
        upload_to="django_pydantic_agent/attachments/",
        storage=attachment_storage,
        max_length=255,
        blank=True,
        db_index=True,
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        verbose_name = "attachment"
        verbose_name_plural = "attachments"
        indexes = [
            models.Index(fields=["owner_id", "sha256"], name="dpa_store_att_owner_sha"),
            models.Index(fields=["owner_id", "-created_at"], name="dpa_store_att_owner_created"),
            models.Index(fields=["created_at"], name="dpa_store_att_created"),
        ]

    def __str__(self) -> str:
        return self.name or self.attachment_id.hex


class StoredConversationAttachment(models.Model):
    """A conversation quoting an attachment; written only by attachment reconciliation."""

    conversation = models.ForeignKey(
        StoredConversation, on_delete=models.CASCADE, related_name="attachment_links"
    )
    attachment = models.ForeignKey(
        StoredAttachment, on_delete=models.CASCADE, related_name="conversation_links"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        verbose_name = "conversation attachment"
        verbose_name_plural = "conversation attachments"
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "attachment"], name="dpa_store_link_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id} \u2192 {self.attachment_id}"
