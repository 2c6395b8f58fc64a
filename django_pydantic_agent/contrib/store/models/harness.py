"""Tables behind ``DefaultStepStore`` and ``DefaultMemoryStore`` (pydantic-ai-harness stores).

Every row carries the ``owner_id`` the store resolved on the server; no harness record has an
owner, so the partition is entirely ours and every index leads with it.

Step persistence mirrors the harness records: ``StoredRun`` (``RunRecord``),
``StoredStepEvent`` (``StepEvent``), ``StoredSnapshot`` (``ContinuableSnapshot``) with the
``StoredSnapshotKey`` ledger that keeps idempotency keys valid after pruning, and
``StoredToolEffect`` (``ToolEffectRecord``). Memory is ``StoredMemoryFile`` (path, content,
opaque version) plus ``StoredMemoryOperation`` receipts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import models

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    _CharFieldBase = models.CharField[str, str]
else:
    _CharFieldBase = models.CharField

__all__ = [
    "BinaryCharField",
    "StoredMemoryFile",
    "StoredMemoryOperation",
    "StoredRun",
    "StoredSnapshot",
    "StoredSnapshotKey",
    "StoredStepEvent",
    "StoredToolEffect",
]

# Explicit, so ``DefaultStepStore``/``DefaultMemoryStore`` import without the app installed
# and their constructors can say what is missing (ImproperlyConfigured) instead of the import
# failing with Django's generic "isn't in an application in INSTALLED_APPS".
_APP_LABEL = "django_pydantic_agent_store"

#: Binary (code-point) collations per database vendor. SQLite's default ``BINARY`` already is.
_BINARY_COLLATIONS = {"postgresql": "C", "mysql": "utf8mb4_bin"}

#: The longest memory path the store accepts (the harness itself sets no bound).
MEMORY_PATH_MAX_LENGTH = 500


class BinaryCharField(_CharFieldBase):
    """A ``CharField`` that compares, sorts and indexes by code point on every database.

    The collation is chosen when the column is created, from the connection's vendor
    (``"C"`` on PostgreSQL, ``utf8mb4_bin`` on MySQL/MariaDB, SQLite's default ``BINARY``), so
    migrations stay database-independent while ``Alice/`` and ``alice/`` are different keys
    that sort apart, and a ``LIMIT`` keeps the same rows everywhere.
    """

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        params = super().db_parameters(connection)
        collation = _BINARY_COLLATIONS.get(connection.vendor)
        if collation is not None and self.db_collation is None:
            params["collation"] = collation
        return params


def _owner_field() -> BinaryCharField:
    return BinaryCharField(max_length=255)


def _optional_id() -> models.CharField[str | None, str | None]:
    # NULL, not "": the harness records tell ``None`` from an empty string.
    return models.CharField(max_length=255, null=True, blank=True)


class StoredRun(models.Model):
    """One ``RunRecord``: the lineage of an agent run, unique per owner."""

    owner_id = _owner_field()
    run_id = models.CharField(max_length=255)
    conversation_id = _optional_id()
    parent_run_id = _optional_id()
    agent_name = _optional_id()
    metadata = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField()
    registration_id = _optional_id()

    class Meta:
        app_label = _APP_LABEL
        verbose_name = "agent run"
        constraints = [
            models.UniqueConstraint(fields=["owner_id", "run_id"], name="dpa_store_run_owner_run"),
        ]
        indexes = [
            models.Index(fields=["owner_id", "started_at"], name="dpa_store_run_started"),
            models.Index(fields=["owner_id", "conversation_id"], name="dpa_store_run_conversation"),
            models.Index(fields=["owner_id", "parent_run_id"], name="dpa_store_run_parent"),
        ]

    def __str__(self) -> str:
        return self.run_id


class StoredStepEvent(models.Model):
    """One append-only ``StepEvent``; insertion order is the primary key order."""

    owner_id = _owner_field()
    run_id = models.CharField(max_length=255)
    kind = models.CharField(max_length=32)
    step_index = models.IntegerField()
    timestamp = models.DateTimeField()
    conversation_id = _optional_id()
    parent_run_id = _optional_id()
    agent_name = _optional_id()
    tool_call_id = _optional_id()
    tool_name = _optional_id()
    error = models.TextField(null=True, blank=True)  # noqa: DJ001
    metadata = models.JSONField(default=dict, blank=True)
    idempotency_key = _optional_id()

    class Meta:
        app_label = _APP_LABEL
        verbose_name = "agent step event"
        constraints = [
            models.UniqueConstraint(
                fields=["owner_id", "run_id", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="dpa_store_event_idempotency",
            ),
        ]
        indexes = [models.Index(fields=["owner_id", "run_id"], name="dpa_store_event_run")]

    def __str__(self) -> str:
        return f"{self.run_id} {self.kind}"


class StoredSnapshot(models.Model):
    """One ``ContinuableSnapshot``; ``messages`` is pydantic-ai's JSON message format."""

    class State(models.TextChoices):
        COMPLETE = "complete"
        INTERRUPTED = "interrupted"

    owner_id = _owner_field()
    run_id = models.CharField(max_length=255)
    step_index = models.IntegerField()
    messages = models.JSONField(default=list)
    conversation_id = _optional_id()
    parent_run_id = _optional_id()
    agent_name = _optional_id()
    timestamp = models.DateTimeField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.COMPLETE)
    idempotency_key = _optional_id()

    class Meta:
        app_label = _APP_LABEL
        verbose_name = "agent run snapshot"
        indexes = [
            models.Index(fields=["owner_id", "run_id", "state"], name="dpa_store_snapshot_run"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} step {self.step_index}"


class StoredSnapshotKey(models.Model):
    """The ledger of snapshot idempotency keys ever applied; it outlives snapshot pruning."""

    owner_id = _owner_field()
    run_id = models.CharField(max_length=255)
    idempotency_key = models.CharField(max_length=255)

    class Meta:
        app_label = _APP_LABEL
        verbose_name = "agent snapshot key"
        constraints = [
            models.UniqueConstraint(
                fields=["owner_id", "run_id", "idempotency_key"], name="dpa_store_snapshot_key"
            ),
        ]

    def __str__(self) -> str:
        return self.idempotency_key


class StoredToolEffect(models.Model):
    """The current ``ToolEffectRecord`` of one tool call (upserted, newest write wins)."""

    class Status(models.TextChoices):
        STARTED = "started"
        COMPLETED = "completed"
        FAILED = "failed"

    owner_id = _owner_field()
    run_id = models.CharField(max_length=255)
    tool_call_id = models.CharField(max_length=255)
    tool_name = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=Status.choices)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = _optional_id()
    effect_summary = models.TextField(null=True, blank=True)  # noqa: DJ001

    class Meta:
        app_label = _APP_LABEL
        verbose_name = "agent tool effect"
        constraints = [
            models.UniqueConstraint(
                fields=["owner_id", "run_id", "tool_call_id"], name="dpa_store_effect_call"
            ),
        ]
        indexes = [
            models.Index(fields=["owner_id", "run_id", "status"], name="dpa_store_effect_run"),
        ]

    def __str__(self) -> str:
        return f"{self.tool_name} ({self.tool_call_id})"


