"""Suite-wide fixtures. Feature fixtures live in the nearest ``conftest.py``."""

from __future__ import annotations

import asyncio
import inspect
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from typing import cast

import pydantic_ai.models
import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.core.servers import basehttp
from django.db import connections

# No test may reach a real model provider: FunctionModel and TestModel still work.
pydantic_ai.models.ALLOW_MODEL_REQUESTS = False


@pytest_asyncio.fixture
async def _async_test_teardown() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    # Durable runs outlive their request (and persist after their terminal event): let those
    # the test started end before looking for tasks left running.
    runs = sys.modules.get("django_pydantic_agent.agui.runs")
    if runs is not None:
        await asyncio.wait_for(runs.RunCoordinator.wait_for_all_runs(), timeout=30)
    # Stores run the ORM in asgiref's worker thread; close its connections so PostgreSQL can
    # drop the test database at the end of the session.
    await sync_to_async(connections.close_all)()
    # Give tasks that were cancelled or finished at the very end a turn to settle.
    for _ in range(3):
        await asyncio.sleep(0)
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    for task in leaked:
        task.cancel()
    if leaked:
        names = ", ".join(sorted(repr(t.get_coro()) for t in leaked))
        pytest.fail(f"The test left {len(leaked)} asyncio task(s) running: {names}")


@pytest.fixture(autouse=True)
def _no_leaked_tasks(request: pytest.FixtureRequest) -> None:
    """After an async test: close worker-thread connections, and fail if a task was leaked.

    Every task needs an owner that ends it.
    """
    if inspect.iscoroutinefunction(getattr(request, "function", None)):
        request.getfixturevalue("_async_test_teardown")


@pytest.fixture(scope="session", autouse=True)
def _live_server_nodelay() -> Iterator[None]:
    """Answer without Nagle delays in ``live_server``.

    Django's test server writes headers and body separately, which with delayed ACKs costs
    about 40 ms per request on loopback, ten times the request itself.
    """
    original = basehttp.WSGIRequestHandler.setup

    def setup(self: basehttp.WSGIRequestHandler) -> None:
        cast(socket.socket, self.request).setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        original(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(basehttp.WSGIRequestHandler, "setup", setup)
        yield
