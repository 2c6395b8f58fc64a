"""The options objects of ``AGUIServer``: one frozen dataclass per concern, each checking itself.

httpx's ``Timeout``/``Limits`` habit: constructing an options object checks every value, and a
wrong one fails there with ``TypeError``/``ValueError`` naming the value and the fix (values
are normalised on the way: seconds to ``float``, MIME types and URL schemes lower-cased).
``AGUIServer(runs=RunOptions(...), attachments=AttachmentOptions(...), mount=MountOptions(...))``
keeps them as given (``server.runs``, ...) and hands each handler the ones it uses; handlers
never see the server, so configuration flows down and nothing reaches back up. The fourth,
``access.AccessPolicy``, lives with the checks it drives.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from django.http import HttpRequest

from django_pydantic_agent.agui.drain import DEFAULT_DRAIN_SECONDS
from django_pydantic_agent.agui.http import json_body_limit
from django_pydantic_agent.agui.sse import DEFAULT_STREAM_COALESCE_SECONDS
from django_pydantic_agent.persistence.runs import DEFAULT_LEASE_SECONDS

__all__ = [
    "DEFAULT_ATTACHMENT_MAX_BYTES",
    "DEFAULT_MAX_RESUMES",
    "DEFAULT_RUN_HEARTBEAT_SECONDS",
    "DEFAULT_SWEEP_INTERVAL_SECONDS",
    "DEFAULT_THREAD_LIST_LIMIT",
    "AttachmentOptions",
    "ConcurrentRuns",
    "MountOptions",
    "OnDisconnect",
    "OnWorkerLoss",
    "RunOptions",
    "UnsafeCSRFExemptionWarning",
    "check_callable",
    "check_flag",
    "check_positive",
    "csrf_exemption",
]

#: What a client disconnect does to a durable run: keep it going, or cancel it.
OnDisconnect: TypeAlias = Literal["continue", "cancel"]
#: What a second run on a busy thread does: refuse it (409), or cancel the running one first.
ConcurrentRuns: TypeAlias = Literal["reject", "interrupt"]
#: What happens to a run whose worker drained or died: another worker resumes it, or it errs.
OnWorkerLoss: TypeAlias = Literal["resume", "error"]
#: How many times a run is resumed at most, the default ``max_resumes``.
DEFAULT_MAX_RESUMES: Final[int] = 2

#: Ten mebibytes, the default ``AttachmentOptions.max_bytes``.
DEFAULT_ATTACHMENT_MAX_BYTES = 10 * 1024 * 1024
#: Default and maximum ``?limit=`` of the thread list.
DEFAULT_THREAD_LIST_LIMIT = 50
#: Seconds between two sweeps of stale runs, the default ``sweep_interval_seconds``.
DEFAULT_SWEEP_INTERVAL_SECONDS: Final[float] = 5.0
#: Seconds between two renewals of a worker's runs, the default ``run_heartbeat_seconds``: a
#: quarter of ``DEFAULT_LEASE_SECONDS``, so a dead worker's run is taken over within 10 s.
DEFAULT_RUN_HEARTBEAT_SECONDS: Final[float] = 2.0


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How the run endpoint runs the agent and streams it, and how durable runs are kept.

    Raises ``TypeError``/``ValueError`` naming a wrong value (``run_lease_seconds`` must exceed
    ``run_heartbeat_seconds``).
    """

    #: Seconds of silence before an SSE heartbeat comment; ``0`` turns it off.
    heartbeat_seconds: float = 15.0
    #: While events come faster than this, the stream writes them together at most this often
    #: (seconds); ``0`` writes each event as it comes.
    stream_coalesce_seconds: float = DEFAULT_STREAM_COALESCE_SECONDS
    #: Whether ``REASONING_*`` events reach the client (and, when persisting, the transcript).
    forward_reasoning: bool = True
    #: Whether ``RUN_ERROR`` carries the exception's text instead of the redacted sentence.
    expose_error_messages: bool = False
    #: URL schemes a client may name in a file part (kept lower-cased, as a frozenset); empty
    #: refuses every URL.
    allowed_file_url_schemes: Collection[str] = frozenset()
    #: Extra instructions for every run, passed to the agent as ``instructions=``.
    instructions: Any = None
    #: ``deps_factory(request)`` (sync or async), or ``None`` for ``AgentDeps``.
    deps_factory: Callable[[HttpRequest], Any] | None = None
    #: ``"continue"``: a durable run outlives its client; ``"cancel"``: a disconnect cancels it.
    on_disconnect: OnDisconnect = "continue"
    #: ``"reject"``: a second run on a busy thread is a 409; ``"interrupt"``: cancel the first.
    concurrent_runs: ConcurrentRuns = "reject"
    #: Seconds between a durable run's heartbeats (its record's lease and cancel check).
    run_heartbeat_seconds: float = DEFAULT_RUN_HEARTBEAT_SECONDS
    #: Seconds without a heartbeat after which a run's worker counts as dead.
    run_lease_seconds: float = DEFAULT_LEASE_SECONDS
    #: Seconds between two sweeps of stale runs (once across workers); ``0`` turns it off.
    sweep_interval_seconds: float = DEFAULT_SWEEP_INTERVAL_SECONDS
    #: How long ``concurrent_runs="interrupt"`` waits for the cancelled run to end.
    interrupt_wait_seconds: float = 10.0
    #: How long a shutting-down worker lets its runs go on before it hands them over.
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    #: ``"resume"``: a run whose worker drained or died is resumed by another worker;
    #: ``"error"``: the sweeper ends it ``errored``; ``None``: ``"resume"`` where the run store
    #: can take runs over (``ResumableRunStore``), else ``"error"`` (``server.runs`` holds the
    #: choice made).
    on_worker_loss: OnWorkerLoss | None = None
    #: How many times one run is resumed at most; after that it ends ``errored``.
    max_resumes: int = DEFAULT_MAX_RESUMES

    def __post_init__(self) -> None:
        check_positive("heartbeat_seconds", self.heartbeat_seconds, allow_zero=True)
        check_positive("stream_coalesce_seconds", self.stream_coalesce_seconds, allow_zero=True)
        for name in ("forward_reasoning", "expose_error_messages"):
            check_flag(name, getattr(self, name))
        check_callable("deps_factory", self.deps_factory)
        _check_choice("on_disconnect", self.on_disconnect, ("continue", "cancel"))
        _check_choice("concurrent_runs", self.concurrent_runs, ("reject", "interrupt"))
        check_positive("run_heartbeat_seconds", self.run_heartbeat_seconds)
        check_positive("run_lease_seconds", self.run_lease_seconds)
        lease, heartbeat = self.run_lease_seconds, self.run_heartbeat_seconds
        if lease <= heartbeat:
            raise ValueError(
                f"run_lease_seconds={lease!r} must exceed run_heartbeat_seconds={heartbeat!r}: "
                "a run renews its lease on every heartbeat, so a shorter lease would sweep live "
                f"runs. Pass a lease of a few heartbeats, such as {max(3 * heartbeat, 1.0):g}."
            )
        check_positive("sweep_interval_seconds", self.sweep_interval_seconds, allow_zero=True)
        check_positive("interrupt_wait_seconds", self.interrupt_wait_seconds)
        check_positive("drain_seconds", self.drain_seconds, allow_zero=True)
        if self.on_worker_loss is not None:
            _check_choice("on_worker_loss", self.on_worker_loss, ("resume", "error"))
        if isinstance(self.max_resumes, bool) or not isinstance(self.max_resumes, int):
            raise TypeError(
                f"max_resumes={self.max_resumes!r} is not a whole number; pass 0 or more."
            )
        if self.max_resumes < 0:
            raise ValueError(f"max_resumes={self.max_resumes!r} is negative; pass 0 or more.")
        for name in _SECONDS:
            _normalise(self, name, float(getattr(self, name)))
        schemes = self.allowed_file_url_schemes
        if isinstance(schemes, str) or not all(isinstance(s, str) and s for s in schemes):
            raise TypeError(
                f"allowed_file_url_schemes={schemes!r} is not a collection of URL schemes; pass "
                "for example ('https',), or () to refuse client file URLs."
            )
        _normalise(self, "allowed_file_url_schemes", frozenset(s.lower() for s in schemes))


