"""Spend budgets on the AI SDK's route (needs the harness extra): a spent budget refuses the
run before the stream with the JSON 429 the AG-UI route answers, and a budget spent during a
run ends its stream with ``error`` and ``finish`` carrying ``BUDGET_EXCEEDED``."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from django.urls import path

from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.agui.spend import BUDGET_EXCEEDED_CODE
from django_pydantic_agent.contrib.store.models import StoredConversation
from django_pydantic_agent.vercel_ai import VercelAITransport
from tests.agui.urls_spend import MODEL_CALLS, spend, spend_tools
from tests.vercel_ai.conftest import chat_body, chunks, logged_in, user_message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls(__name__)]

urlpatterns = [
    path("spend/api/chat", VercelAITransport(spend, namespace="spend-chat").urls),
    path("spend-tools/api/chat", VercelAITransport(spend_tools, namespace="tools-chat").urls),
]


async def _chat(http: Any, prefix: str, thread_id: str) -> Any:
    response = await http.post(f"/{prefix}/api/chat", json=chat_body(thread_id, user_message("Hi")))
    await RunCoordinator.wait_for_all_runs()
    return response


async def test_a_spent_budget_refuses_the_run_before_the_stream(alice: Any) -> None:
    MODEL_CALLS.clear()
    async with await logged_in(alice) as http:
        for index in (1, 2):
            done = await _chat(http, "spend", f"t-{index}")
            assert chunks(done.text)[-1]["finishReason"] == "stop"
        calls = len(MODEL_CALLS)
        refused = await _chat(http, "spend", "t-3")

    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/json"
    body = refused.json()
    assert body["code"] == BUDGET_EXCEEDED_CODE
    assert body["error"].startswith("The day budget 'user-day' is spent")
    assert "resetsAt" in body
    assert int(refused.headers["Retry-After"]) > 0
    assert len(MODEL_CALLS) == calls
    assert not await StoredConversation.objects.filter(thread_id="t-3").aexists()


async def test_a_budget_spent_during_a_run_ends_the_stream_with_its_code(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await _chat(http, "spend-tools", "tools")

    found = chunks(response.text)
    assert [c["type"] for c in found][-2:] == ["error", "finish"]
    assert found[-2]["errorText"].startswith("The day budget 'user-day' is spent")
    assert found[-1]["messageMetadata"]["errorCode"] == BUDGET_EXCEEDED_CODE
