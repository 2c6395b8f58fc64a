"""Opt-in fault injection and a request counter for the emulator, for tests and benchmarks.

Both are plain, thread-safe, settings-free objects. The module-level instances
:data:`fault_injector` and :data:`request_counter` are the ones the emulator's views consult, so
a test drives the live server from the outside::

    from django_pydantic_agent.contrib.memory_service_emulator import (
        Fault, fault_injector, request_counter,
    )

    request_counter.reset()
    with fault_injector.inject(Fault.rate_limited(retry_after=30, times=1)):
        ...  # the first matching request answers 429 with ``Retry-After: 30``
    assert request_counter.count(method="POST", route="session-list") == 2

Nothing here imports Django models, so it is importable before ``django.setup()``.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

FaultKind = Literal["latency", "rate_limit", "unavailable", "drop", "timeout"]

ROUTE_NAMES: frozenset[str] = frozenset(
    {
        "space-list",
        "space-create",
        "space-detail",
        "session-list",
        "session-detail",
        "event-list",
        "event-batch",
        "event-detail",
        "not-found",
    }
)
"""The route names the emulator reports to the counter and matches faults against."""


@dataclass(frozen=True, kw_only=True)
class Fault:
    """One fault rule. Build it with the class methods rather than by hand.

    ``rate`` is the probability (0..1) that a matching request is hit; ``times`` caps how often
    the rule fires (``None``: no cap); ``methods`` and ``routes`` restrict which requests match
    (``None``: all). A fault fires before the request is processed, so it never changes state,
    except a dropped connection with ``after_processing`` set.
    """

    kind: FaultKind
    rate: float = 1.0
    times: int | None = None
    methods: frozenset[str] | None = None
    routes: frozenset[str] | None = None
    seconds: float = 0.0
    retry_after: str | None = None
    after_processing: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"Fault rate {self.rate!r} is outside 0..1; pass a probability.")
        if self.times is not None and self.times < 1:
            raise ValueError(f"Fault times {self.times!r} must be at least 1, or None for no cap.")
        if self.seconds < 0:
            raise ValueError(f"Fault delay {self.seconds!r} is negative; pass seconds >= 0.")
        if self.routes is not None and not self.routes <= ROUTE_NAMES:
            unknown = sorted(self.routes - ROUTE_NAMES)
            raise ValueError(
                f"Unknown emulator route name(s) {unknown!r}; "
                f"use names from {sorted(ROUTE_NAMES)!r}."
            )

    @classmethod
    def latency(
        cls,
        seconds: float,
        *,
        rate: float = 1.0,
        times: int | None = None,
        methods: Iterable[str] | None = None,
        routes: Iterable[str] | None = None,
    ) -> Fault:
        """Delay matching requests by ``seconds`` before they are processed normally."""
        return cls._rule("latency", rate, times, methods, routes, seconds=seconds)

    @classmethod
    def rate_limited(
        cls,
        *,
        retry_after: int | str | None = None,
        rate: float = 1.0,
        times: int | None = None,
        methods: Iterable[str] | None = None,
        routes: Iterable[str] | None = None,
    ) -> Fault:
        """Answer 429; with ``Retry-After`` (seconds or an HTTP-date) when ``retry_after`` is set.

        Without ``retry_after`` it imitates the service's storage cap, with it a quota window.
        """
        header = None if retry_after is None else str(retry_after)
        return cls._rule("rate_limit", rate, times, methods, routes, retry_after=header)

    @classmethod
    def unavailable(
        cls,
        *,
        rate: float = 1.0,
        times: int | None = None,
        methods: Iterable[str] | None = None,
        routes: Iterable[str] | None = None,
    ) -> Fault:
        """Answer 503 with a JSON ``detail``."""
        return cls._rule("unavailable", rate, times, methods, routes)

    @classmethod
    def dropped_connection(
        cls,
        *,
        after_processing: bool = False,
        rate: float = 1.0,
        times: int | None = None,
        methods: Iterable[str] | None = None,
        routes: Iterable[str] | None = None,
    ) -> Fault:
        """Close the connection instead of answering (the emulator docs say what clients see).

        With ``after_processing=True`` the request is carried out first and only its answer is
        lost, the case that retries and deduplication keys exist for.
        """
        return cls._rule("drop", rate, times, methods, routes, after_processing=after_processing)

    @classmethod
    def timeout(
        cls,
        seconds: float,
        *,
        after_processing: bool = False,
        rate: float = 1.0,
        times: int | None = None,
        methods: Iterable[str] | None = None,
        routes: Iterable[str] | None = None,
    ) -> Fault:
        """Hold the request for ``seconds`` without answering, then drop the connection.

        Pick ``seconds`` above the client's read timeout, so the client gives up first. With
        ``after_processing=True`` the request is carried out before the wait: the client times
        out on a write that happened.
        """
        return cls._rule(
            "timeout",
            rate,
            times,
            methods,
            routes,
            seconds=seconds,
            after_processing=after_processing,
        )

    @classmethod
    def _rule(
        cls,
        kind: FaultKind,
        rate: float,
        times: int | None,
        methods: Iterable[str] | None,
        routes: Iterable[str] | None,
        **details: Any,
    ) -> Fault:
        """The builders' common part: normalise the matching keywords, add the kind's own."""
        return cls(
            kind=kind,
            rate=rate,
            times=times,
            methods=None if methods is None else frozenset(m.upper() for m in methods),
            routes=None if routes is None else frozenset(routes),
            **details,
        )

    def matches(self, method: str, route: str) -> bool:
        """Whether this rule applies to a request, ignoring ``rate`` and ``times``."""
        if self.methods is not None and method.upper() not in self.methods:
            return False
        return self.routes is None or route in self.routes


@dataclass
class _Armed:
    fault: Fault
    fired: int = 0


@dataclass
class FaultInjector:
    """Holds the active fault rules and decides, per request, which one fires.

    Thread-safe: rules are added and removed under a lock, and the random draw for ``rate`` is
    taken under the same lock from a private :class:`random.Random` (seed it for reproducible
    runs with :meth:`seed`). With no rule armed the emulator behaves normally.
    """

    _rules: list[_Armed] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _random: random.Random = field(default_factory=random.Random)
    _fired: Counter[FaultKind] = field(default_factory=Counter)

    def add(self, fault: Fault) -> Fault:
        """Arm ``fault`` until :meth:`remove` or :meth:`clear`; returns it for later removal."""
        with self._lock:
            self._rules.append(_Armed(fault))
        return fault

    def remove(self, fault: Fault) -> None:
        """Disarm ``fault`` (every arming of that exact rule); unknown rules are ignored."""
        with self._lock:
            self._rules = [armed for armed in self._rules if armed.fault is not fault]

    def clear(self) -> None:
        """Disarm every rule and forget how often faults fired."""
        with self._lock:
            self._rules.clear()
            self._fired.clear()

    def seed(self, value: int) -> None:
        """Seed the random draw used for ``rate``, for reproducible benchmarks."""
        with self._lock:
            self._random.seed(value)

    @contextmanager
    def inject(self, *faults: Fault) -> Iterator[FaultInjector]:
        """Arm ``faults`` for the duration of the ``with`` block, then disarm exactly them."""
        for fault in faults:
            self.add(fault)
        try:
            yield self
        finally:
            for fault in faults:
                self.remove(fault)

    def fired(self, kind: FaultKind | None = None) -> int:
        """How many times faults (of ``kind``, or of any kind) fired since the last clear."""
        with self._lock:
            return sum(self._fired.values()) if kind is None else self._fired[kind]

    def pick(self, method: str, route: str) -> tuple[float, Fault | None]:
        """Decide the faults for one request: ``(added latency in seconds, outcome fault)``.

        Every firing latency rule adds its delay; at most one other rule (the first armed one
        that fires) replaces the answer. The emulator calls this once per request.
        """
        delay = 0.0
        outcome: Fault | None = None
        with self._lock:
            for armed in self._rules:
                fault = armed.fault
                if fault.kind != "latency" and outcome is not None:
                    continue
                if not fault.matches(method, route):
                    continue
                if fault.times is not None and armed.fired >= fault.times:
                    continue
                if fault.rate < 1.0 and self._random.random() >= fault.rate:
                    continue
                armed.fired += 1
                self._fired[fault.kind] += 1
                if fault.kind == "latency":
                    delay += fault.seconds
                else:
                    outcome = fault
        return delay, outcome


@dataclass
class RequestCounter:
    """Counts the requests that reached emulator routes, by HTTP method and route name.

    Every request is counted, including those answered 401, 404 or by a fault. Thread-safe.
    """

    _counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, method: str, route: str) -> None:
        with self._lock:
            self._counts[(method.upper(), route)] += 1

    def count(self, *, method: str | None = None, route: str | None = None) -> int:
        """Requests matching ``method`` and ``route`` (either may be ``None`` for any)."""
        wanted_method = None if method is None else method.upper()
        with self._lock:
            return sum(
                n
                for (m, r), n in self._counts.items()
                if (wanted_method is None or m == wanted_method) and (route is None or r == route)
            )

    def snapshot(self) -> dict[tuple[str, str], int]:
        """A copy of the counts keyed by ``(METHOD, route name)``."""
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()


fault_injector = FaultInjector()
"""The injector the emulator's views consult."""

request_counter = RequestCounter()
"""The counter the emulator's views update."""
