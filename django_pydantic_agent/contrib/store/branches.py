"""The message tree of a thread: branches, siblings, and which rows an activation flips.

A thread's ``StoredMessage`` rows form a tree. Each row was written on a *branch* (a number;
``0`` until the thread first branches) and follows a parent: its ``parent_uuid`` when set,
else the row before it (by position) on its own branch, else none (a root). A branch starts
where a user message is edited or an answer regenerated (``cut``): the active rows from that
position on leave the active branch, are kept, and the rows written next start a new branch
at the same position, so the old and the new row are *siblings* (the same parent).

The ``active`` rows are one path from a root down: what ``load`` returns and what a run
reads. The rules are ``chat_history.tree``'s: this module loads the rows' parents and order
into a ``Tree`` (``nodes``, one query of light columns; ``tree``) and writes back what it
answers: ``activate`` flips the rows whose state changes, in the caller's transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from django_pydantic_agent.chat_history.tree import Tree

__all__ = [
    "activate",
    "cut",
    "inactive_quotes",
    "nodes",
    "tree",
]


_NODE_COLUMNS = ("pk", "message_uuid", "message_id", "position", "branch", "parent_uuid", "active")


def nodes(conversation_id: int) -> list[Any]:
    """The light columns of every row of a thread (named tuples of ``pk``, ``message_uuid``,
    ``message_id``, ``position``, ``branch``, ``parent_uuid``, ``active``), by branch then
    position (one query)."""
    from django_pydantic_agent.contrib.store.models import StoredMessage

    found = StoredMessage.objects.filter(conversation_id=conversation_id).order_by(
        "branch", "position", "pk"
    )
    return list(found.values_list(*_NODE_COLUMNS, named=True))


def tree(found: Iterable[Any]) -> Tree[uuid.UUID]:
    """A thread's rows (``nodes``, or the rows themselves; by branch, then position) loaded
    into the one ``Tree``: each follows its ``parent_uuid`` when set, else the row before it
    on its own branch; siblings oldest branch first."""
    rows = list(found)
    known = {node.message_uuid for node in rows}
    parents: dict[uuid.UUID, uuid.UUID | None] = {}
    previous: Any = None
    for node in rows:
        if node.parent_uuid is not None:
            parents[node.message_uuid] = node.parent_uuid if node.parent_uuid in known else None
        elif previous is not None and previous.branch == node.branch:
            parents[node.message_uuid] = previous.message_uuid
        else:
            parents[node.message_uuid] = None
        previous = node
    rows.sort(key=lambda n: (n.branch, n.pk))
    return Tree.of((n.message_uuid, parents[n.message_uuid], n.message_id, n.active) for n in rows)


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

    found = nodes(conversation.pk)
    thread = tree(found)
    target = thread.find(message_id)
    if target is None:
        return False
    path = thread.path(target)
    keep = set(path)
    off = [n.pk for n in found if n.active and n.message_uuid not in keep]
    on = [n.pk for n in found if not n.active and n.message_uuid in keep]
    _flip(conversation.pk, off, on)
    tip = next(n.branch for n in found if n.message_uuid == path[-1])
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
