"""The run records' admin: columns, filters, search, read-only, deleting finished runs only."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from django_pydantic_agent.contrib.store.models import StoredAgentRun, StoredConversation

pytestmark = pytest.mark.django_db
PREFIX = "/admin/django_pydantic_agent_store/storedagentrun"
USAGE = {"tokens": [{"input_tokens": 1500, "output_tokens": 250, "total_tokens": 1750}]}


def _text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


@pytest.fixture
def runs(alice: User) -> dict[str, StoredAgentRun]:
    now = timezone.now()
    done = StoredAgentRun.objects.create(
        owner_id=str(alice.pk),
        thread_id="thread-a",
        run_id="run-done",
        status="complete",
        worker_id="host-1:4242",
        started_at=now - timedelta(minutes=3),
        finished_at=now - timedelta(minutes=3) + timedelta(seconds=65),
        usage=USAGE,
    )
    live = StoredAgentRun.objects.create(
        owner_id=str(alice.pk),
        thread_id="thread-b",
        run_id="run-live",
        status="running",
        worker_id="host-2:77",
        started_at=now,
    )
    old = StoredAgentRun.objects.create(
        owner_id="service-7",
        thread_id="thread-c",
        run_id="run-old",
        status="errored",
        started_at=now - timedelta(days=30),
        finished_at=now - timedelta(days=30),
        error="The worker running this run stopped sending heartbeats.",
    )
    return {"done": done, "live": live, "old": old}


def test_the_list_shows_status_owner_thread_worker_duration_and_tokens(
    admin_client: Client, alice: User, runs: dict[str, StoredAgentRun]
) -> None:
    page = admin_client.get(f"{PREFIX}/").content.decode()
    rows = {
        run_id: _text(row.split(">", 1)[1])
        for row in page.split("<tr")[1:]
        for run_id in ("run-done", "run-live", "run-old")
        if f">{run_id}<" in row
    }

    assert rows["run-done"].startswith("run-done complete alice thread-a host-1:4242 ")
    assert rows["run-done"].endswith(" 1 min 5 s 1,750 (1,500 in, 250 out)")
    assert "run-live running alice thread-b host-2:77" in rows["run-live"]
    assert rows["run-live"].endswith("running 0 (0 in, 0 out)")
    assert "run-old errored service-7 thread-c" in rows["run-old"]
    assert f'<a href="/admin/auth/user/{alice.pk}/change/">alice</a>' in page


def test_filters_by_status_and_start_date(
    admin_client: Client, runs: dict[str, StoredAgentRun]
) -> None:
    page = admin_client.get(f"{PREFIX}/").content.decode()
    past_week = re.search(r'<a href="\?([^"]+)"[^>]*>Past 7 days</a>', page)
    assert past_week is not None
    assert "By status" in page

    running = admin_client.get(f"{PREFIX}/", {"status__exact": "running"}).content.decode()
    recent = admin_client.get(f"{PREFIX}/?{unescape(past_week[1])}").content.decode()

    assert ">run-live<" in running
    assert ">run-done<" not in running
    assert ">run-done<" in recent
    assert ">run-live<" in recent
    assert ">run-old<" not in recent


@pytest.mark.parametrize(
    ("query", "found"),
    [("thread-b", "run-live"), ("run-old", "run-old"), ("service-7", "run-old")],
)
def test_search_by_exact_thread_run_or_owner_id(
    admin_client: Client, runs: dict[str, StoredAgentRun], query: str, found: str
) -> None:
    page = admin_client.get(f"{PREFIX}/", {"q": query}).content.decode()

    listed = {run_id for run_id in ("run-done", "run-live", "run-old") if f">{run_id}<" in page}
    assert listed == {found}


def test_search_is_exact(admin_client: Client, runs: dict[str, StoredAgentRun]) -> None:
    page = admin_client.get(f"{PREFIX}/", {"q": "thread"}).content.decode()

    assert "0 run records" in page


def test_a_run_page_is_read_only_and_links_its_conversation(
    admin_client: Client, alice: User, runs: dict[str, StoredAgentRun]
) -> None:
    done = runs["done"]
    conv = StoredConversation.objects.create(
        owner_id=str(alice.pk), thread_id="thread-a", title="<i>Trip</i>"
    )

    page = admin_client.get(f"{PREFIX}/{done.pk}/change/").content.decode()
    text = _text(page)

    assert "Tokens: 1,750 (1,500 in, 250 out)" in text
    assert "Duration: 1 min 5 s" in text
    assert '"input_tokens": 1500' in text
    assert (
        f'<a href="/admin/django_pydantic_agent_store/storedconversation/{conv.pk}/change/">'
        "&lt;i&gt;Trip&lt;/i&gt;</a>"
    ) in page
    assert 'name="_save"' not in page
    assert admin_client.get(f"{PREFIX}/add/").status_code == 403
    posted = admin_client.post(f"{PREFIX}/{done.pk}/change/", {"status": "running"})
    assert posted.status_code == 403
    done.refresh_from_db()
    assert done.status == "complete"


def test_a_run_without_its_conversation_says_so(
    admin_client: Client, runs: dict[str, StoredAgentRun]
) -> None:
    page = admin_client.get(f"{PREFIX}/{runs['old'].pk}/change/").content.decode()

    assert "none (deleted, or never stored)" in page
    assert "stopped sending heartbeats" in page


def test_a_finished_run_can_be_deleted_a_running_one_cannot(
    admin_client: Client, runs: dict[str, StoredAgentRun]
) -> None:
    live, done = runs["live"], runs["done"]

    assert admin_client.get(f"{PREFIX}/{live.pk}/delete/").status_code == 403
    assert admin_client.post(f"{PREFIX}/{live.pk}/delete/", {"post": "yes"}).status_code == 403
    live_page = admin_client.get(f"{PREFIX}/{live.pk}/change/").content.decode()
    assert 'class="deletelink"' not in live_page
    response = admin_client.post(f"{PREFIX}/{done.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert set(StoredAgentRun.objects.values_list("run_id", flat=True)) == {"run-live", "run-old"}


def test_bulk_delete_refuses_a_selection_with_a_running_run(
    admin_client: Client, runs: dict[str, StoredAgentRun]
) -> None:
    selection = [runs["live"].pk, runs["old"].pk]

    confirm = admin_client.post(
        f"{PREFIX}/", {"action": "delete_selected", "_selected_action": selection}
    )
    forced = admin_client.post(
        f"{PREFIX}/", {"action": "delete_selected", "_selected_action": selection, "post": "yes"}
    )

    shown = _text(confirm.content.decode())
    assert "run run-live: still running (only a finished run can be deleted)" in shown
    assert "permission" not in shown
    assert StoredAgentRun.objects.count() == 3
    assert forced.status_code == 200  # the confirmation again, nothing deleted
    assert StoredAgentRun.objects.count() == 3
    admin_client.post(
        f"{PREFIX}/",
        {"action": "delete_selected", "_selected_action": [runs["old"].pk], "post": "yes"},
    )
    assert not StoredAgentRun.objects.filter(run_id="run-old").exists()
