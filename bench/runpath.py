"""The run path's writes at message 10 and at a larger size (``OrmMessageRepository``).

A whole turn's cost, reads included, is ``bench.turncost``.
"""

from __future__ import annotations

import statistics
import time
import uuid

__all__ = ["APPEND_HEADER", "append_costs"]

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
