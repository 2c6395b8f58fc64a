"""The spend-budget mounts (needs the harness extra): each response is priced $0.01.

``spend/``            per-user daily budget of $0.02, per-thread budget of 60 tokens (total)
``spend-tools/``      per-user daily budget of $0.01; the agent calls a tool, then answers
``spend-stateless/``  a Null store with a per-user daily budget of $0.02
``spend-unpriced/``   the ledger only: a model genai-prices has no price for
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal

from django.urls import path
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from django_pydantic_agent._harness_spend import Budget, SpendLimits
from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions
from django_pydantic_agent.agui.spend import per_thread, per_user
from django_pydantic_agent.contrib.store.spend_store import DefaultSpendStore
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from tests.agui.agents import _after_tool

#: Every model request the mounts' agents received, in order: ``(mount, prompt count)``.
MODEL_CALLS: list[str] = []
PRICE = Decimal("0.01")


def priced(response: ModelResponse) -> Decimal:
    return PRICE


async def _answer(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    MODEL_CALLS.append("answer")
    for word in ["Twenty ", "words ", "cost ", "money."]:
        yield word


async def _tool_then_answer(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
    MODEL_CALLS.append("tools")
    if _after_tool(messages):
        yield "Done."
        return
    yield {0: DeltaToolCall(name="lookup", json_args="{}", tool_call_id="call-1")}


def answer_agent(model_name: str = "gpt-4o") -> Agent[None, str]:
    return Agent(FunctionModel(stream_function=_answer, model_name=model_name))


def tool_agent() -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        FunctionModel(stream_function=_tool_then_answer, model_name="gpt-4o")
    )

    @agent.tool_plain
    def lookup() -> str:
        """Look something up."""
        return "found"

    return agent


def limits(*budgets: Budget[None]) -> SpendLimits[None]:
    return SpendLimits(budgets=list(budgets), store=DefaultSpendStore(), price=priced)


USER_DAY = Budget[None](usd=Decimal("0.02"), window="day", scope=per_user, name="user-day")
THREAD_TOKENS = Budget[None](tokens=60, window="total", scope=per_thread, name="thread")

spend = AGUIServer(
    answer_agent(),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="spend"),
    spend=limits(USER_DAY, THREAD_TOKENS),
)
spend_tools = AGUIServer(
    tool_agent(),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="spend-tools"),
    spend=limits(Budget[None](usd=Decimal("0.01"), window="day", scope=per_user, name="user-day")),
)
spend_stateless = AGUIServer(
    answer_agent(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="spend-stateless"),
    spend=limits(USER_DAY),
)
spend_unpriced = AGUIServer(
    answer_agent("my-local-model"),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="spend-unpriced"),
)

urlpatterns = [
    path("spend/", spend.urls),
    path("spend-tools/", spend_tools.urls),
    path("spend-stateless/", spend_stateless.urls),
    path("spend-unpriced/", spend_unpriced.urls),
]
