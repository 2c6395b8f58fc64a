"""Memory Service requests per chat turn, through the real ``AGUIStorageAgent``.

Each scenario runs scripted AG-UI event streams through ``AGUIStorageAgent`` on the Memory
Service repositories, against the emulator served over HTTP, and counts what the emulator
received (its request counter) and the response bytes the client read (an httpx hook). The
reference column holds the figures measured for the ``datarobot`` 3.20.0 reference in issue 9;
they are quoted, not re-measured here.

``python -m bench --suite chat-history`` serves the emulator under uvicorn and prints the table;
:func:`measure` runs the scenarios against any emulator endpoint (the tests use ``live_server``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import httpx
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    Message,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)

from django_pydantic_agent.chat_history import AGUIStorageAgent
from django_pydantic_agent.chat_history.memory_service import (
    ChatRepository,
    ChatSessionRegistry,
    MessageRepository,
)
from django_pydantic_agent.chat_history.storage_agent import AGUIAgent
from django_pydantic_agent.contrib.memory_service_emulator import request_counter
from django_pydantic_agent.memory_service import DRMemoryServiceClient, DRMemorySpace

__all__ = ["HEADER", "Row", "measure", "run", "serve"]

USER = UUID("12345678-1234-5678-1234-567812345678")

HEADER = (
    "| scenario | reference (issue 9) | budget | requests | response KB | requests by route |\n"
    "| --- | ---: | ---: | ---: | ---: | --- |"
)


@dataclass(frozen=True, kw_only=True)
class Row:
    """One measured scenario."""

    scenario: str
    reference: str
    budget_requests: int | None
    budget_kb: float | None
    requests: int
    response_bytes: int
    by_route: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def response_kb(self) -> float:
        return self.response_bytes / 1024

    @property
    def within_budget(self) -> bool:
        ok = self.budget_requests is None or self.requests <= self.budget_requests
        return ok and (self.budget_kb is None or self.response_kb <= self.budget_kb)

    def row(self) -> str:
        budget = "n/a" if self.budget_requests is None else f"≤ {self.budget_requests}"
        if self.budget_kb is not None:
            budget += f", ≤ {self.budget_kb:g} KB"
        routes = ", ".join(f"{m} {r}: {n}" for (m, r), n in sorted(self.by_route.items()))
        return (
            f"| {self.scenario} | {self.reference} | {budget} | {self.requests} "
            f"| {self.response_kb:.1f} | {routes} |"
        )


class _Script(AGUIAgent):
    """An inner agent that yields a fixed list of events."""

    def __init__(self, events: Sequence[BaseEvent]) -> None:
        self.name = "scripted"
        self.events = list(events)

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        for event in self.events:
            yield event


def _answer(mid: str, deltas: int) -> list[BaseEvent]:
    return [
        TextMessageStartEvent(message_id=mid, role="assistant"),
        *(TextMessageContentEvent(message_id=mid, delta=f"word{i} ") for i in range(deltas)),
        TextMessageEndEvent(message_id=mid),
    ]


def _run(thread: str, run_id: str, body: list[BaseEvent]) -> list[BaseEvent]:
    return [
        RunStartedEvent(thread_id=thread, run_id=run_id),
        *body,
        RunFinishedEvent(thread_id=thread, run_id=run_id),
    ]


def plain_answer(thread: str, run_id: str, mid: str = "m1", deltas: int = 50) -> list[BaseEvent]:
    """A text answer of ``deltas`` content events."""
    return _run(thread, run_id, _answer(mid, deltas))


def tool_call_answer(thread: str, run_id: str) -> list[BaseEvent]:
    """One tool call (5 argument deltas and a result), then a 20-delta answer."""
    args = ['{"ci', 'ty": ', '"Par', 'is"', "}"]
    return _run(
        thread,
        run_id,
        [
            ToolCallStartEvent(tool_call_id="c1", tool_call_name="weather", parent_message_id="m1"),
            *(ToolCallArgsEvent(tool_call_id="c1", delta=d) for d in args),
            ToolCallEndEvent(tool_call_id="c1"),
            ToolCallResultEvent(message_id="t1", tool_call_id="c1", content="sunny", role="tool"),
            *_answer("m2", 20),
        ],
    )


def reasoning_answer(thread: str, run_id: str) -> list[BaseEvent]:
    """A reasoning block of 10 deltas, then a 20-delta answer."""
    return _run(
        thread,
        run_id,
        [
            ReasoningStartEvent(message_id="r1"),
            ReasoningMessageStartEvent(message_id="r1", role="reasoning"),
            *(ReasoningMessageContentEvent(message_id="r1", delta=f"hmm{i} ") for i in range(10)),
            ReasoningMessageEndEvent(message_id="r1"),
            ReasoningEndEvent(message_id="r1"),
            *_answer("m1", 20),
        ],
    )


class _Meter:
    """Requests the emulator received and response bytes the client read, since ``start``."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    async def hook(self, response: httpx.Response) -> None:
        await response.aread()
        self.sizes.append(len(response.content))

    def start(self) -> None:
        request_counter.reset()
        self.sizes.clear()

    def row(
        self,
        scenario: str,
        reference: str,
        budget_requests: int | None = None,
        budget_kb: float | None = None,
    ) -> Row:
        snapshot = request_counter.snapshot()
        return Row(
            scenario=scenario,
            reference=reference,
            budget_requests=budget_requests,
            budget_kb=budget_kb,
            requests=sum(snapshot.values()),
            response_bytes=sum(self.sizes),
            by_route=snapshot,
        )


