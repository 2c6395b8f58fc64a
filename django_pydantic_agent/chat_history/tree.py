"""A thread's messages as a tree: the one set of branch rules every store uses (no I/O).

Each message follows a parent (``None`` for a first message); the messages following one
parent are *siblings*, oldest first in the order they were added. One path from a first
message down is the *active branch*: what ``load`` returns and what a run reads. A store only
loads its parents and order into a ``Tree`` (``contrib.store`` from its rows, the Memory
Service from its marker events, the session and ``Model*`` stores from the branches nested in
their messages), asks it, and saves the answer:

- ``find``: the message read back under an AG-UI id: the active one, else the newest;
- ``path``: the branch through a message: its ancestors, it, and below it the newest child at
  each branch point (what activating the message makes active);
- ``branch_points``: each active message that has siblings, with their ids;
- ``fork_end``: how much of an active branch a fork at a message keeps;
- ``shape``: the export's entries (each message's parent index and whether it is active).
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
    """The parent and children of each message of one thread, and its active branch.

    ``parent`` maps a key to its parent's (``None``: a first message), ``children`` a parent
    (``None``: the thread) to its children oldest first, ``ids`` a key to its AG-UI id and
    ``active`` is the active branch, first message first.
    """

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
            if own is None:
                continue
            before = [name(s) for s in siblings[: siblings.index(key)]]
            after = [name(s) for s in siblings[siblings.index(key) + 1 :]]
            shown = [i for i in before if i is not None]
            points[own] = BranchPoint(
                siblings=(*shown, own, *(i for i in after if i is not None)), index=len(shown)
            )
        return points

    def shape(self, order: Iterable[K] | None = None) -> list[tuple[K, int | None, bool]]:
        """The export's entries: each message in ``order`` (by default as added; parents
        before children), the index of its parent in it (``None`` for a first message) and
        whether it is active."""
        keys = list(self.parent if order is None else order)
        index = {key: i for i, key in enumerate(keys)}
        active = set(self.active)
        entries: list[tuple[K, int | None, bool]] = []
        for key in keys:
            parent = self.parent.get(key)
            entries.append((key, None if parent is None else index[parent], key in active))
        return entries


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