_SECONDS = (
    "heartbeat_seconds",
    "stream_coalesce_seconds",
    "run_heartbeat_seconds",
    "run_lease_seconds",
    "sweep_interval_seconds",
    "interrupt_wait_seconds",
    "drain_seconds",
)


@dataclass(frozen=True, kw_only=True)
class AttachmentOptions:
    """What the upload route accepts (mounted when the attachment store persists)."""

    #: The largest file accepted, in bytes.
    max_bytes: int = DEFAULT_ATTACHMENT_MAX_BYTES
    #: MIME types (``image/*`` allowed) accepted, kept lower-cased as a tuple; empty accepts
    #: any type.
    allowed_types: Sequence[str] = ()

    def __post_init__(self) -> None:
        check_positive("max_bytes", self.max_bytes)
        _normalise(self, "max_bytes", int(self.max_bytes))
        if isinstance(self.allowed_types, str):
            raise TypeError(
                f"allowed_types={self.allowed_types!r} is a string; pass a sequence of MIME "
                "types such as ('image/png', 'application/pdf')."
            )
        _normalise(self, "allowed_types", tuple(t.lower() for t in self.allowed_types))


@dataclass(frozen=True, kw_only=True)
class MountOptions:
    """Where the routes are mounted, how long the thread list gets, how big a JSON body may be."""

    #: The URL namespace (and app name) of ``server.urls``: non-empty, without ``:``.
    namespace: str = "agent"
    #: Default and maximum ``?limit=`` of the thread list.
    thread_list_limit: int = DEFAULT_THREAD_LIST_LIMIT
    #: The body cap of every route but uploads, in bytes; ``None`` reads
    #: ``DATA_UPLOAD_MAX_MEMORY_SIZE`` at each request.
    max_body_bytes: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not self.namespace or ":" in self.namespace:
            raise ValueError(
                f"namespace={self.namespace!r} is not a usable URL namespace; pass a non-empty "
                "name without ':'."
            )
        check_positive("thread_list_limit", self.thread_list_limit)
        _normalise(self, "thread_list_limit", int(self.thread_list_limit))
        if self.max_body_bytes is not None:
            check_positive("max_body_bytes", self.max_body_bytes)
            _normalise(self, "max_body_bytes", int(self.max_body_bytes))

    def body_limit(self) -> int:
        """The JSON body cap now, in bytes (``http.json_body_limit``); handlers call it per
        request."""
        return json_body_limit(self.max_body_bytes)


