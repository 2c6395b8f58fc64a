"""Compaction summaries: what a compaction capability wrote in place of older messages."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from django_pydantic_agent.contrib.store.models.conversations import (
    StoredConversation,
    StoredMessage,
)

__all__ = ["StoredSummary"]


class StoredSummary(models.Model):
    """A summary a compaction capability (pydantic-ai-harness's ``SummarizingCompaction``)
    wrote during a run of ``conversation``: a row of its own, beside the messages.

    It stands for every message of the thread up to ``through`` (included); those messages
    stay, and the user still sees them. The next run sends the model the newest summary and
    the messages after ``through``. Deleting ``through`` (or the conversation) deletes the
    summary, so a summary never outlives what it summarises.
    """

    conversation = models.ForeignKey(
        StoredConversation, on_delete=models.CASCADE, related_name="summaries"
    )
    summary_uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    through = models.ForeignKey(
        StoredMessage,
        on_delete=models.CASCADE,
        to_field="message_uuid",
        related_name="summaries",
    )
    text = models.TextField()
    run_id = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        verbose_name = "summary"
        verbose_name_plural = "summaries"
        indexes = [
            models.Index(fields=["conversation", "-id"], name="dpa_store_summary_newest"),
        ]

    def __str__(self) -> str:
        return f"summary through {self.through_id}"
