"""Spend budgets on a mount, over Django's ASGI app: a spent budget refuses a run before the
model is called or anything is stored (JSON 429), a budget spent during a run ends it with
``RUN_ERROR`` ``BUDGET_EXCEEDED``, each says when it resets, and no caller spends, or sees the
usage of, another.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from django_pydantic_agent.agui import AccessPolicy

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from django_pydantic_agent._harness_spend import Budget, SpendLimits
from django_pydantic_agent.agui import AGUIServer
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.agui.spend import (
    BUDGET_EXCEEDED_CODE,
    budget_refusal,
    per_user,
    resets_at,
)
from django_pydantic_agent.contrib.store.models import (
    StoredAgentRun,
    StoredConversation,
    StoredRunUsage,
    StoredSpendCounter,
)
from tests.agui.conftest import logged_in, run_body, sse_events
from tests.agui.urls_spend import MODEL_CALLS

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls_spend")]


def _tomorrow() -> str:
    today = datetime.now(UTC).date() + timedelta(days=1)
    return datetime(today.year, today.month, today.day, tzinfo=UTC).isoformat()


async def _run(http: Any, prefix: str, thread_id: str, run_id: str) -> Any:
    response = await http.post(prefix, json=run_body(thread_id=thread_id, run_id=run_id))
    await RunCoordinator.wait_for_all_runs()
    return response


@pytest.fixture(autouse=True)
def _forget_calls() -> None:
    MODEL_CALLS.clear()


async def test_a_spent_daily_budget_refuses_the_next_run_before_the_model_or_the_store(
    alice: Any,
) -> None:
    async with await logged_in(alice) as http:
        for index in (1, 2):
            response = await _run(http, "/spend/", f"t-{index}", f"r-{index}")
            assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
        calls, runs = len(MODEL_CALLS), await StoredAgentRun.objects.acount()

        refused = await _run(http, "/spend/", "t-3", "r-3")

    assert refused.status_code == 429
    body = refused.json()
    assert body["code"] == BUDGET_EXCEEDED_CODE
    assert (body["budget"], body["window"]) == ("user-day", "day")
    assert body["resetsAt"] == _tomorrow()
    assert body["error"] == (
        "The day budget 'user-day' is spent (spent $0.02 of $0.02); try again after it "
        f"resets at {_tomorrow()}."
    )
    assert 0 < int(refused.headers["Retry-After"]) <= 24 * 3600
    # Nothing half-done: no model call, no run record, no thread.
    assert len(MODEL_CALLS) == calls
    assert await StoredAgentRun.objects.acount() == runs
    assert not await StoredConversation.objects.filter(thread_id="t-3").aexists()


async def test_another_users_spending_never_spends_yours(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http:
        for index in (1, 2):
            await _run(http, "/spend/", f"t-{index}", f"r-{index}")
        assert (await _run(http, "/spend/", "t-3", "r-3")).status_code == 429

    # Bob posts on alice's thread ids with alice's name in the fields a client controls: he
    # spends his own budget, on his own thread.
    async with await logged_in(bob) as http:
        body = run_body(thread_id="t-1", run_id="r-b")
        body["forwardedProps"] = {"user": "alice", "owner": "1"}
        response = await http.post("/spend/", json=body)
        await RunCoordinator.wait_for_all_runs()
        assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
        usage = (await http.get("/spend/usage/?thread=t-1")).json()

    assert usage["total"]["runs"] == 1
    assert usage["thread"]["runs"] == 1
    (user_day,) = [b for b in usage["budgets"] if b["name"] == "user-day"]
    assert user_day["spentUsd"] == "0.01"
    assert not user_day["exhausted"]
    async with await logged_in(alice) as http:
        mine = (await http.get("/spend/usage/")).json()
    (alice_day,) = [b for b in mine["budgets"] if b["name"] == "user-day"]
    assert alice_day["spentUsd"] == "0.02"
    assert mine["total"]["runs"] == 2


async def test_usage_shows_only_the_callers_own_runs_and_threads(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http:
        await _run(http, "/spend/", "alice-secret", "r-1")
    async with await logged_in(bob) as http:
        theirs = (await http.get("/spend/usage/?thread=alice-secret")).json()
        missing = (await http.get("/spend/usage/?thread=no-such-thread")).json()

    assert theirs["total"]["runs"] == 0
    assert theirs["days"] == []
    # Another owner's thread reads exactly like a thread that does not exist.
    assert theirs["thread"] == {**missing["thread"], "threadId": "alice-secret"}
    assert theirs["thread"]["runs"] == 0
    assert [b["spentUsd"] for b in theirs["budgets"] if b["name"] == "user-day"] == ["0"]


async def test_a_per_thread_budget_spends_one_thread_of_one_owner(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http:
        first = await _run(http, "/spend/", "long", "r-1")
        assert sse_events(first.text)[-1]["type"] == "RUN_FINISHED"
        tokens = (await http.get("/spend/usage/?thread=long")).json()
        (thread,) = [b for b in tokens["budgets"] if b["name"] == "thread"]
        assert thread["spentTokens"] > 0
        # Spend the thread's 60 tokens through the counter, as other workers' runs would.
        await StoredSpendCounter.objects.filter(key__startswith="thread|").aupdate(tokens=60)

        refused = await _run(http, "/spend/", "long", "r-2")
        other_thread = await _run(http, "/spend/", "short", "r-3")

    assert refused.status_code == 429
    assert refused.json()["budget"] == "thread"
    assert refused.json()["resetsAt"] is None
    assert "it does not reset by itself" in refused.json()["error"]
    assert "Retry-After" not in refused.headers
    assert sse_events(other_thread.text)[-1]["type"] == "RUN_FINISHED"
    async with await logged_in(bob) as http:
        same_id = await _run(http, "/spend/", "long", "r-b")
    assert sse_events(same_id.text)[-1]["type"] == "RUN_FINISHED"


async def test_a_budget_spent_during_a_run_ends_it_with_budget_exceeded(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await _run(http, "/spend-tools/", "tools", "r-1")
        thread = (await http.get("/spend-tools/threads/tools/")).json()

    events = sse_events(response.text)
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == BUDGET_EXCEEDED_CODE
    assert events[-1]["message"] == (
        "The day budget 'user-day' is spent (spent $0.01 of $0.01); try again after it "
        f"resets at {_tomorrow()}."
    )
    # The tool call was answered, then the second model request was never made.
    assert MODEL_CALLS == ["tools"]
    run = await StoredAgentRun.objects.aget(run_id="r-1")
    assert run.status == "errored"
    assert run.error.startswith(f"[{BUDGET_EXCEEDED_CODE}] The day budget 'user-day'")
    # Nothing left in progress: every stored message of the run is final.
    assert all(m.get("status") != "active" for m in thread["messages"])


async def test_a_stateless_mount_refuses_with_the_same_429(alice: Any) -> None:
    async with await logged_in(alice) as http:
        for index in (1, 2):
            response = await http.post("/spend-stateless/", json=run_body(run_id=f"r-{index}"))
            assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
        refused = await http.post("/spend-stateless/", json=run_body(run_id="r-3"))
        usage = (await http.get("/spend-stateless/usage/")).json()

    assert refused.status_code == 429
    assert refused.json()["code"] == BUDGET_EXCEEDED_CODE
    assert MODEL_CALLS == ["answer", "answer"]
    # No ledger without a run store; the budgets still show.
    assert usage["total"] is None
    assert usage["budgets"][0]["exhausted"] is True


async def test_the_ledger_stores_each_runs_tokens_and_cost_and_sums_them(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await _run(http, "/spend/", "t-1", "r-1")
        await _run(http, "/spend/", "t-1", "r-2")
        usage = (await http.get("/spend/usage/?thread=t-1&days=7")).json()

    rows = [row async for row in StoredRunUsage.objects.order_by("run_id")]
    assert [row.run_id for row in rows] == ["r-1", "r-2"]
    for row in rows:
        assert row.model == "gpt-4o"
        assert row.total_tokens == row.input_tokens + row.output_tokens > 0
        # genai-prices' gpt-4o price: $2.50 per million input tokens, $10 per million output.
        expected = (Decimal(row.input_tokens) * Decimal("2.5") + row.output_tokens * 10) / 10**6
        assert row.cost_usd == expected
    total_cost = sum((row.cost_usd for row in rows), Decimal(0))
    tokens = sum(row.total_tokens for row in rows)
    for totals in (usage["total"], usage["today"], usage["thread"]):
        assert totals["runs"] == 2
        assert totals["totalTokens"] == tokens
        assert Decimal(totals["costUsd"]) == total_cost
        assert totals["unpricedRuns"] == 0
    assert [day["day"] for day in usage["days"]] == [datetime.now(UTC).date().isoformat()]
    assert usage["days"][0]["runs"] == 2


async def test_a_model_without_a_price_is_counted_as_unpriced_never_as_free(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await _run(http, "/spend-unpriced/", "t-1", "r-1")
        usage = (await http.get("/spend-unpriced/usage/")).json()

    row = await StoredRunUsage.objects.aget()
    assert row.cost_usd is None
    assert row.total_tokens > 0
    assert usage["total"]["unpricedRuns"] == 1
    assert usage["total"]["costUsd"] == "0"
    assert usage["budgets"] == []


async def test_usage_refuses_a_bad_query_with_a_400_naming_it(alice: Any) -> None:
    async with await logged_in(alice) as http:
        days = await http.get("/spend/usage/?days=0")
        many = await http.get("/spend/usage/?days=400")
        thread = await http.get("/spend/usage/?thread=" + "x" * 300)

    assert days.status_code == many.status_code == thread.status_code == 400
    assert "days must be a whole number from 1 to 366" in days.json()["error"]
    assert "thread must be a thread id" in thread.json()["error"]


async def test_usage_answers_an_anonymous_caller_as_every_route_does(client: Any) -> None:
    response = await client.get("/spend/usage/")

    assert response.status_code == 401
    assert "error" in response.json()


def test_spend_must_be_a_harness_spend_limits() -> None:
    with pytest.raises(TypeError, match="spend=42 is not a pydantic-ai-harness SpendLimits"):
        AGUIServer(Agent(TestModel()), spend=42, access=AccessPolicy(csrf_exempt=True))


async def test_a_scope_outside_a_mount_says_where_the_limits_belong() -> None:
    limits = SpendLimits[None](budgets=[Budget(usd=Decimal(1), scope=per_user, name="u")])
    agent = Agent(TestModel(), capabilities=[limits])

    with pytest.raises(ValueError, match=r"pass the SpendLimits to AGUIServer\(spend="):
        await agent.run("hi")


def test_reset_times_are_the_next_utc_day_and_month_and_none_otherwise() -> None:
    now = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)

    assert resets_at("day", now) == datetime(2027, 1, 1, tzinfo=UTC)
    assert resets_at("month", now) == datetime(2027, 1, 1, tzinfo=UTC)
    assert resets_at("month", datetime(2026, 5, 3, tzinfo=UTC)) == datetime(2026, 6, 1, tzinfo=UTC)
    assert resets_at("total", now) is None
    assert budget_refusal(RuntimeError("Budget 'x' exhausted for this day: y")) is None
