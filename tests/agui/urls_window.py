"""Mounts for the history-window tests: each store under a window of ``CAP`` messages
(``capped-<store>/``) and under the default window (``default-<store>/``), all with a model
that records what it is sent (``SEEN``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from django.urls import path
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions
from django_pydantic_agent.chat_history import HistoryWindow
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import (
    DjangoSessionConversationStore,
    ScopedConversationStore,
)
from tests.testapp.stores import MinimalThreadStore, ThreadStore

#: The window's message cap under test: far under the default (100).
CAP = 10
#: What the model was sent, one list per model request: ``U:<prompt>`` and ``A:<answer>``.
SEEN: list[list[str]] = []


async def _record(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    seen = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                seen.append(f"U:{part.content}")
            elif isinstance(message, ModelResponse) and isinstance(part, TextPart):
                seen.append(f"A:{part.content}")
    SEEN.append(seen)
    yield "Noted."


#: Each store the window is tested on, by the name in its mounts' prefixes. The session store
#: and the ``Model*`` stores read whole threads and cut them in memory; the Default store reads
#: the newest ``max_messages`` records in one query.
STORES: dict[str, Callable[[], Any]] = {
    "session": DjangoSessionConversationStore,
    "scoped-session": lambda: ScopedConversationStore(DjangoSessionConversationStore(), scope="w"),
    "model": ThreadStore,
    "minimal-model": MinimalThreadStore,
    "scoped-model": lambda: ScopedConversationStore(ThreadStore(), scope="w"),
    "default": DefaultConversationStore,
}


def _server(name: str, make: Callable[[], Any], history: HistoryWindow | None) -> AGUIServer:
    options: dict[str, Any] = {} if history is None else {"history": history}
    return AGUIServer(
        Agent(FunctionModel(stream_function=_record)),
        conversation_store=make(),
        access=AccessPolicy(csrf_exempt=True),
        mount=MountOptions(namespace=name),
        **options,
    )


urlpatterns = [
    path(f"{kind}-{name}/", _server(f"{kind}-{name}", make, history).urls)
    for name, make in STORES.items()
    for kind, history in (("capped", HistoryWindow(max_messages=CAP)), ("default", None))
]
