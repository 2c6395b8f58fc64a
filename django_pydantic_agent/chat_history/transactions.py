"""The nested transaction behind every repository backend's ``transaction()``, written once.

A block (or a write) inside the open transaction joins it; the outermost holds the scope,
snapshots, runs and commits; a block that raises restores the snapshot. ``TaskScope``: one task
at a time (in-memory, adapter, ORM); ``ContextScope``: each context its own (Memory Service).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

__all__ = ["ContextScope", "NestedTransaction", "TaskScope"]

_S = TypeVar("_S")


class TaskScope:
    """Held by one task at a time: ``hold()`` waits for it and makes the current task its
    owner until the block exits; ``joined`` is true inside the owner task, where a nested
    block joins instead of waiting (which would deadlock)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._owner: asyncio.Task[Any] | None = None

    @property
    def joined(self) -> bool:
        """Whether the current task holds the scope."""
        return self._owner is not None and self._owner is asyncio.current_task()

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Wait for the scope, then hold it for the current task until the block exits."""
        async with self._lock:
            self._owner = asyncio.current_task()
            try:
                yield
            finally:
                self._owner = None


_HELD: ContextVar[tuple[ContextScope[Any], Any] | None] = ContextVar(
    "chat_history_held_scope", default=None
)


class ContextScope(Generic[_S]):
    """Held per context and never waited for: each holder (a task, and the tasks it starts
    meanwhile) has its own ``state`` (never ``None``), made by ``factory`` as it takes hold.
    A context holds one ``ContextScope`` at a time."""

    def __init__(self, factory: Callable[[], _S]) -> None:
        self._factory = factory

    @property
    def state(self) -> _S | None:
        """This context's state while it holds the scope, else ``None``."""
        held = _HELD.get()
        return held[1] if held is not None and held[0] is self else None

    @property
    def joined(self) -> bool:
        """Whether the current context holds the scope."""
        return self.state is not None

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Hold the scope, with a fresh state, until the block exits."""
        token = _HELD.set((self, self._factory()))
        try:
            yield
        finally:
            _HELD.reset(token)


class NestedTransaction:
    """``transaction()`` over a scope and three hooks a backend overrides as it needs.

    ``_begin()`` runs once the scope is held and returns the snapshot; ``_restore(snapshot)``
    undoes the block's writes when it raises; ``_commit(snapshot)`` applies them when it
    exits cleanly (a failing commit restores nothing unless the backend does). A write made
    outside a transaction runs in one of its own: ``async with self.transaction()``.
    """

    _scope: TaskScope | ContextScope[Any]

    def _begin(self) -> Any:
        """The snapshot a rollback restores (default: none)."""
        return None

    def _restore(self, snapshot: Any) -> None:
        """Undo the block's writes (default: nothing to undo)."""

    async def _commit(self, snapshot: Any) -> None:
        """Apply the block's writes (default: they already are)."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Apply the writes made inside the block all or none; a nested block joins it."""
        if self._scope.joined:
            yield
            return
        async with self._scope.hold():
            snapshot = self._begin()
            try:
                yield
            except BaseException:
                self._restore(snapshot)
                raise
            await self._commit(snapshot)
