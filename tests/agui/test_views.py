"""``AGUIView``: a write whose client leaves before the answer is still carried out, and a
response's hook is run once its request is over, sent or not."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.test import AsyncRequestFactory, RequestFactory

from django_pydantic_agent.agui.access import AccessPolicy
from django_pydantic_agent.agui.views import ABANDONED_HOOK, AGUIView

OPEN = AccessPolicy(
    require_authenticated=False, get_user=None, authorize=None, csrf_exempt=True, throttle=None
)


class Handler:
    """A handler that waits at a gate, then answers (or fails); it records what happened."""

    def __init__(self, *, fail: bool = False, tell: bool = True) -> None:
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()
        self.fail = fail
        self.tell = tell
        self.log: list[str] = []
        self.task: asyncio.Task[Any] | None = None

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        self.task = asyncio.current_task()
        self.entered.set()
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.log.append("cancelled")
            raise
        if self.fail:
            raise RuntimeError("the store went away")
        self.log.append("finished")
        response = JsonResponse({"ok": True})
        if self.tell:
            setattr(response, ABANDONED_HOOK, lambda: self.log.append("told"))
        return response


async def _leave_while_handling(handler: Handler, method: str) -> None:
    """Call the view, and cancel the call (as Django does on a disconnect) mid-handler."""
    view = AGUIView(policy=OPEN, handlers={method: handler})
    request = RequestFactory().generic(method, "/", data=b"{}", content_type="application/json")
    call = asyncio.ensure_future(view(request))
    await asyncio.wait_for(handler.entered.wait(), timeout=5)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_a_write_whose_client_left_finishes_and_its_response_is_told() -> None:
    handler = Handler()
    await _leave_while_handling(handler, "POST")
    assert handler.log == []  # still waiting at the gate, not cancelled
    handler.gate.set()
    assert handler.task is not None
    await asyncio.wait({handler.task})
    await asyncio.sleep(0)  # the done-callback runs on the next loop turn
    assert handler.log == ["finished", "told"]


async def test_a_write_whose_response_asks_for_nothing_just_finishes() -> None:
    handler = Handler(tell=False)
    await _leave_while_handling(handler, "PUT")
    handler.gate.set()
    assert handler.task is not None
    await asyncio.wait({handler.task})
    await asyncio.sleep(0)
    assert handler.log == ["finished"]


async def test_a_read_whose_client_left_is_cancelled() -> None:
    handler = Handler()
    await _leave_while_handling(handler, "GET")
    assert handler.log == ["cancelled"]


async def test_a_write_that_fails_after_its_client_left_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handler = Handler(fail=True)
    await _leave_while_handling(handler, "DELETE")
    with caplog.at_level(logging.WARNING, logger="django_pydantic_agent.agui"):
        handler.gate.set()
        assert handler.task is not None
        await asyncio.wait({handler.task})
        await asyncio.sleep(0)
    assert [r.getMessage() for r in caplog.records] == [
        "A request whose client went away failed: RuntimeError: the store went away"
    ]
    assert "Traceback" not in caplog.text


async def test_a_write_cancelled_itself_after_its_client_left_tells_nobody() -> None:
    handler = Handler()
    await _leave_while_handling(handler, "PATCH")
    assert handler.task is not None
    handler.task.cancel()  # e.g. the process shutting down
    await asyncio.wait({handler.task})
    await asyncio.sleep(0)
    assert handler.log == ["cancelled"]


async def _serve(
    request: HttpRequest, method: str, handler: Handler, written: asyncio.Event | None = None
) -> None:
    """The task serving ``request``, as a server's: the view answers, then the response goes
    out (until ``written`` is set) and the task ends."""
    view = AGUIView(policy=OPEN, handlers={method: handler})
    await view(request)
    handler.log.append("answered")
    if written is not None:
        await written.wait()


async def test_a_response_is_told_once_the_task_serving_its_request_has_ended() -> None:
    # Django drops a response whose client left in a middleware or while its headers went out:
    # nobody reads it, so the hook runs at the end of the request's task, sent or not.
    handler = Handler()
    handler.gate.set()
    written = asyncio.Event()
    request = AsyncRequestFactory().post("/", data=b"{}", content_type="application/json")
    serving = asyncio.ensure_future(_serve(request, "POST", handler, written))
    await asyncio.sleep(0.01)
    assert handler.log == ["finished", "answered"]  # still being written: not told yet
    written.set()
    await asyncio.wait({serving})
    await asyncio.sleep(0)  # the done-callback runs on the next loop turn
    assert handler.log == ["finished", "answered", "told"]


async def test_under_wsgi_a_response_is_not_told_when_the_view_returns() -> None:
    # WSGI runs the view in a task that ends as it returns, before the response is read.
    handler = Handler()
    handler.gate.set()
    request = RequestFactory().post("/", data=b"{}", content_type="application/json")
    await asyncio.ensure_future(_serve(request, "POST", handler))
    await asyncio.sleep(0)
    assert handler.log == ["finished", "answered"]


async def test_a_read_response_is_never_told() -> None:
    handler = Handler()
    handler.gate.set()
    await asyncio.ensure_future(_serve(AsyncRequestFactory().get("/"), "GET", handler))
    await asyncio.sleep(0)
    assert handler.log == ["finished", "answered"]
