"""An ``AGUIServer`` mount whose agent summarises with ``SummarizingCompaction``: the main
model and the summariser are ``FunctionModel``s that record what they are sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from django.urls import path
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai_harness.compaction import SummarizingCompaction, TieredCompaction

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore

#: What each main-model request was sent, in order.
SENT: list[list[ModelMessage]] = []
#: The prompt of each summariser call, in order.
SUMMARISED: list[str] = []
#: The main model's every answer: longer than a summary of two turns, so a compaction makes
#: the request smaller: harness 0.75 discards a compaction that does not.
REPLY = "Noted. I will keep that in mind for the rest of our conversation."


async def _answer(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    SENT.append(list(messages))
    yield REPLY


def _summarise(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt = "".join(str(getattr(part, "content", "")) for part in messages[-1].parts)
    SUMMARISED.append(prompt)
    text = f"Summary #{len(SUMMARISED)} of the early turns."
    return ModelResponse(parts=[TextPart(content=text)])


def summarising_agent() -> Agent[Any, str]:
    """The main model, with a compaction that summarises past six messages, keeping two."""
    return Agent(
        FunctionModel(stream_function=_answer),
        capabilities=[
            SummarizingCompaction(
                model=FunctionModel(function=_summarise), max_messages=6, keep_messages=2
            )
        ],
    )


summarising = AGUIServer(
    summarising_agent(),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="summarising"),
)

tiered = AGUIServer(
    Agent(
        FunctionModel(stream_function=_answer),
        capabilities=[
            TieredCompaction(
                tiers=[
                    SummarizingCompaction(
                        model=FunctionModel(function=_summarise), max_messages=1, keep_messages=2
                    )
                ],
                target_tokens=250,
            )
        ],
    ),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="tiered"),
)

keeping = AGUIServer(
    Agent(
        FunctionModel(stream_function=_answer),
        capabilities=[
            SummarizingCompaction(
                model=FunctionModel(function=_summarise),
                max_messages=6,
                keep_messages=2,
                keep_user_messages=True,
            )
        ],
    ),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="keeping"),
)

urlpatterns = [
    path("summarising/", summarising.urls),
    path("tiered/", tiered.urls),
    path("keeping/", keeping.urls),
]
