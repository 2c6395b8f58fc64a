"""What one run reads of a long thread on the Memory Service: requests and events read.

A thread of N stored messages (10 and 1,000) is seeded through ``MessageRepository``; then one
turn runs through the real ``AGUIStorageAgent`` (its default ``HistoryWindow``, 100 messages)
on the Memory Service repositories, against the emulator served over HTTP. The meter counts
the requests the emulator received and the ``message`` events its event listings returned.

The last run of each size regenerates the newest answer (a new branch, one ``cut`` marker
event in the run's first batch POST). ``python -m bench --suite chat-history`` prints the
table after the per-turn one; :func:`measure_window` runs it against any emulator endpoint
(the tests use ``live_server``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from uuid import uuid4

import httpx
from ag_ui.core import Message, UserMessage

from bench.chat_history_requests import USER, _input, _Worker, plain_answer
from django_pydantic_agent.chat_history.records import ChatCreate, MessageCreate
from django_pydantic_agent.contrib.memory_service_emulator import request_counter
from django_pydantic_agent.memory_service import DRMemoryServiceClient, DRMemorySpace

__all__ = ["WINDOW_HEADER", "WindowRow", "measure_window"]

WINDOW_HEADER = (
    "| messages in the thread | run | requests | events read | requests by route |\n"
    "| ---: | --- | ---: | ---: | --- |"
)


@dataclass(frozen=True, kw_only=True)
class WindowRow:
    """One run on a thread of ``size`` messages."""

    size: int
    scenario: str
    requests: int
    events_read: int
    by_route: dict[tuple[str, str], int]

    def row(self) -> str:
        routes = ", ".join(f"{m} {r}: {n}" for (m, r), n in sorted(self.by_route.items()))
        return (
            f"| {self.size:,} | {self.scenario} | {self.requests} | {self.events_read:,} "
            f"| {routes} |"
        )


class _Reads:
    """Events returned by the event listings (``GET .../events/``) since ``start``."""

    def __init__(self) -> None:
        self.events = 0

    async def hook(self, response: httpx.Response) -> None:
        request = response.request
        if request.method == "GET" and request.url.path.endswith("/events/"):
            await response.aread()
            if response.status_code == 200:
                self.events += len(response.json().get("items", []))

    def start(self) -> None:
        request_counter.reset()
        self.events = 0

    def row(self, size: int, scenario: str) -> WindowRow:
        snapshot = request_counter.snapshot()
        return WindowRow(
            size=size,
            scenario=scenario,
            requests=sum(snapshot.values()),
            events_read=self.events,
            by_route=snapshot,
        )


def _content(n: int) -> str:
    return f"message {n} " + "word " * 20


async def _seed(worker: _Worker, thread: str, size: int) -> None:
    chat = await worker.chats.create_chat(ChatCreate(name=thread, thread_id=thread, user_uuid=USER))
    async with worker.messages.transaction():
        for n in range(size):
            # The newest message is a user message left unanswered (its run failed).
            role = "user" if (size - 1 - n) % 2 == 0 else "assistant"
            await worker.messages.create_message(
                MessageCreate(
                    chat_uuid=chat.chat_uuid,
                    role=role,
                    content=_content(n),
                    agui_id=f"s{n}",
                    run_id=f"seed{n // 2}",
                    status="complete",
                    in_progress=False,
                )
            )


async def measure_window(endpoint: str, *, sizes: tuple[int, ...] = (10, 1000)) -> list[WindowRow]:
    """Seed a thread of each size and measure one run on it, cold and warm."""
    reads = _Reads()
    async with httpx.AsyncClient(timeout=30.0, event_hooks={"response": [reads.hook]}) as pool:
        client = DRMemoryServiceClient(endpoint=endpoint, api_token="bench", http_client=pool)
        space = await DRMemorySpace.post(client, deduplication_key=f"window-{time.time_ns()}")
        rows: list[WindowRow] = []
        for size in sizes:
            thread = f"long-{size}-{uuid4().hex[:8]}"
            await _seed(_Worker(space), thread, size)
            # A retry: the client posts the unanswered newest user message again (one with an
            # answer is a regenerate, measured last).
            newest_user = size - 1
            echo: list[Message] = [UserMessage(id=f"s{newest_user}", content=_content(newest_user))]
            reads.start()
            await _Worker(space).turn(_input(thread, "again", echo), plain_answer(thread, "again"))
            retry = "cold worker, the unanswered newest user message re-posted"
            rows.append(reads.row(size, retry))

            warm = _Worker(space)
            new: list[Message] = [UserMessage(id="u-new", content="A new question")]
            reads.start()
            await warm.turn(_input(thread, "new", new), plain_answer(thread, "new", "a-new"))
            rows.append(reads.row(size, "cold worker, a new user message"))

            newer: list[Message] = [UserMessage(id="u-newer", content="Another question")]
            reads.start()
            await warm.turn(_input(thread, "newer", newer), plain_answer(thread, "newer", "a2"))
            rows.append(reads.row(size, "warm worker (the same one, next turn)"))

            # A regenerate: the answered newest user message posted again, on a cold worker.
            # The cut is made against the whole active branch, so the thread is listed.
            again: list[Message] = [UserMessage(id="u-newer", content="Another question")]
            reads.start()
            await _Worker(space).turn(
                _input(thread, "regen", again), plain_answer(thread, "regen", "a-regen")
            )
            rows.append(reads.row(size, "a regenerate of the newest answer (cold worker)"))
        return rows
