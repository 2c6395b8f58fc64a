"""Branches kept inside the wire messages of a store that knows only ``load`` and ``save``.

The generic chat-history adapter (``persistence.repositories``) keeps a thread's other
branches in its stored messages: the main message (not a reasoning or tool message) of the
record before a branch point carries ``chatBranches``, ``{"index": k, "others": [tail,
...]}``: the other children's tails (each a list of wire messages, their own branch data
included), the active child being sibling ``k`` (siblings oldest first). The thread's first
main message carries ``chatRootBranches`` of the same shape for the other first messages.

``load`` returns the active branch with these keys; ``wire.strip_branches`` removes them
wherever messages leave the server. The rules are ``chat_history.tree``'s: ``flatten`` loads
such a list into a ``Tree`` (one node per wire message) and ``nest`` writes one back;
``branch_points_in`` and ``activate_in`` implement ``KeepsBranches`` with them, and the export
(``persistence.transfer``) reads and writes every branch through them. Branches nest at most
``MAX_BRANCH_DEPTH`` levels inside inactive branches; deeper ones are not kept.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from django_pydantic_agent.chat_history.records import Message
from django_pydantic_agent.chat_history.tree import BranchPoint, Tree
from django_pydantic_agent.persistence.wire import (
    BRANCHES_KEY,
    ROOT_BRANCHES_KEY,
    records_to_wire,
    strip_branches,
)

__all__ = [
    "MAX_BRANCH_DEPTH",
    "Flat",
    "activate_in",
    "branch_points_in",
    "branch_set",
    "branches_by_record",
    "flatten",
    "mark_main",
    "nest",
    "pruned",
    "records_with_branches",
    "split_branches",
    "with_sibling",
]

MAX_BRANCH_DEPTH: Final[int] = 32
"""How many levels of branches inside inactive branches a thread keeps."""

_KEYS: Final[frozenset[str]] = frozenset({BRANCHES_KEY, ROOT_BRANCHES_KEY})
_SIDE_ROLES: Final[frozenset[str]] = frozenset({"reasoning", "tool"})

Tail = list[Any]


def _is_main(message: Any) -> bool:
    return isinstance(message, Mapping) and message.get("role") not in _SIDE_ROLES


def _first_main(messages: Sequence[Any]) -> int | None:
    return next((i for i, m in enumerate(messages) if _is_main(m)), None)


def _tail_start(messages: Sequence[Any], main: int) -> int:
    """Where the child of the record whose main message is at ``main`` starts."""
    index = main + 1
    while index < len(messages) and isinstance(messages[index], Mapping):
        if messages[index].get("role") != "tool":
            break
        index += 1
    return index


def branch_set(value: Any) -> tuple[int, list[Tail]] | None:
    """``(index, others)`` of a stored branch value, or ``None`` when it is not one."""
    if not isinstance(value, Mapping):
        return None
    index, others = value.get("index"), value.get("others")
    if isinstance(index, bool) or not isinstance(index, int) or not isinstance(others, list):
        return None
    tails = [list(t) for t in others if isinstance(t, list) and _first_main(t) is not None]
    return min(max(index, 0), len(tails)), tails


def _set_json(index: int, others: list[Tail]) -> dict[str, Any]:
    return {"index": index, "others": others}


def split_branches(messages: Sequence[Any]) -> tuple[list[Any], dict[int, Any], Any]:
    """``(messages without branch keys, {position: chatBranches}, chatRootBranches)``."""
    by_position: dict[int, Any] = {}
    root: Any = None
    for index, message in enumerate(messages):
        if isinstance(message, Mapping) and BRANCHES_KEY in message:
            by_position[index] = message[BRANCHES_KEY]
        if isinstance(message, Mapping) and root is None:
            root = message.get(ROOT_BRANCHES_KEY)
    return strip_branches(messages), by_position, root


def mark_main(part: list[Any], keys: Mapping[str, Any]) -> bool:
    """Set ``keys`` on the main message of one record's wire messages ``part`` (in place);
    ``False`` when ``part`` has none."""
    main = _first_main(part)
    if main is None:
        return False
    part[main] = {**part[main], **keys}
    return True


def branches_by_record(
    indices: Mapping[uuid.UUID, Sequence[int]], by_position: Mapping[int, Any], root: Any
) -> dict[uuid.UUID | None, Any]:
    """The branch data ``split_branches`` found, by the record read from those positions
    (``WireRecords.indices``); ``None`` keys the other first messages."""
    found: dict[uuid.UUID | None, Any] = {}
    for message_uuid, positions in indices.items():
        value = next((by_position[p] for p in positions if p in by_position), None)
        if branch_set(value) is not None:
            found[message_uuid] = value
    if branch_set(root) is not None:
        found[None] = root
    return found


def records_with_branches(
    records: Sequence[Message],
    extras: Mapping[uuid.UUID, Mapping[str, Any]],
    originals: Mapping[uuid.UUID, tuple[str, Sequence[Mapping[str, Any]]]],
    branches: Mapping[uuid.UUID | None, Any],
    *,
    root: bool,
) -> list[dict[str, Any]]:
    """``records_to_wire`` of ``records``, each record's main message carrying its branch
    data from ``branches`` (and with ``root``, the first one the other first messages)."""
    if not branches:
        return records_to_wire(records, extras, originals)
    out: list[dict[str, Any]] = []
    for position, record in enumerate(records):
        part = records_to_wire([record], extras, originals)
        keys: dict[str, Any] = {}
        if record.message_uuid in branches:
            keys[BRANCHES_KEY] = branches[record.message_uuid]
        if root and position == 0 and None in branches:
            keys[ROOT_BRANCHES_KEY] = branches[None]
        if keys and not mark_main(part, keys):  # kept verbatim without a main message
            part = records_to_wire([record], extras)
            mark_main(part, keys)
        out.extend(part)
    return out


def _depth(messages: Sequence[Any]) -> int:
    """How many levels of branch data ``messages`` nest (0: none)."""
    deepest = 0
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        for key in _KEYS:
            found = branch_set(message.get(key))
            if found is not None:
                for tail in found[1]:
                    deepest = max(deepest, 1 + _depth(tail))
    return deepest


def pruned(messages: list[Any], levels: int) -> list[Any]:
    """``messages`` keeping at most ``levels`` levels of branch data inside them."""
    if _depth(messages) <= levels:
        return messages
    if levels <= 0:
        return strip_branches(messages)
    out: list[Any] = []
    for message in messages:
        if isinstance(message, Mapping) and not _KEYS.isdisjoint(message):
            message = dict(message)
            for key in _KEYS & message.keys():
                found = branch_set(message[key])
                if found is None:
                    del message[key]
                    continue
                index, others = found
                message[key] = _set_json(index, [pruned(t, levels - 1) for t in others])
        out.append(message)
    return out


def with_sibling(value: Any, tail: list[Any]) -> dict[str, Any]:
    """The branch value after a cut: ``tail`` (the active child's, if it has a main
    message) joins the others, and the child written next is the active, newest sibling."""
    index, others = branch_set(value) or (0, [])
    siblings = [*others[:index]]
    if _first_main(tail) is not None:
        siblings.append(pruned(tail, MAX_BRANCH_DEPTH - 1))
    siblings.extend(others[index:])
    return _set_json(len(siblings), siblings)


class Flat(NamedTuple):
    """Every message of every branch of a stored list: ``tree`` keys each by its index in
    ``messages`` (without branch keys), ``mains`` the id of the first main message from each
    on along its branch (what a branch point shows it as), ``None`` when there is none."""

    tree: Tree[int]
    messages: list[Any]
    mains: list[str | None]


def flatten(messages: Sequence[Any]) -> Flat:
    """The tree kept in ``messages`` (an active branch as ``load`` returns it): one node per
    wire message, each following the one before it on its branch, a branch's first message
    following the message before its branch point; siblings oldest first."""
    flat = Flat(Tree(), [], [])

    def tails(value: Any, parent: int | None, before: bool) -> None:
        found = branch_set(value)
        if found is not None:
            index, others = found
            for tail in others[:index] if before else others[index:]:
                line(tail, parent, False)

    def line(messages: Sequence[Any], parent: int | None, active: bool) -> None:
        mains: list[str | None] = []
        main: str | None = None
        for message in reversed(messages):
            if _is_main(message):
                main = message.get("id") if isinstance(message.get("id"), str) else None
            mains.append(main)
        mains.reverse()
        starts = {
            _tail_start(messages, i): m[BRANCHES_KEY]
            for i, m in enumerate(messages)
            if _is_main(m) and BRANCHES_KEY in m
        }
        previous = parent
        for index, message in enumerate(messages):
            value, follows = starts.pop(index, None), previous
            tails(value, follows, before=True)
            previous = len(flat.messages)
            flat.messages.extend(strip_branches([message]))
            flat.mains.append(mains[index])
            flat.tree.add(previous, follows)
            if active:
                flat.tree.active.append(previous)
            tails(value, follows, before=False)
        for value in starts.values():  # a branch point with no active child after it
            tails(value, previous, before=True)
            tails(value, previous, before=False)

    first = _first_main(messages)
    root = None if first is None else messages[first].get(ROOT_BRANCHES_KEY)
    tails(root, None, before=True)
    line(messages, None, True)
    tails(root, None, before=False)
    return flat


def nest(tree: Tree[int], wire_of: Callable[[int], list[Any]], active: Sequence[int]) -> list[Any]:
    """The stored list of ``tree`` whose active branch is ``active`` (continued down the
    newest child where it ends above a branch point): the active branch, each other branch
    kept inside the main message before its branch point, at most ``MAX_BRANCH_DEPTH``
    levels deep. ``wire_of(key)`` gives a node's wire messages (branch keys dropped)."""
    on = set(active)

    def pick(kids: list[int]) -> int:
        return next((i for i, kid in enumerate(kids) if kid in on), len(kids) - 1)

    def line(start: int, levels: int) -> list[Any]:
        out: list[Any] = []
        node: int | None = start
        while node is not None:
            out.extend(strip_branches(wire_of(node)))
            kids = tree.children.get(node, [])
            if not kids:
                break
            chosen = pick(kids)
            if len(kids) > 1 and levels > 0:
                others = [line(k, levels - 1) for i, k in enumerate(kids) if i != chosen]
                holder = _last_main(out)
                if holder is not None:
                    out[holder] = {**out[holder], BRANCHES_KEY: _set_json(chosen, others)}
            node = kids[chosen]
        return out

    roots = tree.children.get(None, [])
    if not roots:
        return []
    chosen = pick(roots)
    messages = line(roots[chosen], MAX_BRANCH_DEPTH)
    if len(roots) > 1:
        others = [line(k, MAX_BRANCH_DEPTH - 1) for i, k in enumerate(roots) if i != chosen]
        mark_main(messages, {ROOT_BRANCHES_KEY: _set_json(chosen, others)})
    return messages


def _last_main(messages: Sequence[Any]) -> int | None:
    return next((i for i in range(len(messages) - 1, -1, -1) if _is_main(messages[i])), None)


def branch_points_in(messages: Sequence[Any]) -> dict[str, BranchPoint]:
    """The branch points of the active branch ``messages`` (``KeepsBranches.branch_points``),
    each message named by the first main message of its branch."""
    flat = flatten(messages)
    return flat.tree.branch_points(flat.mains.__getitem__)


def activate_in(messages: Sequence[Any], message_id: str) -> tuple[bool, list[Any] | None]:
    """Make the branch through ``message_id`` active in ``messages`` (an active branch as
    ``load`` returns it), continued down the newest branch below it (``Tree.path``):
    ``(found, the messages to save or None when nothing changes)``."""
    flat = flatten(messages)

    def own_id(key: int) -> str | None:
        message = flat.messages[key]
        return message.get("id") if isinstance(message, Mapping) else None

    target = flat.tree.find(message_id, own_id)
    if target is None:
        return False, None
    path = flat.tree.path(target)
    if path == flat.tree.active:
        return True, None
    return True, nest(flat.tree, lambda key: [flat.messages[key]], path)
