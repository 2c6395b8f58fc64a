"""The usage ledger's admin: read-only rows, users and threads by cost over a date range, and
the same table as CSV, with owners shown as the admin shows them (never a session key)."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from decimal import Decimal
from html import unescape

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_pydantic_agent.contrib.store.models import StoredRunUsage

pytestmark = pytest.mark.django_db
PREFIX = "/admin/django_pydantic_agent_store/storedrunusage"
SESSION_OWNER = "anon:secretsessionkey123"


def _text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def _row(
    owner: str,
    thread: str,
    run: str,
    day: int,
    tokens: int,
    cost: str | None,
    *,
    estimated: bool = False,
) -> None:
    StoredRunUsage.objects.create(
        owner_id=owner,
        thread_id=thread,
        run_id=run,
        finished_at=datetime(2026, 12, day, 12, tzinfo=UTC),
        model="gpt-4o",
        input_tokens=tokens,
        total_tokens=tokens,
        cost_usd=None if cost is None else Decimal(cost),
        estimated=estimated,
    )


@pytest.fixture
def ledger(alice: User, bob: User) -> None:
    _row(str(alice.pk), "a-1", "r1", 1, 100, "0.50")
    _row(str(alice.pk), "a-2", "r2", 3, 300, "1.25")
    _row(str(bob.pk), "b-1", "r3", 3, 50, "2.00", estimated=True)  # a stopped run
    _row(str(bob.pk), "b-1", "r4", 4, 70, None)
    _row(SESSION_OWNER, "s-1", "r5", 4, 10, "0.01")


@pytest.fixture
def staff(admin_client: Client) -> Client:
    return admin_client


@pytest.mark.usefixtures("ledger")
def test_users_by_cost_are_summed_and_sorted_most_expensive_first(staff: Client) -> None:
    page = staff.get(f"{PREFIX}/by-cost/?group=owner")

    assert page.status_code == 200
    text = _text(page.content.decode())
    assert text.index("bob") < text.index("alice") < text.index("anonymous session")
    # runs, tokens..., cost, one unpriced run, one estimated run (stopped before its usage)
    assert "bob 2 120 0 120 2 1 1" in text
    assert "alice 2 400 0 400 1.75 0 0" in text
    assert "secretsessionkey" not in page.content.decode()


@pytest.mark.usefixtures("ledger")
def test_a_date_range_keeps_only_the_runs_of_those_days(staff: Client) -> None:
    page = staff.get(f"{PREFIX}/by-cost/?group=thread&since=2026-12-03&until=2026-12-03")

    text = _text(page.content.decode())
    assert "alice a-2 1 300" in text
    assert "bob b-1 1 50" in text
    assert "a-1" not in text
    assert "s-1" not in text


@pytest.mark.usefixtures("ledger")
def test_the_csv_export_is_the_same_table(staff: Client, alice: User) -> None:
    response = staff.get(f"{PREFIX}/by-cost/?group=thread&since=2026-12-01&format=csv")

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert "usage-by-thread-2026-12-01_now.csv" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == [
        "owner",
        "thread_id",
        "runs",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "cost_usd",
        "unpriced_runs",
        "estimated_runs",
    ]
    assert rows[1] == ["bob", "b-1", "2", "120", "0", "120", "2", "1", "1"]
    assert rows[2] == ["alice", "a-2", "1", "300", "0", "300", "1.25", "0", "0"]
    assert rows[-1][0].startswith("anonymous session ")
    assert "secretsessionkey" not in response.content.decode()


@pytest.mark.usefixtures("ledger")
def test_a_bad_date_is_ignored_and_said_so(staff: Client) -> None:
    page = staff.get(f"{PREFIX}/by-cost/?since=yesterday")

    assert page.status_code == 200
    assert "A date was not YYYY-MM-DD and was ignored." in page.content.decode()
    assert "alice" in _text(page.content.decode())


@pytest.mark.usefixtures("ledger")
def test_the_ledger_is_read_only_and_links_to_the_by_cost_pages(staff: Client) -> None:
    page = staff.get(f"{PREFIX}/")
    row = StoredRunUsage.objects.get(run_id="r4")

    assert page.status_code == 200
    assert "by-cost/?group=owner" in page.content.decode()
    assert "unpriced" in _text(page.content.decode())
    assert staff.get(f"{PREFIX}/add/").status_code == 403
    change = staff.post(f"{PREFIX}/{row.pk}/change/", {"total_tokens": 1})
    assert change.status_code == 403
    row.refresh_from_db()
    assert row.total_tokens == 70


def test_staff_without_view_permission_cannot_read_the_costs(client: Client) -> None:
    User.objects.create_user("clerk", password="pw", is_staff=True)
    client.login(username="clerk", password="pw")

    assert client.get(f"{PREFIX}/by-cost/").status_code == 403
