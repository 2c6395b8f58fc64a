"""Feedback rows of the Default store: one per message, kept by message id and run, deleted
with the thread; the admin filters the answers rated down and links their run's usage."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from html import unescape

import pytest
from django.test import Client

from django_pydantic_agent.contrib.store import feedback
from django_pydantic_agent.contrib.store.models import (
    StoredConversation,
    StoredFeedback,
    StoredMessage,
    StoredRunUsage,
)
from django_pydantic_agent.persistence.feedback import Feedback

pytestmark = pytest.mark.django_db
PREFIX = "/admin/django_pydantic_agent_store/storedfeedback/"


def _thread(owner: str, thread_id: str, *answers: tuple[str, str]) -> StoredConversation:
    row = StoredConversation.objects.create(owner_id=owner, thread_id=thread_id, title=thread_id)
    for position, (message_id, run_id) in enumerate(answers):
        StoredMessage.objects.create(
            conversation=row,
            position=position,
            message_uuid=uuid.uuid4(),
            message_id=message_id,
            role="assistant",
            content=f"answer {message_id}",
            run_id=run_id,
        )
    return row


def test_a_rating_is_kept_once_per_message_with_its_run_and_cleared() -> None:
    _thread("alice", "t-1", ("a1", "run-1"), ("a2", "run-2"))

    assert feedback.rate("alice", "t-1", "a1", Feedback("up")) is True
    assert feedback.rate("alice", "t-1", "a1", Feedback("down", "Wrong year")) is True
    assert feedback.rate("alice", "t-1", "zz", Feedback("up")) is False
    assert feedback.rate("bob", "t-1", "a2", Feedback("up")) is False  # not bob's thread
    [row] = StoredFeedback.objects.all()
    assert (row.message_id, row.rating, row.comment, row.run_id) == (
        "a1",
        "down",
        "Wrong year",
        "run-1",
    )
    assert feedback.ratings("alice", "t-1") == {"a1": Feedback("down", "Wrong year")}
    assert feedback.ratings("bob", "t-1") == {}
    assert feedback.rate("alice", "t-1", "a1", Feedback()) is True
    assert not StoredFeedback.objects.exists()


def test_the_usage_ledger_joins_the_runs_rated_down() -> None:
    _thread("alice", "t-1", ("a1", "run-1"), ("a2", "run-2"))
    for run in ("run-1", "run-2"):
        StoredRunUsage.objects.create(
            owner_id="alice",
            thread_id="t-1",
            run_id=run,
            finished_at=datetime(2026, 12, 7, tzinfo=UTC),
            total_tokens=10,
        )
    feedback.rate("alice", "t-1", "a2", Feedback("down"))
    feedback.rate("alice", "t-1", "a1", Feedback("up"))

    rated_down = StoredFeedback.objects.filter(rating="down").values("run_id")
    assert list(
        StoredRunUsage.objects.filter(run_id__in=rated_down).values_list("run_id", flat=True)
    ) == ["run-2"]


def test_deleting_a_thread_deletes_its_feedback() -> None:
    row = _thread("alice", "t-1", ("a1", "run-1"))
    feedback.rate("alice", "t-1", "a1", Feedback("down"))
    row.delete()
    assert not StoredFeedback.objects.exists()


def test_the_admin_lists_the_answers_rated_down_with_their_thread_and_run(
    admin_client: Client,
) -> None:
    _thread("alice", "Trip", ("a1", "run-1"), ("a2", "run-2"))
    feedback.rate("alice", "Trip", "a1", Feedback("up", "great"))
    feedback.rate("alice", "Trip", "a2", Feedback("down", "<b>late</b>"))

    page = admin_client.get(f"{PREFIX}?rating__exact=down")
    html = page.content.decode()
    text = " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())

    assert page.status_code == 200
    assert "a2" in text
    assert "a1" not in text
    assert "<b>late</b>" not in html  # the comment is escaped
    assert "storedrunusage/?q=run-2" in html
    assert admin_client.get(f"{PREFIX}add/").status_code == 403
