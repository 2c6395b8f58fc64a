"""The Vercel AI SDK transport: ``useChat`` on an ``AGUIServer``'s durable runs.

Mount ``path("api/chat", VercelAITransport(server).urls)`` beside ``server.urls``. The modules,
one concept each:

- ``request``: the body ``DefaultChatTransport`` posts, validated with pydantic-ai's models of
  it, and the run input it asks for.
- ``stream``: a run's AG-UI events as the AI SDK's UI message stream chunks, over SSE.
- ``messages``: a stored thread as ``UIMessage``s, and a stored answer's parts (replayed when a
  stream resumes).
- ``transport``: ``VercelAITransport``, the routes.
"""

from __future__ import annotations

from django_pydantic_agent.vercel_ai.messages import ui_messages
from django_pydantic_agent.vercel_ai.request import (
    ChatRequest,
    chat_run_input,
    parse_chat_request,
)
from django_pydantic_agent.vercel_ai.stream import (
    UI_MESSAGE_STREAM_HEADER,
    UIMessageStreamEncoder,
    ui_message_response,
)
from django_pydantic_agent.vercel_ai.transport import VercelAITransport

__all__ = [
    "UI_MESSAGE_STREAM_HEADER",
    "ChatRequest",
    "UIMessageStreamEncoder",
    "VercelAITransport",
    "chat_run_input",
    "parse_chat_request",
    "ui_message_response",
    "ui_messages",
]
