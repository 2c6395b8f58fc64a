"""The frozen options an ``AGUIServer`` hands down to its handlers, and the checks behind them.

``AGUIServer.__init__`` checks every argument with the helpers here (a wrong one fails at
construction with ``TypeError``/``ValueError`` naming the value and the fix), then builds one
options object per concern and gives each handler only the ones it uses. Handlers never see the
server, so configuration flows down and nothing reaches back up.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from django.http import HttpRequest

from django_pydantic_agent.agui.http import json_body_limit
from django_pydantic_agent.agui.runs import DEFAULT_SWEEP_INTERVAL_SECONDS
from django_pydantic_agent.agui.sse import DEFAULT_STREAM_COALESCE_SECONDS
from django_pydantic_agent.persistence.runs import DEFAULT_LEASE_SECONDS

__all__ = [
    "DEFAULT_ATTACHMENT_MAX_BYTES",
    "DEFAULT_THREAD_LIST_LIMIT",
    "AttachmentOptions",
    "BodyLimit",
    "ConcurrentRuns",
    "OnDisconnect",
    "RunOptions",
    "check_callable",
    "check_choice",
    "check_flag",
    "check_positive",
    "check_run_lease",
    "file_url_schemes",
    "mime_types",
]

#: What a client disconnect does to a durable run: keep it going, or cancel it.
OnDisconnect: TypeAlias = Literal["continue", "cancel"]
#: What a second run on a busy thread does: refuse it (409), or cancel the running one first.
ConcurrentRuns: TypeAlias = Literal["reject", "interrupt"]

#: Ten mebibytes, the default ``attachment_max_bytes``.
DEFAULT_ATTACHMENT_MAX_BYTES = 10 * 1024 * 1024
#: Default and maximum ``?limit=`` of the thread list.
DEFAULT_THREAD_LIST_LIMIT = 50


@dataclass(frozen=True, kw_only=True)
class BodyLimit:
    """The body cap of the JSON routes, called per request: ``limit()`` is a byte count.

    ``max_body_bytes``, or ``DATA_UPLOAD_MAX_MEMORY_SIZE`` read at request time when that is
    ``None`` (see ``http.json_body_limit``).
    """

    max_body_bytes: int | None = None

    def __call__(self) -> int:
        """The cap now, in bytes."""
        return json_body_limit(self.max_body_bytes)


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How the run endpoint runs the agent and streams it (the ``AGUIServer`` arguments)."""

    #: Seconds of silence before an SSE heartbeat comment; ``0`` turns it off.
    heartbeat_seconds: float = 15.0
    #: While events come faster than this, the stream writes them together at most this often
    #: (seconds); ``0`` writes each event as it comes.
    stream_coalesce_seconds: float = DEFAULT_STREAM_COALESCE_SECONDS
    #: Whether ``REASONING_*`` events reach the client (and, when persisting, the transcript).
    forward_reasoning: bool = True
    #: Whether ``RUN_ERROR`` carries the exception's text instead of the redacted sentence.
    expose_error_messages: bool = False
    #: Lower-cased URL schemes a client may name in a file part; empty refuses every URL.
    allowed_file_url_schemes: frozenset[str] = frozenset()
    #: Extra instructions for every run, passed to the agent as ``instructions=``.
    instructions: Any = None
    #: ``deps_factory(request)`` (sync or async), or ``None`` for ``AgentDeps``.
    deps_factory: Callable[[HttpRequest], Any] | None = None
    #: ``"continue"``: a durable run outlives its client; ``"cancel"``: a disconnect cancels it.
    on_disconnect: OnDisconnect = "continue"
    #: ``"reject"``: a second run on a busy thread is a 409; ``"interrupt"``: cancel the first.
    concurrent_runs: ConcurrentRuns = "reject"
    #: Seconds between a durable run's heartbeats (its record's lease and cancel check).
    run_heartbeat_seconds: float = 10.0
    #: Seconds without a heartbeat after which a run's worker counts as dead (swept as errored).
    run_lease_seconds: float = DEFAULT_LEASE_SECONDS
    #: Seconds between two sweeps of stale runs (once across workers); ``0`` turns it off.
    sweep_interval_seconds: float = DEFAULT_SWEEP_INTERVAL_SECONDS
    #: How long ``concurrent_runs="interrupt"`` waits for the cancelled run to end.
    interrupt_wait_seconds: float = 10.0


@dataclass(frozen=True, kw_only=True)
class AttachmentOptions:
    """What the upload route accepts."""

    #: The largest file accepted, in bytes.
    max_bytes: int = DEFAULT_ATTACHMENT_MAX_BYTES
    #: Lower-cased MIME types (``image/*`` allowed) accepted; empty accepts any type.
    allowed_types: tuple[str, ...] = ()


def check_positive(name: str, value: object, *, allow_zero: bool = False) -> None:
    """Raise ``TypeError`` unless ``value`` is a number, ``ValueError`` unless it is positive."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name}={value!r} is not a number; pass a positive number.")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(
            f"{name}={value!r} is not allowed; pass a positive number"
            + (" (or 0 to turn it off)." if allow_zero else ".")
        )


def check_callable(name: str, hook: object) -> None:
    """Raise ``TypeError`` unless ``hook`` is ``None`` or callable."""
    if hook is not None and not callable(hook):
        raise TypeError(f"{name}={hook!r} is not callable; pass a function or None.")


def check_flag(name: str, flag: object) -> None:
    """Raise ``TypeError`` unless ``flag`` is a bool."""
    if not isinstance(flag, bool):
        raise TypeError(f"{name}={flag!r} is not a bool; pass True or False.")


def mime_types(value: Sequence[str]) -> tuple[str, ...]:
    """``attachment_allowed_types`` lower-cased; a bare string is a ``TypeError``."""
    if isinstance(value, str):
        raise TypeError(
            f"attachment_allowed_types={value!r} is a string; pass a sequence of MIME types "
            "such as ('image/png', 'application/pdf')."
        )
    return tuple(t.lower() for t in value)


def file_url_schemes(value: Collection[str]) -> frozenset[str]:
    """``allowed_file_url_schemes`` lower-cased; anything but non-empty strings: ``TypeError``."""
    if isinstance(value, str) or not all(isinstance(scheme, str) and scheme for scheme in value):
        raise TypeError(
            f"allowed_file_url_schemes={value!r} is not a collection of URL schemes; pass for "
            "example ('https',), or () to refuse client file URLs."
        )
    return frozenset(scheme.lower() for scheme in value)


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(
            f"{name}={value!r} is not one of {', '.join(repr(c) for c in choices)}; pass one."
        )


def check_run_lease(lease: float, heartbeat: float) -> None:
    """Raise ``ValueError`` unless a run's lease outlasts its heartbeat interval."""
    if lease <= heartbeat:
        raise ValueError(
            f"run_lease_seconds={lease!r} must exceed run_heartbeat_seconds={heartbeat!r}: a "
            "run renews its lease on every heartbeat, so a shorter lease would sweep live "
            f"runs. Pass a lease of a few heartbeats, such as {max(3 * heartbeat, 1.0):g}."
        )
