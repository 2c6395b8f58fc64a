"""Pins and tags of ``DefaultConversationStore`` (``persistence.tags``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django_pydantic_agent.contrib.store.quotas import MAX_KEY
from django_pydantic_agent.persistence.tags import MAX_PINNED_THREADS, PinLimitError
from django_pydantic_agent.persistence.transactions import write_transaction

__all__ = ["set_labels", "tags_of"]


def set_labels(
    owner_id: str, thread_id: str, pinned: bool | None, tags: Sequence[str] | None
) -> bool:
    """Set what is not ``None`` on the owner's thread (``tags``: already normalised, replacing
    the thread's); ``False`` when there is no such thread. Raises ``PinLimitError`` for a pin
    past ``MAX_PINNED_THREADS`` (the owner's row lock orders two tabs pinning at once)."""
    from django_pydantic_agent.contrib.store.models import StoredConversation, StoredThreadTag

    if len(thread_id) > MAX_KEY:
        return False
    with write_transaction():
        thread = (
            StoredConversation.objects.select_for_update()
            .filter(owner_id=owner_id, thread_id=thread_id)
            .values_list("pk", "pinned")
            .first()
        )
        if thread is None:
            return False
        pk, was_pinned = thread
        if pinned is not None and pinned != was_pinned:
            owners = StoredConversation.objects.filter(owner_id=owner_id, pinned=True)
            if pinned and owners.count() >= MAX_PINNED_THREADS:
                raise PinLimitError
            StoredConversation.objects.filter(pk=pk).update(pinned=pinned)
        if tags is not None:
            StoredThreadTag.objects.filter(conversation_id=pk).delete()
            StoredThreadTag.objects.bulk_create(
                StoredThreadTag(conversation_id=pk, tag=tag) for tag in tags
            )
    return True


def tags_of(conversation_ids: Iterable[int]) -> dict[int, tuple[str, ...]]:
    """The tags of each of ``conversation_ids`` that has some, in the order they were set
    (one query)."""
    from django_pydantic_agent.contrib.store.models import StoredThreadTag

    found: dict[int, list[str]] = {}
    rows = StoredThreadTag.objects.filter(conversation_id__in=list(conversation_ids))
    for conversation_id, tag in rows.order_by("pk").values_list("conversation_id", "tag"):
        found.setdefault(conversation_id, []).append(tag)
    return {key: tuple(value) for key, value in found.items()}
