"""A second transport on the run engine, written in this file alone: newline-delimited JSON.

A transport is a request parser, an event encoder and its routes, over the mount's
``RunEngine`` (``server.engine``), which knows no wire. This one reuses AG-UI's body parser and
writes each event as one JSON line, ``{"seq": n | null, "event": {...}}`` (``{"idle": true}``
for an idle heartbeat). It runs, reattaches and cancels the same runs as the AG-UI routes, on
the same stored threads, with the same owner checks, in this file and nothing else.
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.test import override_settings
from django.urls import path

from django_pydantic_agent.agui import AGUIServer, MountOptions
from django_pydantic_agent.agui.engine import EventStream, RunEngine
from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.input import RunInputError, parse_run_input
from django_pydantic_agent.agui.views import AGUIView, Route
from tests.agui.agents import GATE, gated_agent
from tests.agui.conftest import logged_in, run_body, sse_frames
from tests.agui.urls import stored

pytestmark = pytest.mark.django_db(transaction=True)


# -- the transport -----------------------------------------------------------------------------


async def ndjson_lines(batches: EventStream) -> AsyncIterator[str]:
    """The encoder: one JSON line per event (its number, ``null`` if sent again), or per idle
    mark."""
    async for batch in batches:
        if batch is None:
            yield '{"idle": true}\n'
            continue
        yield "".join(
            json.dumps({"seq": seq, "event": event.model_dump(mode="json", by_alias=True)}) + "\n"
            for seq, event in batch
        )


def ndjson_response(batches: EventStream) -> StreamingHttpResponse:
    return StreamingHttpResponse(ndjson_lines(batches), content_type="application/x-ndjson")


class NDJSONTransport:
    """``POST`` a run, ``GET`` it again from a number, ``POST`` to cancel it."""

    def __init__(self, engine: RunEngine) -> None:
        self.engine = engine

    async def run(self, request: HttpRequest) -> HttpResponseBase:
        try:
            run_input = parse_run_input(request.body)
        except RunInputError as exc:
            return JsonResponse({"error": str(exc)}, status=400)
        try:
            handle = await self.engine.start(request, run_input, accept=None)
        except Refusal as refusal:
            return JsonResponse({"error": refusal.message}, status=refusal.status)
        return ndjson_response(self.engine.follow(handle).batches)

    async def reattach(self, request: HttpRequest, thread_id: str, run_id: str) -> HttpResponseBase:
        try:
            owner_id, record = await self.engine.locate(request, thread_id, run_id)
            stream = await self.engine.read(request, owner_id, record, int(request.GET["after"]))
        except Refusal as refusal:
            return JsonResponse({"error": refusal.message}, status=refusal.status)
        return ndjson_response(stream.batches)

    async def cancel(self, request: HttpRequest, thread_id: str, run_id: str) -> HttpResponseBase:
        try:
            status, body = await self.engine.cancel(request, thread_id, run_id)
        except Refusal as refusal:
            return JsonResponse({"error": refusal.message}, status=refusal.status)
        return JsonResponse(body, status=status)

    def urls(self, server: AGUIServer) -> list[Any]:
        """The routes, behind the same authentication, CSRF and body cap as the server's."""
        run = "runs/<str:thread_id>/<str:run_id>/"
        routes = [
            Route(path="", name="run", handlers={"POST": self.run}),
            Route(path=run, name="reattach", handlers={"GET": self.reattach}),
            Route(path=f"{run}cancel/", name="cancel", handlers={"POST": self.cancel}),
        ]
        return [
            path(
                route.path,
                AGUIView.for_route(route, policy=server.access, body_limit=server.mount.body_limit),
            )
            for route in routes
        ]


# -- one mount, two wires -----------------------------------------------------------------------

server = stored(gated_agent(), mount=MountOptions(namespace="seam"))


@pytest.fixture(autouse=True)
def both_wires() -> Iterator[None]:
    cache.clear()
    GATE.reset()
    assert server.engine is not None
    urlconf = types.ModuleType("seam_urls")
    urlconf.urlpatterns = [  # type: ignore[attr-defined]
        path("agui/", server.urls),
        path("ndjson/", (NDJSONTransport(server.engine).urls(server), "ndjson", "ndjson")),
    ]
    sys.modules[urlconf.__name__] = urlconf
    try:
        with override_settings(ROOT_URLCONF=urlconf.__name__):
            yield
    finally:
        del sys.modules[urlconf.__name__]


def lines(body: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.splitlines() if line]


async def test_a_run_over_ndjson_is_the_run_agui_reads(alice: Any) -> None:
    GATE.released.set()
    async with await logged_in(alice) as http:
        ndjson = await http.post("/ndjson/", json=run_body(thread_id="t-nd", run_id="r-nd"))
        agui = await http.get("/agui/runs/t-nd/r-nd/?after=0")
        thread = (await http.get("/agui/threads/t-nd/")).json()
    assert ndjson.headers["content-type"] == "application/x-ndjson"
    events = [line for line in lines(ndjson.text) if "event" in line]
    assert [line["seq"] for line in events] == list(range(1, len(events) + 1))
    # The same run, the same events, whichever wire reads it (AG-UI from storage, once ended).
    assert events[-1]["event"]["type"] == "RUN_FINISHED"
    texts = [line["event"]["delta"] for line in events if "delta" in line["event"]]
    assert "".join(texts) == "Working done."
    assert [e["type"] for _, e in sse_frames(agui.text)][-1] == "RUN_FINISHED"
    assert [m["content"] for m in thread["messages"]] == ["What is 2 + 3?", "Working done."]


async def test_an_agui_run_is_reattached_and_cancelled_over_ndjson(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http, await logged_in(bob) as stranger:
        streaming = asyncio.ensure_future(
            http.post("/agui/", json=run_body(thread_id="t-x", run_id="r-x"))
        )
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        assert (await stranger.get("/ndjson/runs/t-x/r-x/?after=0")).status_code == 404
        assert (await stranger.post("/ndjson/runs/t-x/r-x/cancel/")).status_code == 404
        tail = asyncio.ensure_future(http.get("/ndjson/runs/t-x/r-x/?after=2"))
        await asyncio.sleep(0.2)
        cancelled = await http.post("/ndjson/runs/t-x/r-x/cancel/")
        agui, ndjson = await asyncio.gather(streaming, tail)
    assert cancelled.status_code == 202
    assert cancelled.json() == {"runId": "r-x", "status": "cancelling", "cancelled": True}
    agui_events = sse_frames(agui.text)
    assert agui_events[-1][1]["outcome"]["type"] == "cancelled"
    events = [line for line in lines(ndjson.text) if "event" in line]
    # Re-opened without numbers (seen over AG-UI), then the same numbered tail as AG-UI's.
    assert next(line["event"]["type"] for line in events if line["seq"] is None) == "RUN_STARTED"
    numbered = [(line["seq"], line["event"]["type"]) for line in events if line["seq"]]
    assert numbered == [
        (int(frame_id.rpartition(":")[2]), event["type"])
        for frame_id, event in agui_events
        if frame_id is not None and int(frame_id.rpartition(":")[2]) > 2
    ]
