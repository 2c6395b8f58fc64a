"""The nested transaction every repository backend is built on (``chat_history.transactions``).

The backends' own suites pin what each does inside it (``test_repositories.py`` here, in
``tests/persistence`` and ``tests/contrib/store``, and ``test_memory_service*.py``); these pin
the skeleton: who joins, who waits, and when the snapshot is restored or the batch committed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from django_pydantic_agent.chat_history.transactions import (
    ContextScope,
    NestedTransaction,
    TaskScope,
)


class Recorder(NestedTransaction):
    """A backend that notes each hook call, over the scope it is given."""

    def __init__(self, scope: TaskScope | ContextScope[Any]) -> None:
        self._scope = scope
        self.calls: list[str] = []

    def _begin(self) -> str:
        self.calls.append("begin")
        return f"snapshot {len(self.calls)}"

    def _restore(self, snapshot: Any) -> None:
        self.calls.append(f"restore {snapshot}")

    async def _commit(self, snapshot: Any) -> None:
        self.calls.append(f"commit {snapshot}")


@pytest.fixture(params=["task", "context"])
def repo(request: pytest.FixtureRequest) -> Recorder:
    return Recorder(TaskScope() if request.param == "task" else ContextScope(list))


async def test_a_nested_block_joins_and_the_outermost_commits_once(repo: Recorder) -> None:
    async with repo.transaction(), repo.transaction():
        assert repo._scope.joined
    assert repo.calls == ["begin", "commit snapshot 1"]
    assert not repo._scope.joined


async def test_a_block_that_raises_restores_and_commits_nothing(repo: Recorder) -> None:
    async def nested_raise() -> None:
        async with repo.transaction(), repo.transaction():
            raise KeyError("boom")

    with pytest.raises(KeyError):
        await nested_raise()
    assert repo.calls == ["begin", "restore snapshot 1"]


async def test_a_task_scope_makes_another_task_wait() -> None:
    repo = Recorder(TaskScope())
    inside = asyncio.Event()
    order: list[str] = []

    async def first() -> None:
        async with repo.transaction():
            inside.set()
            await asyncio.sleep(0.01)
            order.append("first done")

    async def second() -> None:
        await inside.wait()
        async with repo.transaction():  # another task: waits, does not join
            order.append("second in")

    await asyncio.gather(first(), second())
    assert order == ["first done", "second in"]
    assert repo.calls.count("begin") == 2


async def test_a_context_scope_gives_each_task_its_own_state_and_none_waits() -> None:
    scope: ContextScope[list[str]] = ContextScope(list)
    repo = Recorder(scope)
    both_in = asyncio.Barrier(2)

    async def writer(name: str) -> list[str] | None:
        async with repo.transaction():
            state = scope.state
            assert state is not None
            state.append(name)
            await both_in.wait()  # both hold the scope at once: neither waited

            async def child() -> list[str] | None:
                return scope.state

            # A task started inside the block is in its context: it joins, same state.
            assert await asyncio.create_task(child()) is state
            return state

    first, second = await asyncio.gather(writer("a"), writer("b"))
    assert (first, second) == (["a"], ["b"])
    assert scope.state is None
    assert not scope.joined
