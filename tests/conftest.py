"""Suite-wide fixtures. Feature fixtures live in the nearest ``conftest.py``."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator

import pydantic_ai.models
import pytest
import pytest_asyncio

# No test may reach a real model provider: FunctionModel and TestModel still work.
pydantic_ai.models.ALLOW_MODEL_REQUESTS = False


@pytest_asyncio.fixture
async def _fail_on_leaked_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
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
    """Fail an async test that leaves a task running: every task needs an owner that ends it."""
    if inspect.iscoroutinefunction(getattr(request, "function", None)):
        request.getfixturevalue("_fail_on_leaked_tasks")