@dataclass
class _Worker:
    """One process's repositories on a space (a fresh one is a cold worker)."""

    space: DRMemorySpace
    chats: ChatRepository = field(init=False)
    messages: MessageRepository = field(init=False)

    def __post_init__(self) -> None:
        registry = ChatSessionRegistry(self.space)
        self.chats = ChatRepository(self.space, registry)
        self.messages = MessageRepository(self.space, registry)

    async def turn(self, input: RunAgentInput, events: Sequence[BaseEvent]) -> None:
        agent = AGUIStorageAgent("assistant", USER, self.chats, self.messages, _Script(events))
        async for event in agent.run(input):
            if event.type == "RUN_ERROR":
                raise RuntimeError(f"The scripted turn failed: {event}")


def _input(thread: str, run_id: str, messages: list[Message]) -> RunAgentInput:
    return RunAgentInput(
        thread_id=thread,
        run_id=run_id,
        messages=messages,
        tools=[],
        context=[],
        state={},
        forwarded_props={},
    )


async def measure(endpoint: str, *, turns: int = 50) -> list[Row]:
    """Run every scenario against the emulator at ``endpoint`` (``<server>/api/v2``)."""
    meter = _Meter()
    async with httpx.AsyncClient(timeout=30.0, event_hooks={"response": [meter.hook]}) as pool:
        client = DRMemoryServiceClient(endpoint=endpoint, api_token="bench", http_client=pool)
        space = await DRMemorySpace.post(client, deduplication_key=f"bench-{time.time_ns()}")
        rows: list[Row] = []
        hello = [UserMessage(id="u1", content="Hello")]

        meter.start()
        await _Worker(space).turn(_input("plain", "r1", hello), plain_answer("plain", "r1"))
        rows.append(meter.row("new thread, one user message, a 50-delta answer", "25 requests", 5))

        meter.start()
        await _Worker(space).turn(_input("tool", "r1", hello), tool_call_answer("tool", "r1"))
        rows.append(meter.row("one tool call and a 20-delta answer", "51", 7))

        meter.start()
        await _Worker(space).turn(_input("think", "r1", hello), reasoning_answer("think", "r1"))
        rows.append(meter.row("a reasoning block and a 20-delta answer", "40", 5))

        warm = _Worker(space)
        echo: list[Message] = []
        for n in range(1, turns + 1):
            echo.append(UserMessage(id=f"u{n}", content=f"Question {n}"))
            if n == turns:
                meter.start()
            await warm.turn(
                _input("long", f"r{n}", list(echo)), plain_answer("long", f"r{n}", f"m{n}")
            )
            echo.append(
                AssistantMessage(id=f"m{n}", content="".join(f"word{i} " for i in range(50)))
            )
        rows.append(
            meter.row(
                f"turn {turns} of a thread (warm worker)", "23 requests, 318 KB", 6, budget_kb=32
            )
        )

        echo.append(UserMessage(id=f"u{turns + 1}", content="One more"))
        meter.start()
        await _Worker(space).turn(
            _input("long", f"r{turns + 1}", list(echo)),
            plain_answer("long", f"r{turns + 1}", f"m{turns + 1}"),
        )
        rows.append(meter.row(f"turn {turns + 1} on a cold worker (lists the chat once)", "n/a"))
        return rows


@contextmanager
def serve() -> Iterator[str]:
    """Serve the configured Django project (with the emulator) under uvicorn; yields its origin."""
    import uvicorn
    from django.core.asgi import get_asgi_application

    config = uvicorn.Config(
        get_asgi_application(), host="127.0.0.1", port=0, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start serving the emulator within 10 s.")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def run(*, turns: int = 50, emit: Callable[[str], Any] = print) -> list[Row]:
    """Serve the emulator, measure, print the table; needs a configured, migrated Django."""
    with serve() as origin:
        rows = asyncio.run(measure(f"{origin}/api/v2", turns=turns))
    emit(HEADER)
    for row in rows:
        emit(row.row())
    return rows
