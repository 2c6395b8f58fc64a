"""The message tree of a thread: branches, siblings, and which rows an activation flips.

A thread's ``StoredMessage`` rows form a tree. Each row was written on a *branch* (a number;
``0`` until the thread first branches) and follows a parent: its ``parent_uuid`` when set,
else the row before it (by position) on its own branch, else none (a root). A branch starts
where a user message is edited or an answer regenerated (``cut``): the active rows from that
position on leave the active branch, are kept, and the rows written next start a new branch
at the same position, so the old and the new row are *siblings* (the same parent).

The ``active`` rows are one path from a root down: what ``load`` returns and what a run
reads. ``activate`` makes another path active: the one through a given row, continued down
the newest branch at each branch point below it. Everything here works on ``Node`` tuples
read by one query of light columns (``nodes``); the writes are a bounded set of rows, in the
caller's transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Node",
    "Tree",
    "activate",
    "cut",
    "inactive_quotes",
    "nodes",
]


@dataclass(frozen=True, slots=True)
class Node:
    """The light columns of one message row."""

    pk: int
    message_uuid: uuid.UUID
    message_id: str
    position: int
    branch: int
    parent_uuid: uuid.UUID | None
    active: bool


_NODE_COLUMNS = (
    "pk",
    "message_uuid",
    "message_id",
    "position",
    "branch",
    "parent_uuid",
    "active",
)


def nodes(conversation_id: int) -> list[Node]:
    """The ``Node`` of every row of a thread, by branch then position (one query)."""
    from django_pydantic_agent.contrib.store.models import StoredMessage

    found = StoredMessage.objects.filter(conversation_id=conversation_id).order_by(
        "branch", "position", "pk"
    )
    return [Node(*values) for values in found.values_list(*_NODE_COLUMNS)]


class Tree:
    """The parent and children of each row of one thread (from ``nodes``)."""

    def __init__(self, found: Iterable[Node]) -> None:
        self.nodes = list(found)
        self.by_uuid = {node.message_uuid: node for node in self.nodes}
        self.parent: dict[uuid.UUID, uuid.UUID | None] = {}
        self.children: dict[uuid.UUID | None, list[Node]] = {}
        previous: Node | None = None
        for node in self.nodes:  # by branch, then position
            same_branch = previous is not None and previous.branch == node.branch
            if node.parent_uuid is not None and node.parent_uuid in self.by_uuid:
                parent: uuid.UUID | None = node.parent_uuid
            elif node.parent_uuid is None and same_branch:
                assert previous is not None
                parent = previous.message_uuid
            else:
                parent = None
            self.parent[node.message_uuid] = parent
            self.children.setdefault(parent, []).append(node)
            previous = node
        for children in self.children.values():
            children.sort(key=lambda n: (n.branch, n.pk))

    def siblings(self, node: Node) -> list[Node]:
        """The rows sharing ``node``'s parent, ``node`` included, oldest branch first."""
        return self.children.get(self.parent[node.message_uuid], [node])

    def find(self, message_id: str) -> Node | None:
        """The row with AG-UI id ``message_id``: the active one, else the newest."""
        matches = [n for n in self.nodes if n.message_id == message_id]
        if not matches:
            return None
        active = [n for n in matches if n.active]
        return (active or sorted(matches, key=lambda n: n.pk))[-1]

    def path(self, target: Node) -> list[Node]:
        """The path through ``target``: its ancestors, it, and below it the newest branch at
        each branch point (a leaf, so the last row of its branch)."""
        up: list[Node] = []
        current: uuid.UUID | None = target.message_uuid
        seen: set[uuid.UUID] = set()
        while current is not None and current not in seen:
            seen.add(current)
            up.append(self.by_uuid[current])
            current = self.parent[current]
        down: list[Node] = []
        node, below = target, set()
        while node.message_uuid not in below:
            below.add(node.message_uuid)
            following = self.children.get(node.message_uuid)
            if not following:
                break
            node = following[-1]  # the newest branch below
            down.append(node)
        return [*reversed(up), *down]

    def descendants(self, roots: Iterable[uuid.UUID]) -> set[uuid.UUID]:
        """``roots`` and every row below them."""
        found: set[uuid.UUID] = set()
        stack = list(roots)
        while stack:
            current = stack.pop()
            if current in found:
                continue
            found.add(current)
            stack.extend(c.message_uuid for c in self.children.get(current, []))
        return found

    def branch_points(self) -> dict[str, tuple[list[str], int]]:
        """For each active row that has siblings: ``(sibling AG-UI ids, its index)``."""
        points: dict[str, tuple[list[str], int]] = {}
        for node in self.nodes:
            if not node.active:
                continue
            siblings = self.siblings(node)
            if len(siblings) > 1:
                ids = [s.message_id for s in siblings]
                points[node.message_id] = (ids, siblings.index(node))
        return points


