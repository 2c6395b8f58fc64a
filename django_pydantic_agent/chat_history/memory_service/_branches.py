"""A chat's branches on the append-only Memory Service: marker events and the fold over them.

Each message event follows the tip of the active branch as it was when the event was written.
A *marker* (a ``message`` event of body version ``MARKER_VERSION``, which readers of message
bodies skip) moves the tip:

- ``cut <uuid>``: the record and the records after it leave the active branch (kept); the next
  message follows the record before it, so the old and the new record are siblings;
- ``activate <uuid>``: the branch through the record becomes the active one, continued down the
  newest branch at each branch point below it.

``fold`` replays a chat's events in sequence order into the one ``chat_history.tree.Tree``
(whose rules answer the rest). A chat without markers is one branch, its events in order, so a
reader needs the markers only when there are any: a tail read (``lastN``) that holds none ends
on the active branch, one that holds some is listed whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal
from uuid import UUID

from django_pydantic_agent.chat_history.records import Message
from django_pydantic_agent.chat_history.tree import Tree

__all__ = [
    "MARKER_VERSION",
    "Operation",
    "fold",
    "is_marker",
    "marker_fields",
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


def fold(events: Iterable[Message]) -> Tree[UUID]:
    """Replay ``events`` (messages and markers, in sequence order) into a ``Tree``.

    A marker naming a record it cannot act on (unknown, or a cut off the active branch) is
    skipped."""
    tree: Tree[UUID] = Tree()
    for event in events:
        if is_marker(event):
            parsed = _parse(event)
            if parsed is not None and parsed[1] in tree.parent:
                operation, target = parsed
                if operation == "cut":
                    tree.cut(target)
                elif operation == "activate":
                    tree.activate(target)
        elif event.message_uuid not in tree.parent:
            tree.grow(event.message_uuid)  # no id: readers name records as they are now
    return tree


def replay(parents: Sequence[int | None], leaf: int | None) -> list[tuple[str, int]]:
    """The events that write a tree: ``("message", i)`` for record ``i`` (whose parent is
    ``parents[i]``, an earlier index or ``None``), with the ``("cut", j)`` and
    ``("activate", j)`` markers before it that make it follow its parent, and at the end those
    that make the branch ending at record ``leaf`` the active one."""
    tree: Tree[int] = Tree()
    events: list[tuple[str, int]] = []

    def follow(parent: int | None) -> None:
        active = tree.active
        if (active[-1] if active else None) == parent:
            return
        if parent is not None and parent not in active:
            events.append(("activate", parent))
            tree.activate(parent)
        position = 0 if parent is None else tree.active.index(parent) + 1
        if position < len(tree.active):
            events.append(("cut", tree.active[position]))
            tree.cut(tree.active[position])

    for index, parent in enumerate(parents):
        follow(parent)
        tree.grow(index)
        events.append(("message", index))
    if leaf is not None:
        follow(leaf)
    return events
