"""The agent of the ``/crash/`` mount (``runs_urls.py``): one word, then an exception.

Importable without Django, so the tests read the same constants the server uses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

#: What the agent raises; it must never reach the client.
SECRET_ERROR = "the database password is hunter2"
#: What it streams before it raises.
PARTIAL_ANSWER = "Partial "


async def _crash(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    yield PARTIAL_ANSWER
    raise RuntimeError(SECRET_ERROR)


def crashing_agent() -> Agent[None, str]:
    """Streams ``PARTIAL_ANSWER``, then raises ``RuntimeError(SECRET_ERROR)``."""
    return Agent(FunctionModel(stream_function=_crash), name="crash")