def _flip(conversation_id: int, off: Sequence[int], on: Sequence[int]) -> None:
    """Deactivate the rows ``off``, then activate ``on`` (positions stay unique among active)."""
    from django_pydantic_agent.contrib.store.models import StoredMessage

    rows = StoredMessage.objects.filter(conversation_id=conversation_id)
    if off:
        rows.filter(pk__in=list(off)).update(active=False)
    if on:
        rows.filter(pk__in=list(on)).update(active=True)


def activate(conversation: Any, message_id: str) -> bool:
    """Make the path through the row with AG-UI id ``message_id`` the thread's active branch.

    ``conversation`` is the ``StoredConversation``, locked by the caller's transaction. Flips
    only the rows whose state changes, sets ``active_branch`` and clears ``save_state``.
    Returns ``False`` (nothing written) when the thread has no such row.
    """
    from django_pydantic_agent.contrib.store.models import StoredConversation

    tree = Tree(nodes(conversation.pk))
    target = tree.find(message_id)
    if target is None:
        return False
    path = tree.path(target)
    keep = {n.pk for n in path}
    off = [n.pk for n in tree.nodes if n.active and n.pk not in keep]
    on = [n.pk for n in path if not n.active]
    _flip(conversation.pk, off, on)
    tip = path[-1].branch
    StoredConversation.objects.filter(pk=conversation.pk).update(active_branch=tip, save_state="")
    return True


def cut(conversation_id: int, position: int) -> tuple[int, uuid.UUID | None]:
    """Start a new branch at ``position``: the active rows from there on leave the active
    branch (kept). Returns the new branch number and the parent the branch's first row
    follows (the active row before ``position``, or ``None``). Call it inside the
    transaction that holds the thread's row locked.
    """
    from django.db.models import Max

    from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage

    rows = StoredMessage.objects.filter(conversation_id=conversation_id)
    rows.filter(active=True, position__gte=position).update(active=False)
    parent = (
        rows.filter(active=True, position__lt=position)
        .order_by("-position")
        .values_list("message_uuid", flat=True)
        .first()
    )
    thread = StoredConversation.objects.filter(pk=conversation_id)
    highest = thread.values_list("branches", flat=True).first() or 0
    top = rows.aggregate(top=Max("branch"))["top"] or 0
    branch = max(highest, top) + 1
    thread.update(branches=branch, active_branch=branch, save_state="")
    return branch, parent


def inactive_quotes(conversation_id: int) -> list[Any]:
    """What the rows off the active branch may quote attachments in (their wire messages and
    records' extra keys), so reconciling the active branch keeps the other branches' files."""
    from django_pydantic_agent.contrib.store.models import StoredMessage

    quoted: list[Any] = []
    found = StoredMessage.objects.filter(conversation_id=conversation_id, active=False)
    pairs: list[tuple[Any, Any]] = list(found.values_list("record", "wire"))
    for record, wire in pairs:
        quoted.append((record or {}).get("wire_extra") or {})
        quoted.extend(wire or [])
    return quoted