class UnsafeCSRFExemptionWarning(UserWarning):
    """An ``AGUIServer`` is CSRF-exempt by default while authenticating with cookies.

    Emitted at construction when ``csrf_exempt`` is left unstated and no ``get_user`` hook is
    given: the session cookie then authenticates cross-site requests. Silence it by choosing:
    ``AccessPolicy(csrf_exempt=False)`` (enforce, for browser clients) or
    ``AccessPolicy(csrf_exempt=True)`` (exempt, for clients authenticated by a header your
    ``get_user`` reads).
    """


def csrf_exemption(csrf_exempt: bool | None, *, header_auth: bool, stacklevel: int = 2) -> bool:
    """Whether the views are CSRF-exempt: ``csrf_exempt``, or ``True`` when unstated (``None``).

    Unstated with cookie authentication (no ``header_auth``) warns with
    ``UnsafeCSRFExemptionWarning`` (``stacklevel`` counted from the caller).
    """
    if csrf_exempt is None and not header_auth:
        warnings.warn(
            "AGUIServer: csrf_exempt is unstated, so the endpoint is CSRF-exempt while "
            "requests authenticate with the session cookie; any site could drive the "
            "agent as a logged-in user. Pass access=AccessPolicy(csrf_exempt=False) to "
            "enforce CSRF (browser clients send the X-CSRFToken header), or "
            "AccessPolicy(csrf_exempt=True) with a get_user hook for header authentication.",
            UnsafeCSRFExemptionWarning,
            stacklevel=stacklevel + 1,
        )
    return True if csrf_exempt is None else csrf_exempt


def _normalise(options: object, name: str, value: object) -> None:
    """Set a frozen options field to its normalised value (from ``__post_init__`` only)."""
    object.__setattr__(options, name, value)


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


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(
            f"{name}={value!r} is not one of {', '.join(repr(c) for c in choices)}; pass one."
        )
