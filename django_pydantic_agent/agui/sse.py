"""Server-sent events: frame encoding, the heartbeat, the streaming response and its headers.

Nothing here knows about agents or stores: a stream of AG-UI events becomes ``text/event-stream``
frames (``encode_event``, optionally with an ``id:`` line so a client can resume with
``Last-Event-ID``), ``with_heartbeat`` keeps an idle connection alive with a comment frame, and
``sse_response`` wraps the frames in a ``StreamingHttpResponse`` that no proxy buffers and no
middleware compresses. Django streams such a response only under ASGI; ``warn_if_wsgi`` says so
once per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, cast

from ag_ui.core import BaseEvent
from ag_ui.encoder import EventEncoder
from django.http import HttpRequest, StreamingHttpResponse

if TYPE_CHECKING:
    from django_pydantic_agent.agui.relay import EventStream, RunStream

__all__ = [
    "SSE_CONTENT_TYPE",
    "SSE_HEARTBEAT",
    "aclose",
    "encode_event",
    "event_id",
    "run_response",
    "sse_response",
    "warn_if_wsgi",
    "with_heartbeat",
]

logger = logging.getLogger("django_pydantic_agent.agui")

#: The SSE comment written after ``heartbeat_seconds`` of silence; AG-UI clients ignore it.
SSE_HEARTBEAT = ": ping\n\n"
#: The frames `with_heartbeat` buffers before its pump waits for the writer.
MAX_PENDING_FRAMES = 256
#: ``RunOptions.stream_coalesce_seconds``'s default: a burst of events goes out in one socket
#: write per 2 ms, not one per event (``python -m bench --suite streaming``).
DEFAULT_STREAM_COALESCE_SECONDS = 0.002

_ENCODER = EventEncoder()
#: ``text/event-stream``, as the AG-UI encoder declares it.
SSE_CONTENT_TYPE = _ENCODER.get_content_type()


def encode_event(event: BaseEvent, *, event_id: str | None = None) -> str:
    """One SSE frame for ``event``: ``data: <json>`` and a blank line, as AG-UI encodes it.

    With ``event_id``, an ``id: <event_id>`` line comes first, which a browser sends back as
    ``Last-Event-ID`` when it reconnects. Raises ``ValueError`` for an id holding a CR, LF or
    NUL, which would end or corrupt the frame.
    """
    frame = _ENCODER.encode(event)
    if event_id is None:
        return frame
    # An SSE field value ends at the first CR or LF, and a NUL makes browsers drop the id.
    if "\n" in event_id or "\r" in event_id or "\x00" in event_id:
        raise ValueError(
            f"event_id={event_id!r} holds a CR, LF or NUL character, which SSE cannot carry in "
            "an id; pass an id without them."
        )
    return f"id: {event_id}\n{frame}"


def event_id(run_id: str, seq: int) -> str:
    """The SSE ``id:`` of event ``seq`` of run ``run_id``: ``<run_id>:<seq>``."""
    return f"{run_id}:{seq}"


async def run_frames(batches: EventStream, run_id: str) -> AsyncIterator[str]:
    """A run's event batches as SSE frames (a batch as one string: one write to the socket),
    each numbered event with its ``id: <run_id>:<seq>``, an idle mark as ``SSE_HEARTBEAT``."""
    try:
        async for batch in batches:
            if batch is None:
                yield SSE_HEARTBEAT
            elif len(batch) == 1:
                seq, event = batch[0]
                yield encode_event(event, event_id=None if seq is None else f"{run_id}:{seq}")
            else:
                yield "".join(
                    encode_event(event, event_id=None if seq is None else f"{run_id}:{seq}")
                    for seq, event in batch
                )
    finally:
        await aclose(batches)


def run_response(
    stream: RunStream, run_id: str, *, heartbeat_seconds: float | None, coalesce_seconds: float
) -> StreamingHttpResponse:
    """A run's events as an AG-UI SSE response; a stream that does not mark idle time itself
    is kept alive with heartbeats (and coalesced) by ``with_heartbeat``."""
    frames = run_frames(stream.batches, run_id)
    if not stream.paced and (heartbeat_seconds or coalesce_seconds):
        frames = with_heartbeat(frames, heartbeat_seconds, coalesce=coalesce_seconds)
    return sse_response(frames)


async def aclose(iterator: AsyncIterator[Any]) -> None:
    """Close ``iterator`` if it can be closed (async generators can; plain iterators may not)."""
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


async def with_heartbeat(
    frames: AsyncIterator[str], interval: float | None, *, coalesce: float = 0.0
) -> AsyncIterator[str]:
    """Yield ``frames``, plus ``SSE_HEARTBEAT`` whenever ``interval`` seconds pass in silence
    (``None`` or ``0``: never).

    ``frames`` is driven by one pump task, so it runs entirely in a single task (its cancel
    scopes stay valid) and a heartbeat never cancels a pending read. Frames that arrive while
    the consumer is writing wait in a buffer of up to ``MAX_PENDING_FRAMES`` (the pump pauses
    when it is full). With ``coalesce`` (seconds), they go out together, as one string, and the
    consumer writes at most once per ``coalesce`` while frames keep coming, so a fast stream
    costs a write per ``coalesce`` rather than one per frame; the first frame, a frame after
    ``coalesce`` of quiet, a full buffer and the end of the stream are never held back. Closing or
    cancelling this generator cancels the pump and waits for it; no task outlives it.
    """
    loop = asyncio.get_running_loop()
    pending: list[str] = []
    ready = asyncio.Event()  # a frame or the end is waiting
    room = asyncio.Event()  # the buffer has room
    room.set()
    ended: list[BaseException | None] = []  # the pump's end: None, or the error to re-raise
    urgent = asyncio.Event()  # the pump has ended or the buffer is full: write now

    async def pump() -> None:
        try:
            async for frame in frames:
                pending.append(frame)
                ready.set()
                if len(pending) >= MAX_PENDING_FRAMES:
                    room.clear()
                    urgent.set()
                    await room.wait()
            ended.append(None)
        except Exception as exc:  # handed to the consumer, re-raised there
            ended.append(exc)
        finally:
            ready.set()
            urgent.set()
            await aclose(frames)

    task = asyncio.create_task(pump())
    sent = -math.inf  # when the previous write went out (loop time)
    try:
        while True:
            if not pending and not ended:
                ready.clear()
                try:
                    # Not asyncio.wait_for: on Python 3.11 it swallows a cancel that lands as
                    # the wait ends, and the stream would outlive its client.
                    async with asyncio.timeout(interval or None):
                        await ready.wait()
                except TimeoutError:
                    yield SSE_HEARTBEAT
                    continue
                if coalesce and not ended:
                    hold = sent + coalesce - loop.time()
                    if hold > 0:
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(hold):
                                await urgent.wait()
            if pending and not coalesce:  # each frame on its own, as it came
                yield pending.pop(0)
                room.set()
                continue
            if pending:
                chunk = pending[0] if len(pending) == 1 else "".join(pending)
                pending.clear()
                room.set()
                if not ended:
                    urgent.clear()
                sent = loop.time()
                yield chunk
                continue
            error = ended[0]
            if error is not None:
                raise error
            return
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class _SSEResponse(StreamingHttpResponse):
    """A ``StreamingHttpResponse`` that closes its frames when the server stops reading them.

    Django's ASGI handler closes what ``aiter(response)`` returns, a generator of Django's that
    wraps another around the frames; closing it closes neither. When a disconnect's cancel
    lands in the server's ``send`` (its socket buffer full) rather than in the frames, they
    would be left suspended, with the run or the pump task they drive going on until the
    garbage collector closed them.
    """

    def __init__(self, frames: AsyncIterator[str], **kwargs: Any) -> None:
        super().__init__(frames, **kwargs)
        self._frames = frames

    async def __aiter__(self) -> AsyncIterator[bytes]:
        content = cast(AsyncIterator[bytes], self.streaming_content)
        try:
            async for part in content:
                yield part
        finally:
            await aclose(content)
            await aclose(self._frames)


def sse_response(frames: AsyncIterator[str]) -> StreamingHttpResponse:
    """A ``text/event-stream`` response streaming ``frames``, uncached and unbuffered.

    ``X-Accel-Buffering: no`` stops nginx from buffering it, and ``Content-Encoding: identity``
    makes ``GZipMiddleware`` leave it alone (gzip would hold frames back until a block fills).
    The response owns ``frames``: however the server stops reading it (the end, a disconnect,
    a cancel inside ``send``), they are closed before the handler returns.
    """
    response = _SSEResponse(frames, content_type=SSE_CONTENT_TYPE)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    response["Content-Encoding"] = "identity"
    return response


_wsgi_warned: list[bool] = []


def warn_if_wsgi(request: HttpRequest) -> None:
    """Log, once per process, that a WSGI server buffers the whole event stream of ``request``.

    A request without an ASGI ``scope`` came through WSGI; nothing is logged under ASGI.
    """
    if getattr(request, "scope", None) is not None or _wsgi_warned:
        return
    _wsgi_warned.append(True)
    logger.warning(
        "The AG-UI run endpoint is being served over WSGI, which buffers the whole "
        "event stream until the run ends. Serve the project with an ASGI server "
        "(uvicorn, daphne, or gunicorn with uvicorn workers) to stream."
    )
