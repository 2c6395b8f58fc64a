"""The URLs of ``bench.site``: one AGUIServer per mount (see ``bench.site``) and the emulator."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.http import JsonResponse
from django.urls import path
from pydantic_ai import Agent
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel

from bench.turncost import SAME_WINDOW
from django_pydantic_agent.agui import AccessPolicy, AGUIServer, AttachmentOptions, MountOptions
from django_pydantic_agent.chat_history import HistoryWindow
from django_pydantic_agent.contrib.memory_service_emulator.urls import memory_service_urls
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from django_pydantic_agent.memory_service import DRMemoryServiceClient
from django_pydantic_agent.persistence import NullConversationStore
from django_pydantic_agent.persistence.memory_service import MemoryServiceConversationStore
from django_pydantic_agent.vercel_ai import VercelAITransport


def demo(word_delay: float) -> Agent[None, str]:
    """The example project's agent, on its scripted model (``make demo`` serves it)."""
    folder = str(Path(__file__).resolve().parents[1] / "example_project")
    if folder not in sys.path:
        sys.path.append(folder)
    from chat.agent import build_agent

    agent: Agent[None, str] = build_agent(None, word_delay=word_delay)
    return agent


def streaming(deltas: int, delay: float = 0.0) -> Agent[None, str]:
    async def stream(messages: list[Any], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        for i in range(deltas):
            if delay:
                await asyncio.sleep(delay)
            yield f"w{i} "

    return Agent(FunctionModel(stream_function=stream), name="bench")


user: list[Any] = []


async def bench_user(request: Any) -> Any:
    if not user:
        user.append(await get_user_model().objects.aget(username="bench"))
    return user[0]


class Latency(httpx.AsyncBaseTransport):
    """Forwards to ``inner`` after ``delay`` seconds: a Memory Service farther away."""

    def __init__(self, inner: httpx.AsyncBaseTransport, delay: float) -> None:
        self.inner, self.delay = inner, delay

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        start = time.perf_counter()
        await asyncio.sleep(self.delay)
        if TRACE:
            print(f"{time.perf_counter():.3f} {request.method} {request.url.path}", file=sys.stderr)
        response = await self.inner.handle_async_request(request)
        if request.method == "GET":  # a lookup, as a run's first request on a thread is
            await response.aread()
            lookups.append((time.perf_counter() - start) * 1000)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


TRACE = bool(os.environ.get("BENCH_TRACE"))
lookups: deque[float] = deque(maxlen=1000)
"""How long each GET through a ``Latency`` transport took, ms, delay included (newest last)."""


async def lookup_times(request: Any) -> JsonResponse:
    """``GET /lookups/``: the GET times above, so a client can tell what one request costs."""
    return JsonResponse({"ms": list(lookups)})


emulator = os.environ.get("BENCH_EMULATOR", "http://127.0.0.1:1/api/v2")


def memory_service(delay: float) -> MemoryServiceConversationStore:
    transport: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport()
    if delay:
        transport = Latency(transport, delay)
    pool = httpx.AsyncClient(transport=transport, timeout=30.0)
    client = DRMemoryServiceClient(endpoint=emulator, api_token="bench", http_client=pool)
    return MemoryServiceConversationStore(client, f"bench-{int(delay * 1000)}ms")


def mount(
    name: str,
    agent: Agent[None, str],
    *,
    chat: bool = False,
    max_body_bytes: int | None = None,
    **options: Any,
) -> list[Any]:
    """The server at ``<name>/``, and with ``chat`` its AI SDK routes at ``<name>-chat``."""
    server = AGUIServer(
        agent,
        access=AccessPolicy(get_user=bench_user, csrf_exempt=True),
        mount=MountOptions(namespace=name, max_body_bytes=max_body_bytes),
        **options,
    )
    mounted = [path(f"{name}/", server.urls)]
    if chat:
        transport = VercelAITransport(server, namespace=f"{name}-chat")
        mounted.append(path(f"{name}-chat", transport.urls))
    return mounted


agent = streaming(settings.BENCH_DELTAS)
demo_agent = demo(float(os.environ.get("BENCH_WORD_DELAY", "0.02")))
urlpatterns = [
    *mount("off", agent, conversation_store=NullConversationStore()),
    *mount(
        "default",
        agent,
        chat=True,
        conversation_store=DefaultConversationStore(),
        attachment_store=DefaultAttachmentStore(),
        attachments=AttachmentOptions(max_bytes=settings.BENCH_UPLOAD_MAX_BYTES),
    ),
    *mount("ms", agent, conversation_store=memory_service(0.0)),
    *mount("ms20", agent, conversation_store=memory_service(0.020)),
    *mount(
        "slow",
        streaming(6000, delay=0.010),
        chat=True,
        conversation_store=DefaultConversationStore(),
    ),
    *mount(  # a thread of 10,000 messages posted back is about 3.5 MB (bench.turncost)
        "short",
        streaming(5),
        conversation_store=DefaultConversationStore(),
        max_body_bytes=settings.BENCH_UPLOAD_MAX_BYTES,
    ),
    *mount(  # the same window at every thread length (bench.turncost)
        "short10",
        streaming(5),
        conversation_store=DefaultConversationStore(),
        history=HistoryWindow(max_messages=SAME_WINDOW),
    ),
    # One worker's capacity (bench.capacity): the demo's model, 20 ms a word, durable and not.
    *mount("capacity", demo_agent, conversation_store=DefaultConversationStore()),
    *mount("capacity-off", demo_agent, conversation_store=NullConversationStore()),
    *memory_service_urls("api/v2/memory/"),
    path("lookups/", lookup_times),
]
