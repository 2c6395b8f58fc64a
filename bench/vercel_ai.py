"""The AI SDK transport against AG-UI's on the same runs: throughput, and a resume's first byte.

Throughput: one server (``default/``, ``DefaultConversationStore``) runs the 2,000-delta agent,
posted to its AG-UI route and to its AI SDK route (``default-chat``) in turn, round by round,
each on a new thread; the client reads each stream over loopback and counts its frames (SSE
``data:`` lines: AG-UI events, UI message chunks; ``[DONE]`` not counted), so events/s is each
wire's own, and deltas/s (2,000 over the time to the end of the stream) compares the runs
themselves. "paired" is the median of the per-round ratios, as in ``bench.streaming``. The
first byte of an AG-UI stream is ``RUN_STARTED``, sent before the store is read; the AI SDK's
is ``start``, which carries the answer's id and so waits for the run's first message: the
first text is what both show first.

Resume: a run streams a delta every 10 ms for a minute (``slow-chat``); after 50 chunks a second
client asks ``GET slow-chat/<id>/stream``, on the worker running it and, with ``REDIS_URL``, on
another (idle: it runs nothing, and reads the run's log relayed through Redis); the figure is
the time from sending that request to the first byte of its body (its ``start`` chunk).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from bench.live import Live, run_body

__all__ = ["RESUME_HEADER", "THROUGHPUT_HEADER", "resume_rows", "throughput_rows"]

THROUGHPUT_HEADER = (
    "| route | frames | events/s | deltas/s | min to max events/s | paired vs AG-UI "
    "| first byte ms | first text ms | runs |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)
RESUME_HEADER = (
    "| resumed on | first byte ms (median) | max ms | target | samples |\n"
    "| --- | ---: | ---: | --- | ---: |"
)
#: A measured run starts this long after the previous one ended (its last writes).
SETTLE_SECONDS = 0.25
DELTAS = 2000
RESUME_TARGET_MS = 50.0


@dataclass(frozen=True, kw_only=True)
class Read:
    """One streamed response: seconds from the request to its first byte and its end."""

    frames: int
    first_byte: float
    first_text: float
    closed: float
    ended: bool

    @property
    def events_per_second(self) -> float:
        return self.frames / self.closed

    @property
    def deltas_per_second(self) -> float:
        return DELTAS / self.closed


def chat_body(thread_id: str, text: str = "Hello") -> dict[str, Any]:
    """What ``DefaultChatTransport`` posts for a new user message."""
    message = {
        "id": f"u-{uuid.uuid4().hex[:8]}",
        "role": "user",
        "parts": [{"type": "text", "text": text}],
    }
    return {"id": thread_id, "messages": [message], "trigger": "submit-message"}


async def read(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    body: Any = None,
    on_frame: Callable[[int], Awaitable[None]] | None = None,
    stop_after: int | None = None,
) -> Read:
    """Send the request and read its SSE body to the end (or ``stop_after`` frames), counting
    ``data:`` frames without parsing them; ``ended``: the run's terminal frame arrived."""
    start = time.perf_counter()
    first_byte = first_text = 0.0
    frames = 0
    ended = False
    buffer = b""
    kwargs: dict[str, Any] = {} if body is None else {"json": body}
    async with client.stream(method, url, **kwargs) as response:
        if response.status_code != 200:
            answer = (await response.aread())[:300]
            raise RuntimeError(f"{method} {url} answered {response.status_code}: {answer!r}")
        async for chunk in response.aiter_raw():
            first_byte = first_byte or time.perf_counter() - start
            buffer += chunk
            *complete, buffer = buffer.split(b"\n\n")
            for frame in complete:
                data = frame.rpartition(b"data: ")[2] if b"data: " in frame else None
                if data is None or data == b"[DONE]":
                    continue  # an SSE comment (a heartbeat), or the end marker
                frames += 1
                if not first_text and (
                    b'"text-delta"' in data or b'"TEXT_MESSAGE_CONTENT"' in data
                ):
                    first_text = time.perf_counter() - start
                if b'"type":"finish"' in data or b'"RUN_FINISHED"' in data:
                    ended = True
                if on_frame is not None:
                    await on_frame(frames)
            if stop_after is not None and frames >= stop_after:
                break
    closed = time.perf_counter() - start
    return Read(
        frames=frames, first_byte=first_byte, first_text=first_text, closed=closed, ended=ended
    )


