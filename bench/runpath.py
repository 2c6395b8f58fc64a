"""The run path's cost at message 10 and at message 1,000 (``DefaultConversationStore``).

One thread grows through the run endpoint over HTTP: each run posts one new user message and
gets a 5-delta answer, so each turn adds two messages. The first 10 turns and the last 10 are
compared (wall time of the whole run, request to the end of the stream).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

import httpx

from bench.live import run_body, stream

__all__ = ["HEADER", "grow"]

HEADER = (
    "| turns | messages in the thread | median ms per run | p95 ms | ratio to the first 10 "
    "| target |\n| --- | --- | ---: | ---: | ---: | --- |"
)


async def grow(url: str, *, messages: int = 1000) -> tuple[list[str], dict[int, int]]:
    """Grow one thread to ``messages`` messages through ``url``; the two table rows."""
    turns = max(20, messages // 2)
    thread = f"grow-{uuid.uuid4().hex[:12]}"
    times: list[float] = []
    refused = {409: 0, 500: 0}
    async with httpx.AsyncClient(timeout=120.0) as client:
        warm = run_body(f"warm-{thread}", "r0")
        await stream(client, "POST", url, body=warm)
        for n in range(turns):
            while True:
                start = time.perf_counter()
                body = run_body(thread, f"r{n}", f"Q{n}")
                result = await stream(client, "POST", url, body=body)
                if result.status not in (409, 500):
                    break
                # 409: the previous run is still finalising; 500: see the docs page.
                refused[result.status] += 1
                await asyncio.sleep(0.005)
            times.append((time.perf_counter() - start) * 1000)
            if result.terminal_type != "RUN_FINISHED":
                raise RuntimeError(
                    f"Turn {n} of {thread}: {result.status}, ended {result.terminal_type!r}."
                )
    first, last = times[:10], times[-10:]

    def p95(values: list[float]) -> float:
        return sorted(values)[min(len(values) - 1, round(0.95 * (len(values) - 1)))]

    ratio = statistics.median(last) / statistics.median(first)
    return [
        f"| 1 to 10 | 2 to 20 | {statistics.median(first):.1f} | {p95(first):.1f} | 1.00\u00d7 | |",
        f"| {turns - 9} to {turns} | {2 * turns - 18} to {2 * turns} "
        f"| {statistics.median(last):.1f} | {p95(last):.1f} | {ratio:.2f}\u00d7 "
        f"| ≤ 1.5\u00d7: {'met' if ratio <= 1.5 else 'missed'} |",
    ], refused


APPEND_HEADER = (
    "| messages in the thread | median ms per turn's writes | p95 ms | ratio to 10 | target |\n"
    "| --- | ---: | ---: | ---: | --- |"
)


async def append_costs(*, large: int = 1000, samples: int = 10) -> list[str]:
    """The run path's writes alone, as the storage agent makes them for one turn, at ``10``
    and at ``large`` messages: the user message (one flush), the answer (one flush), two
    content deltas and the final status (three flushes), on a worker whose cache holds the
    thread. ``OrmMessageRepository`` over the bench database, in process."""
    from django_pydantic_agent.chat_history import ChatCreate, MessageCreate, MessageUpdate
    from django_pydantic_agent.contrib.store.repositories import (
        OrmChatRepository,
        OrmMessageRepository,
    )

    chats = OrmChatRepository(owner_id=f"bench-append-{uuid.uuid4().hex[:8]}")
    messages = OrmMessageRepository(chats)
    results: dict[int, list[float]] = {}
    for size in (10, large):
        chat = await chats.create_chat(ChatCreate(thread_id=f"a{size}", user_uuid=chats.user_uuid))
        async with messages.transaction():
            for i in range(size):
                role = "user" if i % 2 == 0 else "assistant"
                await messages.create_message(
                    MessageCreate(chat_uuid=chat.chat_uuid, role=role, content=f"m{i} " * 20)
                )
        await messages.get_chat_messages(chat.chat_uuid)  # a warm worker's cache
        times = []
        for n in range(samples):
            start = time.perf_counter()
            async with messages.transaction():
                await messages.create_message(
                    MessageCreate(chat_uuid=chat.chat_uuid, role="user", content=f"Q{n}")
                )
            async with messages.transaction():
                answer = await messages.create_message(
                    MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", content="w0 ")
                )
            for k, delta in enumerate(("w1 ", "w2 ")):
                async with messages.transaction():
                    await messages.update_message(
                        answer.message_uuid,
                        MessageUpdate(content_delta=delta, content_offset=3 * (k + 1)),
                    )
            async with messages.transaction():
                await messages.update_message(
                    answer.message_uuid, MessageUpdate(in_progress=False, status="complete")
                )
            times.append((time.perf_counter() - start) * 1000)
        results[size] = times

    def p95(values: list[float]) -> float:
        return sorted(values)[min(len(values) - 1, round(0.95 * (len(values) - 1)))]

    base = statistics.median(results[10])
    lines = []
    for size, times in results.items():
        ratio = statistics.median(times) / base
        target = "" if size == 10 else f"≤ 1.5\u00d7: {'met' if ratio <= 1.5 else 'missed'}"
        lines.append(
            f"| {size:,} | {statistics.median(times):.1f} | {p95(times):.1f} "
            f"| {ratio:.2f}\u00d7 | {target} |"
        )
    return lines
