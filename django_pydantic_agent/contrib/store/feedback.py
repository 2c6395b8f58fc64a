"""Feedback rows of ``DefaultConversationStore`` (``persistence.feedback``): one per message."""

from __future__ import annotations

from django.utils import timezone

from django_pydantic_agent.contrib.store.quotas import MAX_KEY
from django_pydantic_agent.persistence.feedback import Feedback
from django_pydantic_agent.persistence.transactions import write_transaction

__all__ = ["rate", "ratings"]


def rate(owner_id: str, thread_id: str, message_id: str, feedback: Feedback) -> bool:
    """Set (an empty ``feedback``: delete) the feedback on the owner's message ``message_id``
    of ``thread_id``, on any branch; ``False`` (nothing written) when there is no such message.
    The row keeps the ``run_id`` of the run that wrote the message."""
    from django_pydantic_agent.contrib.store.models import (
        StoredConversation,
        StoredFeedback,
        StoredMessage,
    )

    if len(thread_id) > MAX_KEY or len(message_id) > MAX_KEY:
        return False
    with write_transaction():
        thread = (
            StoredConversation.objects.filter(owner_id=owner_id, thread_id=thread_id)
            .values_list("pk", flat=True)
            .first()
        )
        if thread is None:
            return False
        run_id = (
            StoredMessage.objects.filter(conversation_id=thread, message_id=message_id)
            .values_list("run_id", flat=True)
            .first()
        )
        if run_id is None:
            return False
        rows = StoredFeedback.objects.filter(conversation_id=thread, message_id=message_id)
        if feedback.empty:
            rows.delete()
            return True
        StoredFeedback.objects.update_or_create(
            conversation_id=thread,
            message_id=message_id,
            defaults={
                "rating": feedback.rating or "",
                "comment": feedback.comment,
                "run_id": run_id,
                "updated_at": timezone.now(),
            },
        )
    return True


def ratings(owner_id: str, thread_id: str) -> dict[str, Feedback]:
    """The feedback on the owner's thread, by message id (one query)."""
    from django_pydantic_agent.contrib.store.models import StoredFeedback

    if len(thread_id) > MAX_KEY:
        return {}
    found = StoredFeedback.objects.filter(
        conversation__owner_id=owner_id, conversation__thread_id=thread_id
    ).values_list("message_id", "rating", "comment")
    return {
        message_id: Feedback(rating=rating or None, comment=comment)  # type: ignore[arg-type]
        for message_id, rating, comment in found
    }