async def throughput_rows(live: Live, *, samples: int) -> tuple[list[str], float, float]:
    """Rows for the AG-UI route and the AI SDK route of one server, the median of the paired
    ratios (AI SDK events/s over AG-UI's in the same round) and the ratio of the medians."""
    origin = live.origin
    routes = {
        "AG-UI `POST default/`": lambda thread: (
            "POST",
            f"{origin}/default/",
            run_body(thread, "r"),
        ),
        "AI SDK `POST default-chat`": lambda thread: (
            "POST",
            f"{origin}/default-chat",
            chat_body(thread),
        ),
    }
    results: dict[str, list[Read]] = {name: [] for name in routes}
    async with httpx.AsyncClient(timeout=120.0) as client:
        for rounds in range(samples + 1):
            for name, request in routes.items():
                await asyncio.sleep(SETTLE_SECONDS)
                method, url, body = request(f"t-{uuid.uuid4().hex[:12]}")
                result = await read(client, method, url, body=body)
                if not result.ended:
                    raise RuntimeError(f"{url} ended without its terminal frame.")
                if rounds:  # the first round warms both routes up
                    results[name].append(result)
    agui, sdk = results.values()
    paired = [s.events_per_second / a.events_per_second for a, s in zip(agui, sdk, strict=True)]
    lines = []
    for name, reads in results.items():
        rates = [r.events_per_second for r in reads]
        ratio = ""
        if reads is sdk:
            q = statistics.quantiles(paired, n=4) if len(paired) > 1 else [paired[0]] * 3
            ratio = f"{statistics.median(paired):.2f}\u00d7 ({q[0]:.2f} to {q[2]:.2f})"
        lines.append(
            f"| {name} | {reads[0].frames} | {statistics.median(rates):,.0f} "
            f"| {statistics.median(r.deltas_per_second for r in reads):,.0f} "
            f"| {min(rates):,.0f} to {max(rates):,.0f} | {ratio} "
            f"| {statistics.median(r.first_byte for r in reads) * 1000:.1f} "
            f"| {statistics.median(r.first_text for r in reads) * 1000:.1f} | {len(reads)} |"
        )
    medians = statistics.median(s.events_per_second for s in sdk) / statistics.median(
        a.events_per_second for a in agui
    )
    return lines, statistics.median(paired), medians


async def resume_times(run_on: Live, resume_on: Live, *, samples: int) -> list[float]:
    """Milliseconds from ``GET slow-chat/<id>/stream`` (to ``resume_on``) to its first byte,
    for a run streaming on ``run_on``."""
    times: list[float] = []
    async with (
        httpx.AsyncClient(timeout=120.0) as client,
        httpx.AsyncClient(timeout=120.0) as other,
    ):
        # Idle, not cold: the worker has answered a request (its URLconf, its database and
        # cache connections), as a worker of a deployment has.
        warm = await other.get(f"{resume_on.origin}/slow-chat/warm-up/stream")
        if warm.status_code != 204:
            raise RuntimeError(f"The warm-up resume answered {warm.status_code}.")
        for _ in range(samples):
            thread = f"t-{uuid.uuid4().hex[:12]}"
            done = asyncio.Event()

            async def resume(n: int, thread: str = thread, done: asyncio.Event = done) -> None:
                if n != 50:
                    return
                result = await read(
                    other, "GET", f"{resume_on.origin}/slow-chat/{thread}/stream", stop_after=1
                )
                times.append(result.first_byte * 1000)
                stopped = await other.post(f"{run_on.origin}/slow-chat/{thread}/stop")
                if stopped.status_code != 202:
                    raise RuntimeError(f"stop answered {stopped.status_code}: {stopped.text}")
                done.set()

            await read(
                client,
                "POST",
                f"{run_on.origin}/slow-chat",
                body=chat_body(thread),
                on_frame=resume,
            )
            if not done.is_set():
                raise RuntimeError("The run ended before it was resumed.")
            await asyncio.sleep(SETTLE_SECONDS)
    return times


def resume_row(label: str, times: list[float]) -> str:
    median = statistics.median(times)
    verdict = "met" if median <= RESUME_TARGET_MS else "missed"
    return (
        f"| {label} | {median:.1f} | {max(times):.1f} | \u2264 {RESUME_TARGET_MS:g} ms: "
        f"{verdict} | {len(times)} |"
    )


def resume_rows(workers: list[Live], *, samples: int) -> list[str]:
    """The resume rows: on the worker running the run, and on another one when there are two."""
    rows = [
        resume_row(
            "the worker running the run",
            asyncio.run(resume_times(workers[0], workers[0], samples=samples)),
        )
    ]
    if len(workers) > 1:
        times = asyncio.run(resume_times(workers[0], workers[1], samples=samples))
        rows.append(resume_row("another worker (idle; the log relayed through Redis)", times))
    return rows
