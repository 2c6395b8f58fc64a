"""A thread's tags (``persistence.tags``): one row per tag, so ``?tag=`` is an indexed join."""

from __future__ import annotations

from django.db import models

from django_pydantic_agent.contrib.store.models.conversations import StoredConversation

__all__ = ["StoredThreadTag"]


class StoredThreadTag(models.Model):
    """Tag ``tag`` (normalised, at most 50 characters) on ``conversation``; deleted with it."""

    conversation = models.ForeignKey(
        StoredConversation, on_delete=models.CASCADE, related_name="tag_rows"
    )
    tag = models.CharField(max_length=50)

    class Meta:
        verbose_name = "thread tag"
        constraints = [
            models.UniqueConstraint(fields=["conversation", "tag"], name="dpa_store_tag_once")
        ]
        indexes = [models.Index(fields=["tag", "conversation"], name="dpa_store_tag_threads")]

    def __str__(self) -> str:
        return self.tag
