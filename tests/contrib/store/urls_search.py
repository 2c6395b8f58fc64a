"""``AGUIServer`` mounts for long threads: search over stored history (``StoredHistorySource``),
a small history window, and a harness compaction capability."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from django.urls import path
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai_harness.compaction import SlidingWindowCompaction
from pydantic_ai_harness.conversation_search import ConversationSearch

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions
from django_pydantic_agent.chat_history import HistoryWindow
from django_pydantic_agent.contrib.store.history_source import StoredHistorySource
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore

#: What each search returned to the model, in order.
FOUND: list[str] = []
#: How many messages each model request was sent, in order.
SENT: list[int] = []


async def _searcher(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
    """``search: <words>`` calls the search tool; its result is kept in ``FOUND``."""
    SENT.append(len(messages))
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    for part in last.parts:
        if isinstance(part, ToolReturnPart):
            FOUND.append(str(part.content))
            yield "Searched."
            return
    prompt = next(p for p in reversed(last.parts) if isinstance(p, UserPromptPart))
    text = str(prompt.content)
    if text.startswith("search: "):
        query = json.dumps({"query": text.removeprefix("search: ")})
        call = f"search-{uuid.uuid4().hex[:8]}"
        yield {
            0: DeltaToolCall(name="search_conversation_history", json_args=query, tool_call_id=call)
        }
        return
    yield "Noted."


def _agent(source: StoredHistorySource, scope: Any) -> Agent[Any, str]:
    return Agent(
        FunctionModel(stream_function=_searcher),
        capabilities=[ConversationSearch(source, scope=scope)],
    )


thread_search = AGUIServer(
    _agent(StoredHistorySource(), "conversation"),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="search"),
)
owner_search = AGUIServer(
    _agent(StoredHistorySource(scope="owner"), "all"),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="owner-search"),
)

small_window = AGUIServer(
    Agent(FunctionModel(stream_function=_searcher)),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="window"),
    history=HistoryWindow(max_messages=4),
)
compacting = AGUIServer(
    Agent(
        FunctionModel(stream_function=_searcher),
        capabilities=[SlidingWindowCompaction(max_messages=4, keep_messages=2)],
    ),
    conversation_store=DefaultConversationStore(),
    access=AccessPolicy(csrf_exempt=True),
    mount=MountOptions(namespace="compact"),
)

urlpatterns = [
    path("search/", thread_search.urls),
    path("owner-search/", owner_search.urls),
    path("window/", small_window.urls),
    path("compact/", compacting.urls),
]
