"""The code of ``docs/usage.md`` runs as printed, and the JSON it shows is what the routes send.

The budgets snippet is the URLconf of a real ASGI app: a user whose daily budget is spent gets
the 429 the page prints (the model is never called, so the page's OpenAI model needs no key).
The ledger snippet prints an owner's week from rows in the database.
"""

from __future__ import annotations

import json
import re
import sys
import types
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from django.contrib.auth import get_user_model
from django.test import override_settings

from django_pydantic_agent._harness_spend import SpendEntry
from django_pydantic_agent.contrib.store.models import StoredRunUsage
from django_pydantic_agent.contrib.store.spend_store import DefaultSpendStore
from tests.agui.conftest import CSRF_SECRET, logged_in, run_body

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
pytestmark = pytest.mark.django_db(transaction=True)


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE, flags=re.DOTALL)


@pytest.fixture
def docs_urls(harness_names_as_documented: None) -> Iterator[types.ModuleType]:
    (code, _) = _blocks("python")
    module = types.ModuleType("docs_usage_urls")
    exec(compile(code, "docs/usage.md", "exec"), module.__dict__)
    sys.modules[module.__name__] = module
    try:
        with override_settings(ROOT_URLCONF=module.__name__):
            yield module
    finally:
        del sys.modules[module.__name__]


async def test_a_spent_budget_is_the_429_the_page_shows(docs_urls: types.ModuleType) -> None:
    alice = await get_user_model().objects.acreate_user("alice", password="pw")
    server = docs_urls.server
    gate = server.spend
    owner = str(alice.pk)
    ctx = gate.context(deps=None, owner_id=owner, thread_id="t-1", run_id="r-1")
    (day,) = [s for s in await docs_urls.limits.status(ctx) if s.budget.name == "user-day"]
    await DefaultSpendStore().add_many([SpendEntry(key=day.key, usd=Decimal("2.01"))])

    async with await logged_in(alice) as http:
        http.cookies.set("csrftoken", CSRF_SECRET)
        refused = await http.post(
            "/agent/",
            json=run_body(thread_id="t-1", run_id="r-1"),
            headers={"X-CSRFToken": CSRF_SECRET},
        )
        usage = await http.get("/agent/usage/?thread=t-1")

    printed = json.loads(_blocks("json")[0])
    assert refused.status_code == 429
    body = refused.json()
    assert body.keys() == printed.keys()
    now = datetime.now(UTC).date()
    assert body["error"] == printed["error"].replace("2026-12-06", body["resetsAt"][:10])
    assert body["resetsAt"] > now.isoformat()
    shown = json.loads(_blocks("json")[1])
    answer = usage.json()
    assert answer.keys() == shown.keys()
    assert answer["total"].keys() == shown["total"].keys()
    assert answer["thread"].keys() == shown["thread"].keys()
    (budget,) = [b for b in answer["budgets"] if b["name"] == "user-day"]
    assert budget.keys() == shown["budgets"][0].keys()
    assert (budget["spentUsd"], budget["exhausted"]) == ("2.01", True)


async def test_the_ledger_snippet_prints_an_owners_week(capsys: pytest.CaptureFixture[str]) -> None:
    (_, code) = _blocks("python")
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/usage.md", "exec"), namespace)
    await StoredRunUsage.objects.acreate(
        owner_id="7", thread_id="t", run_id="r", total_tokens=30, cost_usd=Decimal("0.25")
    )
    await StoredRunUsage.objects.acreate(owner_id="8", thread_id="t", run_id="r", total_tokens=5)

    await namespace["last_week"]("7")

    lines = capsys.readouterr().out.splitlines()
    assert lines == ["1 30 0.25 0", f"{datetime.now(UTC).date()} 0.25"]
