"""Pins and tags of the Default store: kept per thread, deleted with it, shown and filtered in
the admin."""

from __future__ import annotations

import pytest
from django.test import Client

from django_pydantic_agent.contrib.store import tags
from django_pydantic_agent.contrib.store.models import StoredConversation, StoredThreadTag
from django_pydantic_agent.persistence.tags import PinLimitError

pytestmark = pytest.mark.django_db
PREFIX = "/admin/django_pydantic_agent_store/storedconversation/"


def test_labels_are_set_replaced_capped_and_deleted_with_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tags, "MAX_PINNED_THREADS", 1)
    a = StoredConversation.objects.create(owner_id="alice", thread_id="a", title="A")
    StoredConversation.objects.create(owner_id="alice", thread_id="b", title="B")

    assert tags.set_labels("alice", "a", True, ["work", "eu"]) is True
    assert tags.set_labels("alice", "a", None, ["eu"]) is True
    assert tags.set_labels("bob", "a", False, []) is False  # not bob's thread
    with pytest.raises(PinLimitError, match="unpin one first"):
        tags.set_labels("alice", "b", True, None)
    a.refresh_from_db()
    assert a.pinned is True
    assert tags.tags_of([a.pk]) == {a.pk: ("eu",)}
    a.delete()
    assert not StoredThreadTag.objects.exists()


def test_the_admin_filters_pinned_threads_and_shows_their_tags(admin_client: Client) -> None:
    pinned = StoredConversation.objects.create(owner_id="alice", thread_id="p", title="Pinned one")
    StoredConversation.objects.create(owner_id="alice", thread_id="q", title="Other one")
    tags.set_labels("alice", "p", True, ["work", "<b>x</b>"])

    listing = admin_client.get(f"{PREFIX}?pinned__exact=1").content.decode()
    change = admin_client.get(f"{PREFIX}{pinned.pk}/change/").content.decode()

    assert "Pinned one" in listing
    assert "Other one" not in listing
    assert "work, &lt;b&gt;x&lt;/b&gt;" in change
