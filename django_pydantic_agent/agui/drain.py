"""A worker's graceful drain: stop taking runs, let the running ones finish, hand over the rest.

Each ``AGUIServer`` has one ``Drain``. ``Drain.begin()`` (sync, idempotent) turns the mount away
from new runs (``POST <mount>/`` answers a JSON 503 with ``Retry-After``; reattach, cancel and
the thread routes go on answering) and, inside an event loop, starts draining its durable runs:
they get up to ``drain_seconds`` to end, then the rest are handed over
(``RunCoordinator.drain``). ``await Drain.wait()`` returns once that is done.

Three ways in, one path:

- ``lifespan``: the ASGI lifespan protocol (``BodyLimitMiddleware`` answers it; uvicorn's
  default ``--lifespan auto``, gunicorn with uvicorn workers). At start-up it starts every
  mount's sweeper and chains a handler onto the server's ``SIGTERM``/``SIGINT`` handler, so the
  drain begins the moment the signal arrives (uvicorn only sends ``lifespan.shutdown`` once its
  connections have closed, and streaming clients keep theirs open); at shutdown it waits for
  every mount's drain.
- ``begin_drain_all()`` / ``await drain_all()``: the hook for any other server (call them from
  its shutdown hook or signal handler), or ``server.begin_drain()`` / ``await server.drain()``
  for one mount.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import signal
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from types import FrameType
from typing import Any, Final

from django.http import HttpResponseBase

from django_pydantic_agent.agui.http import error_response

__all__ = [
    "DEFAULT_DRAIN_SECONDS",
    "DRAINING",
    "DRAIN_RETRY_AFTER_SECONDS",
    "Drain",
    "DrainReport",
    "begin_drain_all",
    "drain_all",
    "install_signal_hook",
    "lifespan",
]

logger = logging.getLogger("django_pydantic_agent.agui")

#: How long a draining worker lets its runs go on before it hands them over (seconds).
DEFAULT_DRAIN_SECONDS: Final[float] = 25.0
#: The ``Retry-After`` of the 503 a draining worker answers a new run with (seconds).
DRAIN_RETRY_AFTER_SECONDS: Final[int] = 1
#: The 503's sentence.
DRAINING: Final[str] = (
    "This server is shutting down and takes no new runs; send the run again in a moment "
    "(another worker will take it)."
)
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(frozen=True, kw_only=True)
class DrainReport:
    """What a drain did with the runs it found: ``finished`` ended here within the drain,
    ``handed_over`` were stopped here and left to another worker."""

    finished: int = 0
    handed_over: int = 0

    def __add__(self, other: DrainReport) -> DrainReport:
        return DrainReport(
            finished=self.finished + other.finished,
            handed_over=self.handed_over + other.handed_over,
        )


class Drain:
    """One mount's drain (see the module docstring).

    ``runs(seconds)`` drains the mount's durable runs (``RunCoordinator.drain``); ``None`` for a
    stateless mount, whose runs live in their requests (the ASGI server waits for those).
    ``start()`` and ``close()`` start and stop what runs beside the mount's requests (its
    sweeper), at lifespan start-up and shutdown; ``undo()`` lets the runs be taken again
    (``end``).
    """

    _instances: weakref.WeakSet[Drain] = weakref.WeakSet()

    def __init__(
        self,
        *,
        seconds: float,
        runs: Callable[[float], Awaitable[DrainReport]] | None = None,
        start: Callable[[], object] | None = None,
        close: Callable[[], Awaitable[None]] | None = None,
        undo: Callable[[], None] | None = None,
    ) -> None:
        self.seconds = seconds
        self._undo = undo
        self._runs = runs
        self._start = start
        self._close = close
        self.draining = False
        self._task: asyncio.Task[DrainReport] | None = None
        Drain._instances.add(self)

    def begin(self) -> None:
        """Take no new runs from now on, and (inside an event loop) start draining the runs."""
        self.draining = True
        if self._task is not None or self._runs is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # wait() starts it
        self._task = loop.create_task(
            self._drain(), name="agent run drain", context=contextvars.Context()
        )

    async def _drain(self) -> DrainReport:
        assert self._runs is not None
        report = await self._runs(self.seconds)
        if report.finished or report.handed_over:
            logger.info(
                "Drained: %d run(s) finished here, %d handed over.",
                report.finished,
                report.handed_over,
            )
        return report

    async def wait(self) -> DrainReport:
        """``begin()``, then return once the runs are drained (within ``seconds``, plus the
        handed-over runs' last writes)."""
        self.begin()
        if self._task is None:
            return DrainReport()
        if self._task.get_loop() is not asyncio.get_running_loop():
            return DrainReport()  # begun on a loop that is gone (tests); nothing to wait for
        return await asyncio.shield(self._task)

    def start(self) -> None:
        """Start what runs beside the mount's requests (its sweeper)."""
        if self._start is not None:
            self._start()

    async def close(self) -> None:
        """Stop what ``start`` started."""
        if self._close is not None:
            await self._close()

    def end(self) -> None:
        """Take runs again (a shutdown called off, or a test that drained a shared mount)."""
        self.draining = False
        self._task = None
        if self._undo is not None:
            self._undo()

    def refusal(self) -> HttpResponseBase:
        """The JSON 503 a draining mount answers a new run with, with ``Retry-After``."""
        response = error_response(503, DRAINING)
        response["Retry-After"] = str(DRAIN_RETRY_AFTER_SECONDS)
        return response


def begin_drain_all() -> None:
    """``begin()`` every mount's drain in this process (safe from a signal handler's callback)."""
    for drain in list(Drain._instances):
        drain.begin()


async def drain_all() -> DrainReport:
    """Drain every mount of this process; the runs finished and handed over, summed."""
    begin_drain_all()
    report = DrainReport()
    for drain in list(Drain._instances):
        report += await drain.wait()
    return report


def install_signal_hook() -> bool:
    """Begin the drain as soon as ``SIGTERM`` or ``SIGINT`` arrives, then call the handler
    that was there before (the ASGI server's own). Call it inside the running event loop,
    in the main thread, after the server installed its handlers (at lifespan start-up);
    ``False`` where signals cannot be handled (another thread, no loop)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return False
    installed = False
    for sig in _SIGNALS:
        try:
            previous = signal.getsignal(sig)
            signal.signal(sig, _chained(loop, previous))
        except (ValueError, OSError):  # not the main thread
            return installed
        installed = True
    return installed


def _chained(loop: asyncio.AbstractEventLoop, previous: Any) -> Callable[[int, Any], None]:
    def handle(sig: int, frame: FrameType | None) -> None:
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(begin_drain_all)
        if callable(previous):
            previous(sig, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)

    handle.drain_previous = previous  # type: ignore[attr-defined]
    return handle


Message = MutableMapping[str, Any]


async def lifespan(
    receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]]
) -> None:
    """Answer an ASGI ``lifespan`` scope: at start-up, start every mount's sweeper and the
    signal hook; at shutdown, drain every mount (``drain_all``) and stop the sweepers."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await lifespan_startup()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await lifespan_shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def lifespan_startup() -> None:
    """What ``lifespan`` does at start-up (for a project answering the protocol itself).

    ``ROOT_URLCONF`` is loaded first, so the mounts it builds exist before any request.
    """
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 (imports the URLconf, building the servers)
    for drain in list(Drain._instances):
        drain.start()
    install_signal_hook()


async def lifespan_shutdown() -> DrainReport:
    """What ``lifespan`` does at shutdown: ``drain_all()``, then every mount's sweeper stops."""
    try:
        return await drain_all()
    finally:
        for drain in list(Drain._instances):
            await drain.close()
