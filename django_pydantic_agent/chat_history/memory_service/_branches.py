"""A chat's branches on the append-only Memory Service: marker events and the fold over them.

Each message event follows the tip of the active branch as it was when the event was written.
A *marker* (a ``message`` event of body version ``MARKER_VERSION``, which readers of message
bodies skip) moves the tip:

- ``cut <uuid>``: the record and the records after it leave the active branch (kept); the next
  message follows the record before it, so the old and the new record are siblings;
- ``activate <uuid>``: the branch through the record becomes the active one, continued down the
  newest branch at each branch point below it.

``fold`` replays a chat's events in sequence order into a ``Tree``. A chat without markers is
one branch, its events in order, so a reader needs the markers only when there are any: a tail
read (``lastN``) that holds none ends on the active branch, one that holds some is listed whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal
from uuid import UUID

from django_pydantic_agent.chat_history.records import Message

__all__ = [
    "MARKER_VERSION",
    "Operation",
    "Tree",
    "branch_points",
    "find",
    "fold",
    "is_marker",
    "marker_fields",
    "message_id",
    "replay",
]

MARKER_VERSION: Final[int] = 0
"""The body version of a branch marker event (message bodies are version 1)."""
_ROLE: Final[str] = "branch"
Operation = Literal["cut", "activate"]
"""What a marker does."""


def is_marker(event: Message) -> bool:
    """Whether ``event`` is a branch marker."""
    return event.v == MARKER_VERSION and event.role == _ROLE


def marker_fields(operation: Operation, target: UUID) -> dict[str, Any]:
    """The body fields of a marker event (``content`` is ``"<operation> <record uuid>"``)."""
    return {
        "v": MARKER_VERSION,
        "role": _ROLE,
        "content": f"{operation} {target}",
        "in_progress": False,
        "status": "complete",
    }


def _parse(event: Message) -> tuple[str, UUID] | None:
    operation, _, target = event.content.partition(" ")
    try:
        return operation, UUID(target)
    except ValueError:
        return None


def message_id(message: Message) -> str:
    """The AG-UI id a record is read back under."""
    return message.agui_id or str(message.message_uuid)


@dataclass(eq=False)
class Tree:
    """The records of a chat as a tree: each one's parent, each parent's children (oldest
    first), and the active branch, a path from a root down."""

    parent: dict[UUID, UUID | None] = field(default_factory=dict)
    children: dict[UUID | None, list[UUID]] = field(default_factory=dict)
    active: list[UUID] = field(default_factory=list)

    def path(self, target: UUID) -> list[UUID]:
        """The branch through ``target``: its ancestors, it, and below it the newest child at
        each branch point."""
        up: list[UUID] = []
        current: UUID | None = target
        while current is not None and current not in up:
            up.append(current)
            current = self.parent.get(current)
        down: list[UUID] = []
        node = target
        while True:
            below = self.children.get(node)
            if not below or below[-1] in up or below[-1] in down:
                break
            node = below[-1]
            down.append(node)
        return [*reversed(up), *down]

    def siblings(self, uuid: UUID) -> list[UUID]:
        """The records sharing ``uuid``'s parent, it included, oldest first."""
        return self.children.get(self.parent.get(uuid), [uuid])


def fold(events: Iterable[Message]) -> Tree:
    """Replay ``events`` (messages and markers, in sequence order) into a ``Tree``.

    A marker naming a record it cannot act on (unknown, or a cut off the active branch) is
    skipped."""
    tree = Tree()
    active = tree.active
    for event in events:
        if is_marker(event):
            parsed = _parse(event)
            if parsed is None or parsed[1] not in tree.parent:
                continue
            operation, target = parsed
            if operation == "cut" and target in active:
                del active[active.index(target) :]
            elif operation == "activate":
                active[:] = tree.path(target)
            continue
        uuid = event.message_uuid
        if uuid in tree.parent:
            continue
        parent = active[-1] if active else None
        tree.parent[uuid] = parent
        tree.children.setdefault(parent, []).append(uuid)
        active.append(uuid)
    return tree


def branch_points(tree: Tree, messages: dict[UUID, Message]) -> dict[str, tuple[list[str], int]]:
    """For each active record that has siblings: ``(sibling AG-UI ids, its index)``."""
    points: dict[str, tuple[list[str], int]] = {}
    for uuid in tree.active:
        siblings = tree.siblings(uuid)
        if len(siblings) > 1:
            ids = [message_id(messages[s]) for s in siblings]
            points[message_id(messages[uuid])] = (ids, siblings.index(uuid))
    return points


def find(tree: Tree, messages: Sequence[Message], agui_id: str) -> UUID | None:
    """The record read back as ``agui_id``: the active one, else the newest."""
    matches = [m.message_uuid for m in messages if message_id(m) == agui_id]
    if not matches:
        return None
    active = set(tree.active)
    return next((m for m in reversed(matches) if m in active), matches[-1])


def replay(parents: Sequence[int | None], leaf: int | None) -> list[tuple[str, int]]:
    """The events that write a tree: ``("message", i)`` for record ``i`` (whose parent is
    ``parents[i]``, an earlier index or ``None``), with the ``("cut", j)`` and
    ``("activate", j)`` markers before it that make it follow its parent, and at the end those
    that make the branch ending at record ``leaf`` the active one."""
    tree = Tree()
    nodes = [UUID(int=i + 1) for i in range(len(parents))]
    events: list[tuple[str, int]] = []

    def follow(parent: int | None) -> None:
        active = tree.active
        node = None if parent is None else nodes[parent]
        if (active[-1] if active else None) == node:
            return
        if parent is not None and nodes[parent] not in active:
            events.append(("activate", parent))
            active[:] = tree.path(nodes[parent])
        position = 0 if node is None else active.index(node) + 1
        if position < len(active):
            events.append(("cut", active[position].int - 1))
            del active[position:]

    for index, parent in enumerate(parents):
        follow(parent)
        node = nodes[index]
        above = None if parent is None else nodes[parent]
        tree.parent[node] = above
        tree.children.setdefault(above, []).append(node)
        tree.active.append(node)
        events.append(("message", index))
    if leaf is not None:
        follow(leaf)
    return events
