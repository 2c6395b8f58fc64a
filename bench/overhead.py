"""What the durable run path adds on the event loop, per run, without a model or a database.

The streaming suite compares whole runs over HTTP, where the model, uvicorn and a shared
machine's drift are most of the time and move by more than persistence costs. This suite
takes them away: a scripted inner agent yields a 2,000-delta answer (a loop turn every eight
deltas, as a streaming model gives), and the same events go through

- **stateless**: the run endpoint's stateless stream (``stateless_frames``: ids, SSE frames,
  the coalescing pump of ``with_heartbeat``), read to the end;
- **durable**: ``GuardedStorageAgent`` around ``AGUIStorageAgent`` on in-memory repositories,
  run by a ``RunCoordinator`` (its manager, the relay to Django's cache, a run record in
  ``CacheRunStore``), read by ``replay`` as the run endpoint reads it.

Each figure is the loop thread's CPU time for one whole run (``time.thread_time``), runs of
the two alternating; the minimum is the steadiest figure on a shared machine, the median is
shown beside it. Work in worker threads (the cache writes) is not counted.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any

from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    UserMessage,
)

from bench.chat_history_requests import _input as run_input

__all__ = ["HEADER", "measure"]

HEADER = (
    "| path | loop CPU ms per run (min) | median | over stateless (min) | paired median "
    "| µs per event (min) | runs |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
)

DELTAS = 2000


def _ms() -> int:
    return int(time.time() * 1000)


class _Scripted:
    """An inner agent answering with ``DELTAS`` text deltas, yielding the loop every eight."""

    name = "scripted"

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id, timestamp=_ms())
        message_id = str(uuid.uuid4())
        yield TextMessageStartEvent(message_id=message_id, timestamp=_ms())
        for n in range(DELTAS):
            if n % 8 == 0:
                await asyncio.sleep(0)
            yield TextMessageContentEvent(message_id=message_id, delta=f"w{n} ", timestamp=_ms())
        yield TextMessageEndEvent(message_id=message_id, timestamp=_ms())
        yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id, timestamp=_ms())


def _input() -> RunAgentInput:
    hello = UserMessage(id="u-1", role="user", content="Hello")
    return run_input(f"t-{uuid.uuid4().hex[:12]}", "r-1", [hello])


async def _stateless() -> int:
    from django_pydantic_agent.agui.run import stateless_frames
    from django_pydantic_agent.agui.sse import DEFAULT_STREAM_COALESCE_SECONDS

    run_input = _input()
    frames = stateless_frames(
        _Scripted().run(run_input),
        run_input.run_id,
        heartbeat_seconds=15.0,
        coalesce_seconds=DEFAULT_STREAM_COALESCE_SECONDS,
    )
    return sum([chunk.count("\n\n") async for chunk in frames])


def _durable_path() -> Callable[[], Coroutine[Any, Any, int]]:
    from django_pydantic_agent.agui.engine import replay
    from django_pydantic_agent.agui.run import GuardedStorageAgent
    from django_pydantic_agent.agui.runs import RunCoordinator
    from django_pydantic_agent.agui.sse import DEFAULT_STREAM_COALESCE_SECONDS, run_frames
    from django_pydantic_agent.chat_history import AGUIStorageAgent
    from django_pydantic_agent.chat_history.repositories import (
        InMemoryChatRepository,
        InMemoryMessageRepository,
    )
    from django_pydantic_agent.persistence.runs import CacheRunStore

    user = uuid.uuid4()

    def agent(chats: Any, messages: Any, inner: Any) -> GuardedStorageAgent:
        storage = AGUIStorageAgent(inner.name, user, chats, messages, inner)
        return GuardedStorageAgent(storage, expose_error_messages=False)

    coordinator = RunCoordinator(agent, run_store=CacheRunStore(), sweep_interval_seconds=0)

    async def durable() -> int:
        chats = InMemoryChatRepository()
        handle = await coordinator.manager.run_as(
            "bench", _input(), chats, InMemoryMessageRepository(chats), _Scripted()
        )
        coordinator.track(handle, "bench")
        frames = run_frames(
            replay(handle, 0, heartbeat=15.0, coalesce=DEFAULT_STREAM_COALESCE_SECONDS),
            handle.run_id,
        )
        events = sum([chunk.count("\n\n") async for chunk in frames])
        await handle.wait()
        return events

    return durable


async def measure(samples: int) -> list[str]:
    """The table rows: each path's loop CPU per run over ``samples`` alternating runs."""
    durable = _durable_path()
    paths = {"stateless (persistence off)": _stateless, "durable (persistence on)": durable}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for name, run in paths.items():  # warm-up
        if await run() != DELTAS + 4:
            raise RuntimeError(f"The {name} path did not stream {DELTAS + 4} events.")
    for _ in range(samples):
        for name, run in paths.items():
            start = time.thread_time()
            await run()
            times[name].append((time.thread_time() - start) * 1000)
            await asyncio.sleep(0.02)  # the run's last writes, off the next one's clock
    base = times["stateless (persistence off)"]
    rows = []
    for name, values in times.items():
        over = paired = ""
        if values is not base:
            over = f"{min(values) - min(base):+.1f}"
            paired = f"{statistics.median(a - b for a, b in zip(values, base, strict=True)):+.1f}"
        rows.append(
            f"| {name} | {min(values):.1f} | {statistics.median(values):.1f} | {over} "
            f"| {paired} | {min(values) * 1000 / (DELTAS + 4):.1f} | {len(values)} |"
        )
    return rows
