"""Test-only models behind the ``Model*Store`` bases exercised by the contract suite."""

from __future__ import annotations

from django.db import models


class Thread(models.Model):
    """One conversation of one owner, as a minimal bespoke schema would keep it."""

    owner_id = models.CharField(max_length=255)
    thread_id = models.CharField(max_length=255)
    title = models.CharField(max_length=255, blank=True, default="")
    preview = models.TextField(blank=True, default="")
    messages = models.JSONField(default=list)
    updated_at = models.DateTimeField()
    archived = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner_id", "thread_id"], name="testapp_thread_owner")
        ]

    def __str__(self) -> str:
        return self.title or self.thread_id


class Upload(models.Model):
    """One attachment of one owner: metadata here, bytes in Django ``Storage``."""

    owner_id = models.CharField(max_length=255)
    attachment_id = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=255)
    mime = models.CharField(max_length=255)
    size = models.PositiveBigIntegerField()
    file = models.FileField(upload_to="testapp/uploads/")

    def __str__(self) -> str:
        return self.name
