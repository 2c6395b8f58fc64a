"""What a ``DefaultConversationStore.save`` writes: the rows from the first message that changed.

``plan_save(row, messages, chat_uuid, thread_id)`` compares the posted messages with the stored
rows (most saves without reading a row, see below) and checks each message it will write
(``UnstorableMessageError``) before anything is written; ``Plan.write`` then writes them.

This module imports no models at import time (see ``stores``).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import pickle
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import router

from django_pydantic_agent.contrib.store import branches, rows
from django_pydantic_agent.persistence import UnstorableMessageError

if TYPE_CHECKING:
    from django_pydantic_agent.contrib.store.models import StoredConversation

__all__ = ["Plan", "plan_save"]

_FEW = 8


def _json_or_none(values: list[Any]) -> str | None:
    try:
        return json.dumps(values)
    except (TypeError, ValueError):
        return None


def _unstorable_reason(message: Any) -> str | None:
    """Why ``message`` cannot be stored as JSON on every database, or ``None`` when it can.

    ``None`` would be SQL NULL; PostgreSQL's ``text`` and ``jsonb`` refuse the NUL character;
    JSON has no NaN or infinity. Walks iteratively, so deep nesting cannot exhaust the stack.
    """
    if message is None:
        return "is null"
    stack = [message]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return "contains a NUL character (\\u0000)"
        elif isinstance(value, float):
            if not math.isfinite(value):
                return f"contains the non-finite number {value!r}"
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
    return None


def _check_message(index: int, message: Any) -> None:
    reason = _unstorable_reason(message)
    if reason is not None:
        raise UnstorableMessageError(
            f"Message {index} of the conversation {reason}, which cannot be stored; nothing "
            "was saved. Remove or encode that value (drop NUL characters, send finite numbers, "
            "send each message as a JSON object) and save again.",
            index=index,
        )


# What changed ---------------------------------------------------------------------------------
#
# A save reads the posted list into records (``rows.saved_records``) and writes the rows from the
# first one that differs from what is stored. ``StoredConversation.save_state`` lets most saves
# skip reading the rows: after a save it is ``"<k>:<p>:<head>:<tail>:<links>"``, where the last row
# (at position ``p``) holds messages ``k`` onwards, ``head`` hashes the first ``k`` messages and
# ``tail`` the last row's, each message as its pickle (``_items``), and ``<links>`` is ``0`` when
# the save proved the thread quotes no attachment. A later save whose first ``k`` messages hash to
# ``head`` changed nothing there: only messages ``k`` onwards are read into records, and the last
# row is rewritten only when its messages changed, so appending or growing a message reads no row.
# A message's bytes do not depend on the messages before it, so the next head extends the hash
# state instead of starting over. A list pickle cannot encode, a false mismatch (keys in another
# order, a dict subclass), or a tail that answers a tool call of an earlier row takes the full
# comparison. Any other write to a thread's rows (a run, the strip command) clears the state, and
# the next save compares every row (one read).

_PROTOCOL = 3  # no frames (protocol 4 cuts the bytes into frames by length)


def _pickle(value: Any) -> bytes:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, _PROTOCOL)
    # Fast mode keeps no memo, so equal values give equal bytes wherever they stand; it beats
    # ``marshal`` on the head every save hashes (``python -m bench.save_cpu``).
    pickler.fast = True
    pickler.dump(value)
    return buffer.getvalue()


def _items(messages: Sequence[Any]) -> bytes:
    """The bytes of the items of ``messages``, one after the other (``ValueError`` if one
    cannot be encoded).

    Each item as fast-mode pickle writes it: a tuple of four or more items is
    ``PROTO 3 MARK <items> TUPLE STOP``, a single item ``PROTO 3 <item> STOP``. The bytes only
    ever name a value; they are never unpickled.
    """
    try:
        if len(messages) > 3:
            return _pickle(tuple(messages))[3:-2]
        return b"".join(_pickle(message)[2:-1] for message in messages)
    except Exception as error:  # whatever pickle refuses is compared in full
        raise ValueError(f"{type(error).__name__}: {error}") from error


def _hash(data: bytes) -> Any:
    # SHA-256: hashed in hardware where the CPU can, faster than BLAKE2b on the head every
    # growing save hashes (``python -m bench.save_cpu``); cut to 128 bits by ``_hex``.
    return hashlib.sha256(data)


def _hex(state: Any) -> str:
    return str(state.hexdigest()[:32])


@dataclass
class Plan:
    """The writes of one save: rows to drop, the last row to rewrite, rows to insert."""

    delete_from: int | None = None
    """Drop the rows at this position and after."""
    updates: list[tuple[int, rows.SavedRecord]] = field(default_factory=list)
    """Rewrite the row at each position with this record (of the row's uuid)."""
    inserts: list[tuple[int, rows.SavedRecord]] = field(default_factory=list)
    state: str = ""
    quotes: bool = True
    """Whether the messages may quote attachments (``False``: proven they quote none)."""

    def written(self) -> list[rows.SavedRecord]:
        """The records this save writes (rewritten and inserted rows)."""
        return [s for _, s in (*self.updates, *self.inserts)]

    def write(self, conversation: StoredConversation) -> None:
        """Apply the plan to ``conversation``'s active rows (inside the saving transaction)."""
        from django_pydantic_agent.contrib.store.models import StoredMessage

        using = router.db_for_write(StoredMessage)
        branched = conversation.branches > 0
        # Built where used: an append (most saves) needs no queryset (``bench.save_cpu``).
        where = conversation.message_rows.filter
        if self.delete_from is not None:
            if branched:  # the branches forked below the dropped rows go with them
                found = branches.nodes(conversation.pk)
                dropped = [
                    n.message_uuid for n in found if n.active and n.position >= self.delete_from
                ]
                gone = branches.tree(found).descendants(dropped)
                where(message_uuid__in=list(gone)).delete()
            else:
                where(active=True, position__gte=self.delete_from).delete()
        for position, saved in self.updates:
            where(active=True, position=position).update(
                message_uuid=saved.message_uuid,
                wire=rows.stored_wire(saved),
                **saved.columns,
            )
        parent = None
        if branched and self.inserts:
            parent = (
                where(active=True, position__lt=self.inserts[0][0])
                .order_by("-position")
                .values_list("message_uuid", flat=True)
                .first()
            )
        rows.insert(
            StoredMessage,
            [(conversation.pk, p, s) for p, s in self.inserts],
            using=using,
            branch=conversation.active_branch,
            parent=parent,
        )


def _state(head: Any, quotes: bool, last: rows.SavedRecord, position: int) -> tuple[str, bool]:
    """``save_state`` after a save whose last row (at ``position``) holds ``last``, and whether
    the messages may quote attachments (``quotes``: those before ``last``'s may).

    ``head`` hashes the messages before ``last``'s.
    """
    try:
        tail_bytes = _items(last.wire)
    except ValueError:
        return "", True
    quotes = quotes or b"attachments" in tail_bytes
    tail = _hex(_hash(tail_bytes))
    return f"{last.index}:{position}:{_hex(head)}:{tail}:{int(quotes)}", quotes


def _fast_plan(row: StoredConversation, messages: list[Any]) -> Plan | None:
    parts = row.save_state.split(":")
    if len(parts) != 5 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    first, position, head_hash, tail_hash = int(parts[0]), int(parts[1]), parts[2], parts[3]
    if len(messages) <= first:
        return None
    try:
        head_bytes = _items(messages[:first])
        head = _hash(head_bytes)
        if _hex(head) != head_hash:
            return None
        saved = rows.saved_records(
            messages[first:],
            chat_uuid=row.chat_uuid,
            salt=row.thread_id,
            start=first,
            exact=True,
        )
        if not saved:
            return None
        plan = Plan()
        first_bytes = _items(saved[0].wire)
        if _hex(_hash(first_bytes)) != tail_hash:
            plan.updates.append((position, saved[0]))
        plan.inserts = [(position + i, s) for i, s in enumerate(saved[1:], 1)]
        quotes = b"attachments" in head_bytes
        for s in saved[:-1]:
            item_bytes = first_bytes if s is saved[0] else _items(s.wire)
            head.update(item_bytes)
            quotes = quotes or b"attachments" in item_bytes
    except ValueError:
        return None
    plan.state, plan.quotes = _state(head, quotes, saved[-1], position + len(saved) - 1)
    return plan


def _full_plan(
    row: StoredConversation | None, messages: list[Any], chat_uuid: uuid.UUID, thread_id: str
) -> Plan:
    saved = rows.saved_records(messages, chat_uuid=chat_uuid, salt=thread_id) or []
    stored: list[tuple[int, uuid.UUID, Any]] = []
    if row is not None:
        columns = ("position", "message_uuid", "wire", "message_id", "role", "content")
        stored = [
            (position, message_uuid, rows.wire_of(wire, message_id, role, content))
            for position, message_uuid, wire, message_id, role, content in (
                row.message_rows.filter(active=True).order_by("position").values_list(*columns)
            )
        ]
    plan = Plan()
    same = 0  # rows of the same records (changed ones are rewritten in place)
    for (position, message_uuid, wire), item in zip(stored, saved, strict=False):
        if message_uuid != item.message_uuid:
            break
        if wire is None or wire != item.wire:
            plan.updates.append((position, item))
        same += 1
    if same < len(stored):
        plan.delete_from = stored[same][0]
    base = stored[same - 1][0] + 1 if same else 0
    plan.inserts = [(base + i, s) for i, s in enumerate(saved[same:])]
    if not saved:
        plan.quotes = False
        return plan
    last = base + len(saved) - same - 1 if same < len(saved) else stored[same - 1][0]
    try:
        head_bytes = _items(messages[: saved[-1].index])
    except ValueError:
        return plan
    quotes = b"attachments" in head_bytes
    plan.state, plan.quotes = _state(_hash(head_bytes), quotes, saved[-1], last)
    return plan


def plan_save(
    row: StoredConversation | None, messages: list[Any], chat_uuid: uuid.UUID, thread_id: str
) -> Plan:
    """What saving ``messages`` over ``row``'s messages writes.

    Checks each message it writes (``UnstorableMessageError``) before anything is written.
    """
    plan = None if row is None else _fast_plan(row, messages)
    if plan is None:
        plan = _full_plan(row, messages, chat_uuid, thread_id)
    # A plain record's message is three strings (``SavedRecord.plain``): only a NUL can make
    # it unstorable, so it is checked for one, not encoded (``python -m bench.save_cpu``).
    indices = [
        i
        for s in plan.written()
        if not s.plain or _has_nul(s.wire[0])
        for i in range(s.index, s.index + len(s.wire))
    ]
    if len(indices) > _FEW:  # one encoding of them all proves most lists clean
        _check_messages(messages, indices, _json_or_none([messages[i] for i in indices]))
    else:
        _check_messages(messages, indices, None)
    return plan


def _has_nul(message: dict[str, str]) -> bool:
    return "\x00" in message["id"] or "\x00" in message["content"]


def _check_messages(messages: list[Any], positions: list[int], text: str | None) -> None:
    """``_check_message`` for each position; skipped when ``text`` (their JSON) proves it."""
    clean = text is not None and not any(w in text for w in ("\\u0000", "NaN", "Infinity"))
    if clean and not any(messages[p] is None for p in positions):
        return
    for position in positions:
        _check_message(position, messages[position])
