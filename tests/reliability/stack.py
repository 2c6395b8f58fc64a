"""What the cross-owner, fuzzing and fault tests run on: a real server, the stores, an agent.

``serve`` runs Django's ASGI application under uvicorn on a loopback port, as a task of the
test's own event loop: durable runs then live in the test's loop (the suite's teardown waits
for them), while every byte still crosses a real socket. The URLconf is a fresh module whose
patterns the test may extend once the port is known (a Memory Service client needs it).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import uvicorn
from django.test import override_settings
from django.urls import URLPattern, URLResolver, clear_url_caches
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from django_pydantic_agent.contrib.memory_service_emulator.urls import memory_service_urls
from tests.agui.conftest import asgi_app

__all__ = ["HOLD", "Served", "echo_agent", "serve", "user_texts"]

# Built now, at collection: building it runs django.setup(), which re-applies LOGGING and would
# detach pytest's log capture if it happened inside a test.
asgi_app()

#: A prompt containing this word makes ``echo_agent`` wait (until cancelled) after one word.
HOLD = "HOLD-THE-RUN"


def user_texts(messages: list[ModelMessage]) -> list[str]:
    """Every user prompt the model was given, oldest first."""
    texts = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    texts.append(part.content)
    return texts


async def _echo(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    """Repeat every user prompt of the history: whatever the model saw, the stream shows."""
    texts = user_texts(messages)
    yield "heard: "
    if texts and HOLD in texts[-1]:
        await asyncio.sleep(120)  # until the run is cancelled
    for text in texts:
        yield f"[{text}] "


def echo_agent() -> Agent[None, str]:
    """Answers with every user prompt it was given; holds a run whose prompt says ``HOLD``."""
    return Agent(FunctionModel(stream_function=_echo))


class Served:
    """A running server: its ``origin`` and the URL patterns it serves (extend with ``mount``)."""

    def __init__(self, origin: str, module: types.ModuleType) -> None:
        self.origin = origin
        self._module = module

    def mount(self, patterns: Iterable[URLPattern | URLResolver]) -> None:
        """Serve ``patterns`` too, from the next request on."""
        self._module.urlpatterns.extend(patterns)
        clear_url_caches()


@asynccontextmanager
async def serve(patterns: Iterable[URLPattern | URLResolver] = ()) -> AsyncIterator[Served]:
    """Serve the emulator (at ``api/v2/memory/``) and ``patterns`` over uvicorn for the block."""
    module = types.ModuleType("tests.reliability.served_urls")
    module.urlpatterns = [*memory_service_urls("api/v2/memory/"), *patterns]  # type: ignore[attr-defined]
    app = asgi_app()
    with override_settings(ROOT_URLCONF=module):
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="critical", log_config=None, lifespan="off"
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        try:
            async with asyncio.timeout(10):
                while not server.started:
                    if task.done():
                        task.result()
                        raise AssertionError("uvicorn stopped before it started serving")
                    await asyncio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]
            yield Served(f"http://127.0.0.1:{port}", module)
        finally:
            server.should_exit = True
            async with asyncio.timeout(15):
                await task
            clear_url_caches()
