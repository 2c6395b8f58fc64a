"""AG-UI's run routes: reattach to a run (``GET runs/<thread_id>/<run_id>/``) and cancel it.

``reattach`` reads the ``after`` a client saw (``?after=<seq>`` or ``Last-Event-ID``) and
streams, as SSE, what the engine reads of the run from there (``engine.RunEngine.read``:
this worker's log, another worker's relayed log, a take-over, or storage).
``POST .../cancel/`` records a cancel intent that reaches the worker running the run. Both are
owner-checked: a stranger's run is a 404 exactly like a missing one.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from django_pydantic_agent.agui.engine import RUN_NOT_FOUND, RunEngine
from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.sse import run_response
from django_pydantic_agent.agui.views import Route

__all__ = ["RUN_NOT_FOUND", "RunEndpoints", "parse_after"]


def parse_after(request: HttpRequest, run_id: str) -> int | None:
    """The sequence number a reattaching client saw last: ``?after=`` or ``Last-Event-ID``.

    ``0`` when neither is sent; ``None`` when either is malformed (not a non-negative
    integer, or a ``Last-Event-ID`` of another run).
    """
    raw = request.GET.get("after")
    if raw is None:
        last = request.headers.get("Last-Event-ID")
        if last is None:
            return 0
        run, sep, raw = last.rpartition(":")
        if not sep or run != run_id:
            return None
    if not raw.isdigit():
        return None
    return int(raw)


class RunEndpoints:
    """The ``runs/<thread_id>/<run_id>/`` routes of the mount's ``engine``: reattach (``GET``)
    and cancel (``POST``)."""

    def __init__(self, engine: RunEngine) -> None:
        self._engine = engine

    def routes(self) -> list[Route]:
        """``runs/<thread_id>/<run_id>/`` (reattach) and ``.../cancel/``."""
        run = "runs/<str:thread_id>/<str:run_id>/"
        return [
            Route(
                path=run,
                name="run-reattach",
                handlers={"GET": self.reattach},
                not_found=RUN_NOT_FOUND,
            ),
            Route(
                path=f"{run}cancel/",
                name="run-cancel",
                handlers={"POST": self.cancel},
                not_found=RUN_NOT_FOUND,
            ),
        ]

    async def reattach(self, request: HttpRequest, thread_id: str, run_id: str) -> HttpResponseBase:
        """``GET runs/<thread_id>/<run_id>/``: the run's events after ``after``, as SSE."""
        engine = self._engine
        owner_id, record = await engine.locate(request, thread_id, run_id)
        after = parse_after(request, run_id)
        if after is None:
            raise Refusal(
                400,
                "after (or Last-Event-ID) must be a sequence number of this run, such as "
                f"?after=12 or Last-Event-ID: {run_id}:12.",
            )
        stream = await engine.read(request, owner_id, record, after)
        options = engine.options
        return run_response(
            stream,
            run_id,
            heartbeat_seconds=options.heartbeat_seconds,
            coalesce_seconds=options.stream_coalesce_seconds,
        )

    async def cancel(self, request: HttpRequest, thread_id: str, run_id: str) -> HttpResponseBase:
        """``POST runs/<thread_id>/<run_id>/cancel/``: 202 while it stops, 200 once ended.

        Idempotent; reaches the worker running the run through a cancel intent in the cache.
        """
        status, body = await self._engine.cancel(request, thread_id, run_id)
        return JsonResponse(body, status=status)
