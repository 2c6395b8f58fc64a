"""Tables behind the emulated Memory Service: spaces, sessions and events.

Every row is soft-deleted (``deleted_at``) so that deleted resources answer 404 while their
sequence ids are never reused. Deduplication keys are unique among *live* rows only, enforced by
partial unique constraints; the views also check inside a transaction and turn a lost race into
the service's 409 body.

Event bodies, session metadata and lifecycle strategies live in :class:`JSONTextField` columns
(JSON *text*, not ``jsonb``), so they come back exactly as sent on every database.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q


def json_text(value: Any) -> str:
    """The canonical JSON text of ``value``: compact, unicode kept, floats in shortest repr.

    ``json.loads(json_text(v))`` gives back ``v`` exactly: ints stay ints (any size), floats stay
    floats (``1.0``, ``1e+16``, ``-0.0``) and keys keep their order.
    """
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


class JSONTextField(models.TextField):  # type: ignore[type-arg]
    """A JSON value kept as its canonical text, so it round-trips byte for byte on any database.

    A ``JSONField`` would be ``jsonb`` on PostgreSQL, which normalises what it stores: ``1e16``
    comes back as ``10000000000000000``, ``1.0`` as ``1``, ``-0.0`` as ``0.0``, and object keys
    are reordered. Python code sees the parsed value; SQL ``NULL`` stands for ``None``. Nothing
    queries inside these values, so plain text loses nothing.
    """

    description = "A JSON value stored as its text"
    # django-stubs: instances read and write parsed JSON values, not strings.
    _pyi_private_set_type: Any
    _pyi_private_get_type: Any

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        return None if value is None else json.loads(value)

    def to_python(self, value: Any) -> Any:
        """Parse JSON text (from fixtures, see :meth:`value_to_string`); other values pass."""
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValidationError(f"Stored JSON is not valid JSON: {exc}", code="invalid") from exc

    def get_prep_value(self, value: Any) -> str | None:
        return None if value is None else json_text(value)

    def value_to_string(self, obj: models.Model) -> str:
        return json_text(self.value_from_object(obj))


def _live_dedup_key_unique(owner: str, *, name: str) -> models.UniqueConstraint:
    """A deduplication key is unique per ``owner`` among live (not soft-deleted) rows."""
    return models.UniqueConstraint(
        fields=[owner, "deduplication_key"],
        condition=Q(deleted_at__isnull=True, deduplication_key__isnull=False),
        name=name,
    )


class EmulatedMemorySpace(models.Model):
    """A memory space owned by one principal (the ``user_id`` derived from its bearer token)."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user_id = models.CharField(max_length=24, db_index=True)
    tenant_id = models.UUIDField()
    description = models.TextField(null=True, blank=True)  # noqa: DJ001
    deduplication_key = models.CharField(max_length=72, null=True, blank=True)  # noqa: DJ001
    llm_model_name = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    llm_base_url = models.TextField(null=True, blank=True)  # noqa: DJ001
    custom_instructions = models.TextField(null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "emulated memory space"
        constraints = [_live_dedup_key_unique("user_id", name="dpa_emu_space_live_dedup_key")]

    def __str__(self) -> str:
        return f"memory space {self.uuid}"


class EmulatedSession(models.Model):
    """A session in a space; ``version`` guards PATCH, ``last_sequence_id`` numbers events."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    space = models.ForeignKey(
        EmulatedMemorySpace, on_delete=models.CASCADE, related_name="sessions"
    )
    # The service documents exactly one participant; the emulator enforces that on create.
    participant = models.CharField(max_length=24, db_index=True)
    description = models.TextField(null=True, blank=True)  # noqa: DJ001
    metadata = JSONTextField(null=True, blank=True)
    deduplication_key = models.CharField(max_length=72, null=True, blank=True)  # noqa: DJ001
    lifecycle_strategies = JSONTextField(default=list)
    version = models.PositiveIntegerField(default=1)
    last_sequence_id = models.BigIntegerField(default=0)
    created_at = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "emulated session"
        constraints = [_live_dedup_key_unique("space", name="dpa_emu_session_live_dedup_key")]

    def __str__(self) -> str:
        return f"session {self.uuid}"


class EmulatedEvent(models.Model):
    """One event; ``created_at`` doubles as the optimistic-concurrency token of the wire."""

    session = models.ForeignKey(EmulatedSession, on_delete=models.CASCADE, related_name="events")
    sequence_id = models.BigIntegerField()
    event_type = models.CharField(max_length=32)
    body = JSONTextField()
    emitter_type = models.CharField(max_length=8)
    emitter_id = models.CharField(max_length=24, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "emulated event"
        constraints = [
            models.UniqueConstraint(
                fields=["session", "sequence_id"], name="dpa_emu_event_session_sequence"
            )
        ]

    def __str__(self) -> str:
        return f"event {self.sequence_id} of session {self.session_id}"
