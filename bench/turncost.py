"""A turn's cost at message 10, 1,000 and 10,000 (``DefaultConversationStore``), and what the
model is sent.

``samples`` threads of each size are written straight into the bench database (alternate
user and assistant messages, every fifth answer with a tool call and its result), and each
gets one run through the run endpoint over HTTP (one new user message, a 5-delta answer), the
sizes in turn, so every run meets its thread at its size.
Over HTTP: the wall time of the whole run, and the time to its first event and to the first
event of the answer (``TEXT_MESSAGE_START``: the history is read and sent before it). In
process, one run on a cold worker (fresh repositories) per size: the message rows the run read
and the tokens of the history the model was sent (``estimate_message_tokens``).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from bench.live import run_body, stream

__all__ = ["HEADER", "SAME_WINDOW", "SIZES", "TOKENS_HEADER", "measure", "seed", "sent_to_model"]

SIZES = (10, 1_000, 10_000)
SAME_WINDOW = 10
"""The window of ``bench.site``'s ``short10`` mount: at most this many messages, which a thread
of the smallest size fills, so every size sends the model as much."""

HEADER = (
    "| messages in the thread | median ms per run | p95 ms | ratio to 10 "
    "| first event ms | first answer event ms | ratio to 10 | target |\n"
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
)
TOKENS_HEADER = (
    "| messages in the thread | message rows a run reads | message rows the database read "
    "| messages sent to the model | tokens sent to the model |\n"
    "| ---: | ---: | ---: | ---: | ---: |"
)


def _record(n: int) -> Any:
    from django_pydantic_agent.chat_history import Message, ToolCall

    role = "user" if n % 2 == 0 else "assistant"
    calls = []
    if role == "assistant" and n % 10 == 3:
        calls = [
            ToolCall(
                agui_id=f"call-{n}",
                tool_call_id=f"call-{n}",
                name="lookup",
                arguments=f'{{"q": {n}}}',
                content=f"result {n}",
                has_result=True,
                result_message_id=f"result-{n}",
                in_progress=False,
                status="complete",
            )
        ]
    text = f"Message {n}: " + " ".join(f"word{k}" for k in range(40))
    return Message(
        agui_id=f"s{n}", role=role, content=text, in_progress=False, status="complete",
        tool_calls=calls,
    )  # fmt: skip


def seed(owner_id: str, size: int) -> str:
    """A new thread of ``owner_id`` holding ``size`` messages; its thread id."""
    from django_pydantic_agent.contrib.store import rows as rows_
    from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage

    thread = f"cost-{size}-{uuid.uuid4().hex[:8]}"
    conversation = StoredConversation.objects.create(owner_id=owner_id, thread_id=thread)
    batch = [rows_.new_row(StoredMessage, conversation.pk, n, _record(n)) for n in range(size)]
    StoredMessage.objects.bulk_create(batch, batch_size=1000)
    return thread


async def measure(
    url: str, threads: dict[int, list[str]], *, transcript: bool = False
) -> tuple[list[str], dict[int, float]]:
    """One run on each thread through ``url``; the table rows and the median ms per size.

    ``transcript``: each run posts the thread's messages (``GET threads/<id>/``, read before
    the clock starts) ahead of its new one, as the chat page and every AG-UI client do.
    """
    results: dict[int, list[tuple[float, float, float]]] = {size: [] for size in threads}
    async with httpx.AsyncClient(timeout=120.0) as client:
        await stream(client, "POST", url, body=run_body(f"warm-{uuid.uuid4().hex[:8]}", "w"))
        held: dict[str, list[Any]] = {}
        if transcript:
            for names in threads.values():
                for thread in names:
                    response = await client.get(f"{url}threads/{thread}/")
                    response.raise_for_status()
                    held[thread] = response.json()["messages"]
        for n in range(min(len(names) for names in threads.values())):
            for size, names in threads.items():  # interleaved: the same load on each size
                thread = names[n]
                body = run_body(thread, f"r{n}", "Q")
                body["messages"] = [*held.get(thread, []), *body["messages"]]
                encoded = json.dumps(body).encode()  # the client's own work: not timed
                start = time.perf_counter()
                result = await stream(client, "POST", url, body=encoded)
                wall = (time.perf_counter() - start) * 1000
                if result.terminal_type != "RUN_FINISHED":
                    raise RuntimeError(f"A run on {thread}: {result.status}, {result.outcome!r}.")
                results[size].append((wall, result.first_event * 1000, result.first_text * 1000))

    def p95(values: list[float]) -> float:
        return sorted(values)[min(len(values) - 1, round(0.95 * (len(values) - 1)))]

    base = statistics.median(w for w, _, _ in results[min(threads)])
    base_text = statistics.median(t for _, _, t in results[min(threads)])
    lines, medians = [], {}
    for size, rows in results.items():
        walls = [w for w, _, _ in rows]
        wall = medians[size] = statistics.median(walls)
        first = statistics.median(f for _, f, _ in rows)
        text = statistics.median(t for _, _, t in rows)
        ratio, text_ratio = wall / base, text / base_text
        target = ""
        if size != min(threads):
            met = ratio <= 1.5 and text_ratio <= 1.5
            target = f"≤ 1.5\u00d7: {'met' if met else 'missed'}"
        lines.append(
            f"| {size:,} | {wall:.1f} | {p95(walls):.1f} | {ratio:.2f}\u00d7 | {first:.1f} "
            f"| {text:.1f} | {text_ratio:.2f}\u00d7 | {target} |"
        )
    return lines, medians


async def sent_to_model(owner_id: str, threads: dict[int, str], history: Any = None) -> list[str]:
    """Per size, one run in process on a cold worker: the message rows it read, and the
    messages and tokens of the history the model was sent (``history``, a ``HistoryWindow``;
    default the default one)."""
    from ag_ui.core import BaseEvent, RunAgentInput, RunFinishedEvent, RunStartedEvent

    from django_pydantic_agent.agui.inner import RedactingAGUIAdapter
    from django_pydantic_agent.chat_history import AGUIStorageAgent
    from django_pydantic_agent.chat_history.storage_agent import AGUIAgent
    from django_pydantic_agent.contrib.store.repositories import (
        OrmChatRepository,
        OrmMessageRepository,
    )

    class Recorder(AGUIAgent):
        name = "recorder"
        seen: list[Any] = []

        async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
            self.seen = list(input.messages)
            yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
            yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)

    try:
        from pydantic_ai_harness.compaction import estimate_message_tokens
    except ImportError:  # pragma: no cover - CI installs the harness extra
        estimate_message_tokens = None

    lines = []
    for size, thread in threads.items():
        before = await _rows_fetched()
        chats = OrmChatRepository(owner_id=owner_id)
        messages = OrmMessageRepository(chats)
        inner = Recorder()
        assert chats.user_uuid is not None
        agent = AGUIStorageAgent("bench", chats.user_uuid, chats, messages, inner, history=history)
        body = RunAgentInput.model_validate(run_body(thread, f"m-{uuid.uuid4().hex[:6]}", "Q"))
        async for _ in agent.run(body):
            pass
        # A cold repository keeps what it read, as records or as the rows it handed out
        # (and the new user message).
        read = len(messages._records.keys() | messages._read.keys()) - 1
        after = await _rows_fetched()
        scanned = "n/a" if after is None or before is None else f"{after - before:,}"
        model = RedactingAGUIAdapter.load_messages(inner.seen)
        tokens = sum(estimate_message_tokens(model)) if estimate_message_tokens else 0
        lines.append(f"| {size:,} | {read:,} | {scanned} | {len(inner.seen):,} | {tokens:,} |")
    return lines


async def _rows_fetched() -> int | None:
    """PostgreSQL: the message rows its scans have read so far (``pg_stat_user_tables``), the
    run's pending statistics flushed first; ``None`` elsewhere. A run's figure is the
    difference: every row a plan read, where "rows a run reads" counts those it kept."""
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connection

    def flush() -> bool:
        if connection.vendor != "postgresql":
            return False
        with connection.cursor() as cursor:  # the connection the run's ORM work used
            cursor.execute("SELECT pg_stat_force_next_flush()")
        return True

    def fetched() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
                "FROM pg_stat_user_tables WHERE relname = %s",
                ["django_pydantic_agent_store_storedmessage"],
            )
            return int(cursor.fetchone()[0])

    if not await sync_to_async(flush)():
        return None
    await asyncio.sleep(1.1)  # the flush happens once the backend is idle
    return await sync_to_async(fetched)()
