"""A thread's messages as the admin lists them: its tree of branches, depth first.

A thread that was edited or regenerated has several rows at one position, on different
branches (``contrib.store.branches``). Listed by position they repeat (0, 1, 2, 0, 1, 1, 2, 2)
and nothing says which belong together. ``tree_order`` lists them as the tree they form: each
row after its parent; where a row has several children (the versions an edit or a regenerate
made), each child's branch one level further in, the oldest first. Each row gets a
``TreePlace``: how far in, which version of how many, and whether it is on the active branch.
A thread that never branched keeps its order and no indentation.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from django_pydantic_agent.contrib.store.branches import tree

if TYPE_CHECKING:
    from django_pydantic_agent.contrib.store.models import StoredMessage

__all__ = ["PLACE_ATTR", "TreePlace", "tree_order"]

#: The attribute ``tree_order`` sets on each row: its ``TreePlace``.
PLACE_ATTR: Final[str] = "_dpa_tree_place"


@dataclass(frozen=True, kw_only=True)
class TreePlace:
    """Where a row sits in its thread's tree.

    ``depth`` is how many branch points above it started a branch it is on (its indentation);
    ``version`` and ``versions`` are its number among its siblings (1-based, oldest first) and
    their count, both ``1`` for a row that has none; ``active`` is whether it is on the
    thread's active branch (what ``load`` returns).
    """

    depth: int = 0
    version: int = 1
    versions: int = 1
    active: bool = True


def tree_order(rows: Iterable[StoredMessage]) -> list[StoredMessage]:
    """``rows`` (one thread's messages) depth first, each with its ``TreePlace`` set as
    ``PLACE_ATTR``. Rows the tree does not reach (none, unless a parent points in a circle)
    follow at the end, unindented."""
    found = sorted(rows, key=lambda row: (row.branch, row.position, row.pk))
    by_uuid = {row.message_uuid: row for row in found}
    thread = tree(found)
    active = set(thread.active)
    ordered: list[StoredMessage] = []
    roots = thread.children.get(None, [])
    top = 1 if len(roots) > 1 else 0  # a first message edited: its versions are branches too
    stack = [(key, top, index, len(roots)) for index, key in reversed(list(enumerate(roots)))]
    seen: set[uuid.UUID] = set()
    while stack:
        key, depth, index, count = stack.pop()
        if key in seen:
            continue
        seen.add(key)
        row = by_uuid[key]
        place = TreePlace(depth=depth, version=index + 1, versions=count, active=key in active)
        setattr(row, PLACE_ATTR, place)
        ordered.append(row)
        children = thread.children.get(key, [])
        inner = depth + 1 if len(children) > 1 else depth
        stack.extend(
            (child, inner, number, len(children))
            for number, child in reversed(list(enumerate(children)))
        )
    for row in found:
        if row.message_uuid not in seen:
            setattr(row, PLACE_ATTR, TreePlace(active=row.message_uuid in active))
            ordered.append(row)
    return ordered
