"""A thread's messages as a tree: the one set of branch rules every store uses (no I/O).

Each message follows a parent (``None`` for a first message); the messages following one
parent are *siblings*, oldest first. One path from a first message down is the *active
branch*: what ``load`` returns and what a run reads. A store loads its parents and order into
a ``Tree`` (``contrib.store`` from its rows, the Memory Service from its marker events, the
session and ``Model*`` stores from the branches nested in their messages), asks it (``find``:
the active message with an id, else the newest; ``path``: the branch a switch makes active;
``branch_points``; ``shape``: the export's entries) and saves the answer. ``fork_end`` is what
a fork of an active branch keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["BranchPoint", "Tree", "fork_end"]

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, kw_only=True)
class BranchPoint:
    """An active message that has siblings: their AG-UI ids (its own included, oldest branch
    first) and its index among them."""

    siblings: tuple[str, ...]
    index: int


class Tree(Generic[K]):
    """``parent`` of each key (``None``: a first message), ``children`` of each parent
    (``None``: the first messages) oldest first, ``ids`` (AG-UI ids) and ``active`` (the
    active branch, first message first)."""

    def __init__(self) -> None:
        self.parent: dict[K, K | None] = {}
        self.children: dict[K | None, list[K]] = {}
        self.ids: dict[K, str] = {}
        self.active: list[K] = []

    @classmethod
    def of(cls, nodes: Iterable[tuple[K, K | None, str, bool]]) -> Tree[K]:
        """A tree of ``(key, parent, AG-UI id, active)`` nodes, siblings oldest first; the
        active branch runs from a first message down through the active nodes."""
        tree: Tree[K] = cls()
        flagged: set[K] = set()
        for key, parent, message_id, active in nodes:
            tree.add(key, parent, message_id)
            if active:
                flagged.add(key)
        node: K | None = None
        while True:
            node = next((k for k in tree.children.get(node, ()) if k in flagged), None)
            if node is None or node in tree.active:
                return tree
            tree.active.append(node)

    def add(self, key: K, parent: K | None, message_id: str = "") -> None:
        """Add ``key`` as the newest child of ``parent``."""
        self.parent[key] = parent
        self.children.setdefault(parent, []).append(key)
        self.ids[key] = message_id

    def grow(self, key: K, message_id: str = "") -> None:
        """Add ``key`` after the tip of the active branch, on it."""
        self.add(key, self.active[-1] if self.active else None, message_id)
        self.active.append(key)

    def cut(self, key: K) -> None:
        """Take ``key`` and what follows it off the active branch (kept): the next ``grow``
        makes a sibling of it. Nothing when ``key`` is not active."""
        if key in self.active:
            del self.active[self.active.index(key) :]

    def activate(self, key: K) -> None:
        """Make ``path(key)`` the active branch."""
        self.active = self.path(key)

    def siblings(self, key: K) -> list[K]:
        """The messages sharing ``key``'s parent, ``key`` included, oldest first."""
        return self.children.get(self.parent.get(key), [key])

    def find(self, message_id: str, label: Callable[[K], str | None] | None = None) -> K | None:
        """The message read back as ``message_id`` (``label(key)``, by default ``ids``): the
        active one, else the newest; ``None`` when none is."""
        name = label or self.ids.get
        matches = [key for key in self.parent if name(key) == message_id]
        if not matches:
            return None
        active = set(self.active)
        return next((key for key in reversed(matches) if key in active), matches[-1])

    def path(self, key: K) -> list[K]:
        """The branch through ``key``: its ancestors, it, and below it the newest child at
        each branch point."""
        up: list[K] = []
        seen: set[K] = set()
        current: K | None = key
        while current is not None and current not in seen:
            seen.add(current)
            up.append(current)
            current = self.parent.get(current)
        down: list[K] = []
        below = self.children.get(key)
        while below and below[-1] not in seen:
            seen.add(below[-1])
            down.append(below[-1])
            below = self.children.get(below[-1])
        return [*reversed(up), *down]

    def descendants(self, keys: Iterable[K]) -> set[K]:
        """``keys`` and every message below them."""
        found: set[K] = set()
        stack = list(keys)
        while stack:
            current = stack.pop()
            if current not in found:
                found.add(current)
                stack.extend(self.children.get(current, ()))
        return found

    def depth_first(self) -> list[K]:
        """Every message reachable from a first message, each before its children, siblings
        (and their branches) oldest first."""
        order: list[K] = []
        stack = list(reversed(self.children.get(None, ())))
        while stack:
            current = stack.pop()
            order.append(current)
            stack.extend(reversed(self.children.get(current, ())))
        return order

    def branch_points(
        self, label: Callable[[K], str | None] | None = None
    ) -> dict[str, BranchPoint]:
        """For each active message that has siblings, by its id: the siblings' ids and its
        index. ``label(key)`` (by default ``ids``) names a message; one it names ``None`` is
        left out (and an active one so named has no branch point)."""
        name = label or self.ids.get
        points: dict[str, BranchPoint] = {}
        for key in self.active:
            siblings = self.siblings(key)
            own = name(key) if len(siblings) > 1 else None
            if own is not None:
                names = [name(s) for s in siblings]
                index = sum(n is not None for n in names[: siblings.index(key)])
                shown = tuple(n for n in names if n is not None)
                points[own] = BranchPoint(siblings=shown, index=index)
        return points

    def shape(self, order: Iterable[K] | None = None) -> list[tuple[K, int | None, bool]]:
        """The export's entries: each message in ``order`` (by default as added; parents
        before children), the index of its parent in it (``None`` for a first message) and
        whether it is active."""
        keys = list(self.parent if order is None else order)
        index: dict[K | None, int | None] = {key: i for i, key in enumerate(keys)}
        index[None], active = None, set(self.active)
        return [(key, index[self.parent.get(key)], key in active) for key in keys]


def fork_end(messages: Sequence[Any], message_id: str) -> int | None:
    """How many of the AG-UI ``messages`` (an active branch) a fork at ``message_id`` keeps:
    up to and including that message and the tool results that answer its calls; ``None``
    when no message has that id."""
    for index, message in enumerate(messages):
        if isinstance(message, Mapping) and message.get("id") == message_id:
            end = index + 1
            calls = {
                call.get("id")
                for call in message.get("toolCalls") or ()
                if isinstance(call, Mapping)
            }
            while (
                calls
                and end < len(messages)
                and isinstance(messages[end], Mapping)
                and messages[end].get("role") == "tool"
                and messages[end].get("toolCallId") in calls
            ):
                end += 1
            return end
    return None
