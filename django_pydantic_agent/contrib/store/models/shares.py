"""Share links: a snapshot of a thread behind a token of which only the digest is kept."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from django_pydantic_agent.contrib.store.models.conversations import (
    JSONTextField,
    StoredConversation,
)

__all__ = ["StoredShare"]


class StoredShare(models.Model):
    """One share link of ``conversation``: what its token opens, and until when.

    ``token_digest`` is the SHA-256 of the token (``persistence.sharing``), never the token,
    so this table opens no link. ``snapshot`` is the thread's active branch as it was shared
    (``snapshot_messages``); a revoked link keeps its row, without the snapshot. A thread
    has at most one live link (not revoked, not expired): sharing it again revokes the last.
    Deleting the conversation deletes its links.
    """

    conversation = models.ForeignKey(
        StoredConversation, on_delete=models.CASCADE, related_name="shares"
    )
    owner_id = models.CharField(max_length=255, editable=False)
    token_digest = models.CharField(max_length=64, unique=True, editable=False)
    title = models.CharField(max_length=255, blank=True, default="", editable=False)
    snapshot = JSONTextField(default=list, blank=True, editable=False)
    include_attachments = models.BooleanField(default=False, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "share link"
        verbose_name_plural = "share links"
        indexes = [
            models.Index(fields=["owner_id", "-created_at"], name="dpa_store_share_owner"),
        ]

    def __str__(self) -> str:
        return f"share of {self.title or self.conversation_id}"

    @property
    def live(self) -> bool:
        """Whether the link still opens: not revoked, not expired."""
        return self.revoked_at is None and self.expires_at > timezone.now()
