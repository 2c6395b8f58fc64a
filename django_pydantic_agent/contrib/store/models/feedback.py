"""Feedback on messages: a rating and a comment per message of a thread."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from django_pydantic_agent.contrib.store.models.conversations import StoredConversation

__all__ = ["StoredFeedback"]


class StoredFeedback(models.Model):
    """The feedback an owner gave one message of ``conversation``, by its AG-UI ``message_id``
    (stable across the rewrites that renumber a thread's rows), with the ``run_id`` of the run
    that wrote the message, so usage rows join it. Deleting the thread deletes its feedback."""

    RATINGS = [("up", "Up"), ("down", "Down")]

    conversation = models.ForeignKey(
        StoredConversation, on_delete=models.CASCADE, related_name="feedback"
    )
    message_id = models.CharField(max_length=255)
    rating = models.CharField(max_length=4, choices=RATINGS, blank=True, default="")
    comment = models.TextField(blank=True, default="")
    run_id = models.CharField(max_length=255, blank=True, default="")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "message feedback"
        verbose_name_plural = "message feedback"
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "message_id"], name="dpa_store_feedback_one_per_message"
            )
        ]
        indexes = [models.Index(fields=["rating", "updated_at"], name="dpa_store_feedback_rating")]

    def __str__(self) -> str:
        return f"{self.rating or 'comment'} on {self.message_id}"