class StoredMemoryFile(models.Model):
    """One agent memory file of one owner, with the opaque version compare-and-set checks."""

    owner_id = _owner_field()
    path = BinaryCharField(max_length=MEMORY_PATH_MAX_LENGTH)
    content = models.TextField(blank=True)
    version = models.CharField(max_length=32)
    operation_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    write_metadata = models.TextField(null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = _APP_LABEL
        verbose_name = "agent memory file"
        ordering = ["owner_id", "path"]
        constraints = [
            models.UniqueConstraint(fields=["owner_id", "path"], name="dpa_store_memory_path"),
        ]
        permissions = [
            ("purge_agent_memory", "Can purge all agent memory of an owner"),
        ]

    def __str__(self) -> str:
        return self.path


class StoredMemoryOperation(models.Model):
    """The receipt of one idempotent memory mutation, replayed when its operation repeats."""

    owner_id = _owner_field()
    operation_id = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=255)
    version = models.CharField(max_length=32, null=True, blank=True)  # noqa: DJ001
    existed = models.BooleanField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = _APP_LABEL
        verbose_name = "agent memory receipt"
        constraints = [
            models.UniqueConstraint(
                fields=["owner_id", "operation_id"], name="dpa_store_memory_operation"
            ),
        ]

    def __str__(self) -> str:
        return self.operation_id
