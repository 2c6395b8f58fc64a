"""Chat-history repositories over ``StoredConversation`` / ``StoredMessage`` rows.

``OrmChatRepository`` and ``OrmMessageRepository`` implement ``ChatRepositoryLike`` and
``MessageRepositoryLike`` on the tables behind ``DefaultConversationStore``, so a run persists
incrementally into the thread the store lists and loads:

- one ``StoredMessage`` row per ``chat_history.Message`` record (a *record row*), its tool
  calls and reasoning steps in the row's ``tool_calls`` / ``reasonings`` JSON;
- a write is queued in memory and each ``transaction()`` scope is applied as **one** database
  transaction in **one** ``sync_to_async`` call (a write outside a scope is its own scope);
- a new message is one ``INSERT``; a content delta is one ``UPDATE ... SET content =
  LEFT(content, offset) || delta`` (O(delta), the stored prefix is never resent);
- return values come from the records the pair already holds (created, or read once when the
  run started), so nothing re-reads the thread during a run;
- every query is scoped to the owner the pair was opened for (``owner_id``): a stranger's
  thread is invisible. Without an owner (tests, admin tools) the owner is ``str(user_uuid)``.

A thread deleted while a run writes to it stays deleted: each flush locks the thread's row
first, and the writes of a thread that is gone are dropped (later updates answer ``None``,
creates raise ``ValueError``).

Rows are built by ``contrib.store.rows``, as ``DefaultConversationStore.save`` builds them; a
run's first write to a saved record clears the row's ``wire``, so ``load`` renders the record.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final
from uuid import UUID

from django.db import IntegrityError
from django.db.models import OuterRef, Subquery, Value
from django.db.models.functions import Concat, Left
from django.utils import timezone

from django_pydantic_agent.chat_history.errors import ChatNotFoundError
from django_pydantic_agent.chat_history.keys import (
    chat_deduplication_key,
    emitter_for_role,
    participant_id,
)
from django_pydantic_agent.chat_history.records import (
    Chat,
    ChatCreate,
    Message,
    MessageCreate,
    MessageUpdate,
    ToolCall,
    apply_update,
    detached,
    nested_record_class,
    update_fields,
)
from django_pydantic_agent.chat_history.repositories import NestedRecordWrites
from django_pydantic_agent.chat_history.summaries import StoredSummary
from django_pydantic_agent.chat_history.transactions import NestedTransaction, TaskScope
from django_pydantic_agent.contrib.store import rows as rows_
from django_pydantic_agent.contrib.store.deletion import delete_conversations
from django_pydantic_agent.contrib.store.links import (
    attachment_ids_in,
    reconcile_conversation_attachments,
)
from django_pydantic_agent.contrib.store.quotas import MAX_KEY, lock_owner, refuse_new_thread
from django_pydantic_agent.persistence import derive_preview
from django_pydantic_agent.persistence.derive import normalize_title
from django_pydantic_agent.persistence.outages import unit_of_work
from django_pydantic_agent.persistence.owner import owner_user_uuid
from django_pydantic_agent.persistence.transactions import write_transaction

if TYPE_CHECKING:
    from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage

__all__ = [
    "OWNER_NAMESPACE",
    "OrmChatRepository",
    "OrmMessageRepository",
    "owner_uuid",
]

logger = logging.getLogger("django_pydantic_agent.contrib.store")

OWNER_NAMESPACE: Final[UUID] = UUID("6f1c2f0e-5a43-4f0e-9d38-2f5b8a1c7e11")
"""The uuid5 namespace of the ids derived for wire rows."""


def owner_uuid(owner_id: str) -> UUID:
    """The ``chat_history`` user uuid of a store owner id.

    ``persistence.owner_user_uuid``, the mapping every store shares, except that an owner id
    which already is a uuid (a chat created through unscoped repositories for a ``user_uuid``)
    maps to itself.
    """
    try:
        return UUID(owner_id)
    except ValueError:
        return owner_user_uuid(owner_id)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


# Rows → records -----------------------------------------------------------------------------


def _chat(row: StoredConversation) -> Chat:
    user = owner_uuid(row.owner_id)
    chat = Chat(
        thread_id=row.thread_id,
        dedup_key=chat_deduplication_key(user, row.thread_id),
        name=row.title,
        chat_uuid=row.chat_uuid,
        user_uuid=user,
    )
    chat._participants = [participant_id(user)]
    chat._id = str(row.pk)
    chat._created_at = row.created_at.isoformat()
    return chat


def _newest(rows: Any, following: int, limit: int) -> list[Any]:
    """The newest ``limit`` of ``rows`` (one thread's active rows), oldest first.

    Bounded by position on both sides where the thread's rows from ``following - 2 * limit``
    (``following``: the newest position known, plus one) hold ``limit`` of them: below by
    that number, above by the thread's newest position (a subquery, so rows written since
    ``following`` was read are in). Unbounded, ``ORDER BY position DESC LIMIT`` was planned
    by PostgreSQL as a scan of every row of the thread and a sort whenever its statistics
    took the thread for a small one (``python -m bench --suite run-path``); bounded below
    only, as a scan of the thread's rows through the
    ``conversation`` index when they knew its size (a table-wide histogram makes ``position
    >= n`` look unselective). A range whose upper end is unknown when planning is estimated
    narrow, so the ``(conversation, position)`` index answers it, about ``2 * limit`` rows
    whatever the statistics. Positions have gaps (rows of other branches keep theirs): fewer
    rows than ``limit`` in the range, with rows below it, take the unbounded query.
    """
    floor = following - 2 * limit
    newest = rows.order_by("-position")
    if floor > 0:
        top = Subquery(newest.values("position")[:1])
        found = list(newest.filter(position__gte=floor, position__lte=top)[:limit])
        if len(found) == limit:
            found.reverse()
            return found
    found = list(newest[:limit])
    found.reverse()
    return found


# Repositories -------------------------------------------------------------------------------


@dataclass
class _ChatState:
    pk: int
    chat_uuid: UUID
    owner_id: str
    next_position: int
    deleted: bool = False
    branch: int = 0
    """The branch new rows join (read with the thread's lock before inserting)."""
    tip: UUID | None = None
    """The active branch's last row, which the next new row follows."""


def _as_uuid(value: Any) -> UUID | None:
    """A uuid column read through a ``Subquery`` (SQLite gives its text)."""
    if value is None or isinstance(value, UUID):
        return value
    text = str(value)
    return UUID(text) if len(text) != 32 else UUID(hex=text)


@dataclass
class _Pending:
    """One record row touched by the current scope."""

    message_uuid: UUID
    chat_uuid: UUID
    created: bool = False
    fields: set[str] = field(default_factory=set)
    content_offset: int | None = None
    """The stored length the queued content deltas follow (``None``: full content)."""
    full_content: bool = False


#: What a rollback restores: the cached records, their parents, the chat states.
_Snapshot = tuple[dict[UUID, Message], dict[UUID, UUID], dict[UUID, _ChatState]]


class OrmChatRepository:
    """A ``ChatRepositoryLike`` over ``StoredConversation`` rows, scoped to one owner.

    ``owner_id`` is the store owner every query filters by (``None``: the owner of a chat is
    ``str(user_uuid)``, for tests and tools). ``max_threads_per_owner`` refuses a new thread
    with ``StoreLimitError`` like ``DefaultConversationStore.save``. ``user_uuid`` is the
    ``chat_history`` user id of the owner (pass it to ``AGUIStorageAgent``).
    """

    def __init__(
        self, *, owner_id: str | None = None, max_threads_per_owner: int | None = None
    ) -> None:
        self.owner_id = owner_id
        self.max_threads_per_owner = max_threads_per_owner
        self._states: dict[UUID, _ChatState] = {}

    @property
    def user_uuid(self) -> UUID | None:
        """The user uuid of ``owner_id`` (``None`` for an unscoped repository)."""
        return None if self.owner_id is None else owner_uuid(self.owner_id)

    def _owner_for(self, user_uuid: UUID | None) -> str | None:
        """The owner id a ``user_uuid`` stands for here, or ``None`` when it is not ours."""
        if user_uuid is None:
            return None
        if self.owner_id is None:
            return str(user_uuid)
        return self.owner_id if owner_uuid(self.owner_id) == user_uuid else None

    def _remember(self, row: StoredConversation, top: int | None) -> Chat:
        following = 0 if top is None else top + 1
        known = self._states.get(row.chat_uuid)
        if known is not None and known.pk == row.pk:
            known.next_position = max(known.next_position, following)
        else:
            self._states[row.chat_uuid] = _ChatState(
                pk=row.pk, chat_uuid=row.chat_uuid, owner_id=row.owner_id, next_position=following
            )
        return _chat(row)

    def _plain(self) -> Any:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        rows = StoredConversation.objects.all()
        if self.owner_id is not None:
            rows = rows.filter(owner_id=self.owner_id)
        return rows

    def _rows(self) -> Any:
        from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage

        # The newest active position through the (conversation, position) index of the active
        # rows: one index probe, where MAX over a join read every row of the thread.
        newest = StoredMessage.objects.filter(conversation_id=OuterRef("pk"), active=True)
        newest = newest.order_by("-position")
        rows = StoredConversation.objects.annotate(top=Subquery(newest.values("position")[:1]))
        if self.owner_id is not None:
            rows = rows.filter(owner_id=self.owner_id)
        return rows

    def _state_sync(self, chat_uuid: UUID) -> _ChatState | None:
        state = self._states.get(chat_uuid)
        if state is not None:
            return None if state.deleted else state
        row = self._rows().filter(chat_uuid=chat_uuid).first()
        if row is None:
            return None
        self._remember(row, row.top)
        return self._states[chat_uuid]

    # ChatRepositoryLike -------------------------------------------------------------------

    def _create_sync(self, chat_data: ChatCreate) -> Chat:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        thread_id, user = chat_data.thread_id, chat_data.user_uuid
        if not thread_id or user is None or len(thread_id) > MAX_KEY:
            raise ValueError(
                f"create_chat needs a thread_id of 1 to {MAX_KEY} characters and a user_uuid, "
                f"got thread_id={thread_id!r} and user_uuid={user!r}."
            )
        owner = self._owner_for(user)
        if owner is None:
            raise ValueError(
                f"This chat repository serves the user {self.user_uuid} only; create_chat was "
                f"given user_uuid={user}."
            )
        found = self._rows().filter(owner_id=owner, thread_id=thread_id).first()
        if found is not None:
            return self._remember(found, found.top)
        title = normalize_title(chat_data.name, MAX_KEY)
        with write_transaction():
            limit = self.max_threads_per_owner
            if limit is not None:
                lock_owner("threads", owner)
                existing = StoredConversation.objects.filter(
                    owner_id=owner, thread_id=thread_id
                ).first()
                if existing is not None:
                    return self._remember(existing, None)
                refuse_new_thread(owner, limit)
            try:
                with write_transaction():
                    row = StoredConversation.objects.create(
                        owner_id=owner, thread_id=thread_id, title=title
                    )
            except IntegrityError:  # a concurrent create won: return its chat
                winner = self._rows().filter(owner_id=owner, thread_id=thread_id).first()
                if winner is None:
                    raise
                return self._remember(winner, winner.top)
        return self._remember(row, None)

    def _refuse_over_quota_sync(self, owner: str, thread_id: str, limit: int) -> None:

        if not self._rows().filter(owner_id=owner, thread_id=thread_id).exists():
            refuse_new_thread(owner, limit)

    async def refuse_over_quota(self, thread_id: str) -> None:
        """Raise ``StoreLimitError`` if a run on ``thread_id`` would create a thread over quota.

        The run endpoint calls this before it streams, so a run that cannot be stored is a 413
        JSON answer instead of a stream ending in ``RUN_ERROR``. ``create_chat`` still checks
        under the owner lock: this is the early, clear answer, not the race-safe one. Without
        a quota (or an owner) there is nothing to check, and no trip to a thread.
        """
        owner, limit = self.owner_id, self.max_threads_per_owner
        if owner is not None and limit is not None:
            await unit_of_work(self._refuse_over_quota_sync)(owner, thread_id, limit)

    async def create_chat(self, chat_data: ChatCreate) -> Chat:
        """Create the owner's thread (idempotent by thread id) or return the existing one.

        Raises:
            ValueError: For a missing or too long thread id, or another owner's user uuid.
            StoreLimitError: When the owner already keeps ``max_threads_per_owner`` threads.
        """
        return await unit_of_work(self._create_sync)(chat_data)

    def _by_thread_sync(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        owner = self._owner_for(user_uuid)
        if owner is None or len(thread_id) > MAX_KEY:
            return None
        row = self._rows().filter(owner_id=owner, thread_id=thread_id).first()
        return None if row is None else self._remember(row, row.top)

    async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Chat | None:
        """Return the owner's chat of ``thread_id`` (exact match), or ``None``."""
        return await unit_of_work(self._by_thread_sync)(user_uuid, thread_id)

    def _all_sync(self, user_uuid: UUID | None) -> list[Chat]:
        rows = self._rows()
        if user_uuid is not None:
            owner = self._owner_for(user_uuid)
            if owner is None:
                return []
            rows = rows.filter(owner_id=owner)
        return [self._remember(row, row.top) for row in rows.order_by("created_at", "pk")]

    async def get_all_chats(self, user_uuid: UUID | None) -> Sequence[Chat]:
        """Return the owner's chats (``None``: every chat this repository may see), oldest first."""
        return await unit_of_work(self._all_sync)(user_uuid)

    def _rename_sync(self, chat_uuid: UUID, name: str) -> Chat | None:
        title = normalize_title(name, MAX_KEY)
        rows = self._plain().filter(chat_uuid=chat_uuid)
        if not rows.update(title=title):
            return None
        row = self._rows().filter(chat_uuid=chat_uuid).first()
        return None if row is None else self._remember(row, row.top)

    async def update_chat_name(self, chat_uuid: UUID, name: str) -> Chat | None:
        """Rename the owner's chat; ``None`` when it is unknown."""
        return await unit_of_work(self._rename_sync)(chat_uuid, name)

    def _delete_sync(self, chat_uuid: UUID) -> Chat | None:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        row = self._rows().filter(chat_uuid=chat_uuid).first()
        if row is None:
            return None
        chat = self._remember(row, row.top)
        delete_conversations(StoredConversation.objects.filter(pk=row.pk))
        self._states[chat_uuid].deleted = True
        return chat

    async def delete_chat(self, chat_uuid: UUID) -> Chat | None:
        """Delete the owner's chat, its messages and unshared attachments; ``None`` if unknown."""
        return await unit_of_work(self._delete_sync)(chat_uuid)


class OrmMessageRepository(NestedTransaction, NestedRecordWrites):
    """A ``MessageRepositoryLike`` over ``StoredMessage`` rows (see the module docstring).

    Attributes:
        queries_applied: How many scopes were applied to the database (for tests).
        fence: Called first in every write transaction (``persistence.runs.TakesFence``): the
            run store's check that the run writing here was not taken over by another worker.
    """

    def __init__(self, chats: OrmChatRepository, *, message_class: type[Message] = Message) -> None:
        self.fence: Callable[[], None] | None = None
        self.chats = chats
        self.message_class = message_class
        self.tool_call_class = nested_record_class(message_class, "tool_calls")
        self.reasoning_class = nested_record_class(message_class, "reasonings")
        self._records: dict[UUID, Message] = {}
        self._read: dict[UUID, tuple[Any, UUID]] = {}
        """Rows whose records a read handed out without caching them (each with its chat's
        uuid): built into ``_records`` only when a write or a lookup needs one."""
        self._children: dict[UUID, UUID] = {}
        self._pending: dict[UUID, _Pending] | None = None
        self._cuts: dict[UUID, int] = {}
        self._scope = TaskScope()

    # Caching ------------------------------------------------------------------------------

    def _keep(self, message: Message) -> None:
        self._records[message.message_uuid] = message
        self._parent_them(message)

    def _parent_them(self, message: Message) -> None:
        """Remember ``message`` as the parent of its tool calls and reasoning steps."""
        for call in message.tool_calls:
            self._children[call.uuid] = message.message_uuid
        for step in message.reasonings:
            self._children[step.uuid] = message.message_uuid

    @staticmethod
    def _copy(message: Message) -> Message:
        return detached(message)  # its private values (sequence id, created at) included

    def _message_rows(self) -> Any:
        from django_pydantic_agent.contrib.store.models import StoredMessage

        rows = StoredMessage.objects.select_related("conversation")
        if self.chats.owner_id is not None:
            rows = rows.filter(conversation__owner_id=self.chats.owner_id)
        return rows

    def _handed(self, rows: list[Any], state: _ChatState) -> list[Message]:
        """The records of ``rows`` (``READ_COLUMNS``, oldest first), to hand out.

        A read hands out most records once and never looks them up again (a run's window):
        rather than cache each and hand out a copy (about a third of a read's cost), each is
        built once and handed out, and its row kept to build the cached record from if a
        write or a lookup asks for it. A record already cached is refreshed from its row, as
        every read refreshes it, and handed out as a copy.
        """
        chat_uuid = state.chat_uuid
        records = []
        for row in rows:
            record = rows_.record_of(self.message_class, row, chat_uuid)
            if record.message_uuid in self._records:
                self._keep(record)
                record = self._copy(record)
            else:
                self._read[record.message_uuid] = (row, chat_uuid)
                self._parent_them(record)
            records.append(record)
        if rows:
            state.next_position = max(state.next_position, rows[-1].position + 1)
        return records

    def _lookup_sync(self, message_uuid: UUID) -> Message | None:
        row = self._message_rows().filter(message_uuid=message_uuid).first()
        if row is not None:
            self.chats._remember(row.conversation, None)
            record = rows_.record_of(self.message_class, row, row.conversation.chat_uuid)
            self._keep(record)
            return record
        return None

    def _child_lookup_sync(self, uuid_: UUID) -> Message | None:
        from django.db.models import Q, TextField
        from django.db.models.functions import Cast

        text = str(uuid_)
        row = (
            self._message_rows()
            .annotate(calls=Cast("tool_calls", TextField()), steps=Cast("reasonings", TextField()))
            .filter(Q(calls__contains=text) | Q(steps__contains=text))
            .first()
        )
        if row is None:
            return None
        self.chats._remember(row.conversation, None)
        record = rows_.record_of(self.message_class, row, row.conversation.chat_uuid)
        self._keep(record)
        return record

    async def _cached(self, message_uuid: UUID) -> Message | None:
        record = self._records.get(message_uuid)
        if record is None and message_uuid in self._read:
            record = rows_.record_of(self.message_class, *self._read[message_uuid])
            self._keep(record)
        elif record is None:
            record = await unit_of_work(self._lookup_sync)(message_uuid)
        if record is None or record.chat_uuid is None:
            return None
        state = self.chats._states.get(record.chat_uuid)
        if state is None or state.deleted:
            return None
        return record

    async def _parent_of(self, child_uuid: UUID) -> Message | None:
        parent = self._children.get(child_uuid)
        if parent is None:
            record = await unit_of_work(self._child_lookup_sync)(child_uuid)
            if record is None:
                return None
            parent = record.message_uuid
        return await self._cached(parent)

    # Transactions (``NestedTransaction``) -------------------------------------------------

    def _begin(self) -> _Snapshot:
        """Open the batch; the snapshot holds the cached records as a rollback restores them:
        writes replace a record (copy on write) rather than change it, so the dict is copied,
        not its records. O(1) per record, where a deep copy of each made every flush of a long
        thread cost O(thread)."""
        self._pending = {}
        states = {k: copy.copy(v) for k, v in self.chats._states.items()}
        return dict(self._records), dict(self._children), states

    def _restore(self, snapshot: _Snapshot) -> None:
        self._records, self._children, self.chats._states = snapshot
        self._pending, self._cuts = None, {}

    async def _commit(self, snapshot: _Snapshot) -> None:
        """Apply the batch as one database transaction; if it fails, restore the snapshot."""
        batch = list((self._pending or {}).values())
        try:
            if batch or self._cuts:
                await unit_of_work(self._apply_sync)(batch)
        except BaseException:
            self._restore(snapshot)
            raise
        self._pending, self._cuts = None, {}

    def _touch(self, message: Message) -> _Pending:
        assert self._pending is not None
        assert message.chat_uuid is not None
        pending = self._pending.get(message.message_uuid)
        if pending is None:
            pending = _Pending(message_uuid=message.message_uuid, chat_uuid=message.chat_uuid)
            self._pending[message.message_uuid] = pending
        return pending

    def _apply_sync(self, batch: list[_Pending]) -> None:
        """Write one scope's changes in one transaction (the thread rows locked first).

        Raises:
            ChatNotFoundError: When a thread of the scope was deleted meanwhile (its writes
                are dropped; those of the other threads are committed).
        """
        from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage

        states = {p.chat_uuid: self.chats._states[p.chat_uuid] for p in batch}
        states.update({chat_uuid: self.chats._states[chat_uuid] for chat_uuid in self._cuts})
        inserting = {p.chat_uuid for p in batch if p.created}
        # The thread row's new values (its preview from the records written now): written
        # first when nothing is inserted, so that UPDATE is the scope's lock on the thread
        # (and a thread deleted meanwhile updates no row), last otherwise.
        now = timezone.now()
        touches: dict[UUID, dict[str, Any]] = {}
        for state in states.values():
            touched = [
                self._records[p.message_uuid] for p in batch if p.chat_uuid == state.chat_uuid
            ]
            preview = derive_preview(
                {"content": m.content} for m in touched if m.role != "activity"
            )
            # The rows changed behind save()'s back: its next call compares every row.
            values: dict[str, Any] = {"updated_at": now, "save_state": ""}
            if preview:
                values["preview"] = preview
            touches[state.chat_uuid] = values
        with write_transaction():
            if self.fence is not None:
                self.fence()
            self._cut_sync(states)
            if inserting:
                last = StoredMessage.objects.filter(
                    conversation=OuterRef("pk"), active=True
                ).order_by("-position")
                locked = (
                    StoredConversation.objects.select_for_update()
                    .filter(pk__in=[s.pk for s in states.values()])
                    .annotate(
                        top=Subquery(last.values("position")[:1]),
                        tip=Subquery(last.values("message_uuid")[:1]),
                    )
                )
                alive = {
                    pk: (top, tip, branch)
                    for pk, top, tip, branch in locked.values_list(
                        "pk", "top", "tip", "active_branch"
                    )
                }
                for state in states.values():
                    if state.pk not in alive:
                        state.deleted = True
                    elif state.chat_uuid in inserting:
                        top, tip, branch = alive[state.pk]
                        state.next_position = 0 if top is None else top + 1
                        state.tip, state.branch = _as_uuid(tip), branch
            else:
                for state in states.values():
                    rows = StoredConversation.objects.filter(pk=state.pk)
                    if not rows.update(**touches[state.chat_uuid]):
                        state.deleted = True
            live = [p for p in batch if not states[p.chat_uuid].deleted]
            inserts: list[StoredMessage] = []
            for pending in live:
                record = self._records[pending.message_uuid]
                if pending.created:
                    state = states[pending.chat_uuid]
                    position = state.next_position
                    state.next_position += 1
                    record._sequence_id = position + 1
                    inserts.append(
                        rows_.new_row(
                            StoredMessage,
                            state.pk,
                            position,
                            record,
                            branch=state.branch,
                            parent_uuid=state.tip,
                        )
                    )
                    state.tip = record.message_uuid
                else:
                    self._update_row(pending, record)
            if inserts:
                StoredMessage.objects.bulk_create(inserts)
            self._link_attachments_sync(states, live)
            if inserting:
                for state in states.values():
                    if not state.deleted:
                        rows = StoredConversation.objects.filter(pk=state.pk)
                        rows.update(**touches[state.chat_uuid])
        gone = [state.chat_uuid for state in states.values() if state.deleted]
        if gone:  # what was written for the live threads is committed; these stay deleted
            raise ChatNotFoundError(gone[0])

    def _link_attachments_sync(self, states: dict[UUID, _ChatState], live: list[_Pending]) -> None:
        """Link the attachments the written records quote to their threads, as ``save`` does.

        Only threads a written record quotes an attachment in are reconciled (against every
        row of the thread), so ``agent_store_prune_attachments`` keeps the files.
        """
        from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage

        quoting = {
            p.chat_uuid
            for p in live
            if attachment_ids_in([self._records[p.message_uuid].wire_extra or {}])
        }
        for chat_uuid in quoting:
            conversation = StoredConversation.objects.get(pk=states[chat_uuid].pk)
            quoted: list[Any] = []
            rows = StoredMessage.objects.filter(conversation_id=conversation.pk)
            pairs: list[tuple[Any, Any]] = list(rows.values_list("record", "wire"))
            for record, wire in pairs:
                quoted.append((record or {}).get("wire_extra") or {})
                quoted.extend(wire or [])
            reconcile_conversation_attachments(conversation, quoted)

    def _update_row(self, pending: _Pending, record: Message) -> None:
        from django_pydantic_agent.contrib.store.models import StoredMessage

        values: dict[str, Any] = {}
        if pending.full_content:
            values["content"] = record.content
        elif pending.content_offset is not None:
            tail = record.content[pending.content_offset :]
            values["content"] = (
                Value(tail)
                if pending.content_offset == 0
                else Concat(Left("content", pending.content_offset), Value(tail))
            )
        if pending.fields:  # a text-only write (most of a run's) dumps nothing
            fields = rows_.record_columns(record)
            for name in pending.fields:
                values[name] = fields[name]
        if values:
            # The record no longer is what a save stored: load renders it from now on.
            values["wire"] = None
            StoredMessage.objects.filter(message_uuid=record.message_uuid).update(**values)

    def _cut_sync(self, states: dict[UUID, _ChatState]) -> None:
        """Apply the scope's ``start_branch`` cuts, each under its thread's lock."""
        from django_pydantic_agent.contrib.store import branches
        from django_pydantic_agent.contrib.store.models import StoredConversation

        for chat_uuid, position in self._cuts.items():
            state = states[chat_uuid]
            locked = StoredConversation.objects.select_for_update().filter(pk=state.pk)
            if not locked.exists():
                state.deleted = True
                continue
            state.branch, state.tip = branches.cut(state.pk, position)
            state.next_position = position

    async def start_branch(self, chat_uuid: UUID, at: UUID) -> None:
        """Start a new branch where record ``at`` of the chat's active branch is: it and the
        records after it leave the active branch (kept, with their siblings to come); the
        messages created next follow the record before it. Applied with the scope's other
        writes (inside ``transaction()``), before them.

        Raises:
            ValueError: If ``at`` is no record of this owner's chat ``chat_uuid``.
        """
        record = await self._cached(at)
        if record is None or record.chat_uuid != chat_uuid or not record._sequence_id:
            raise ValueError(f"start_branch: {at} is no message of chat {chat_uuid}.")
        async with self.transaction():
            self._cuts[chat_uuid] = record._sequence_id - 1

    # Writes -------------------------------------------------------------------------------

    async def create_message(self, message_data: MessageCreate) -> Message:
        """Queue a new message at the end of its chat (one ``INSERT`` when the scope ends).

        Raises:
            ValueError: If ``chat_uuid`` is missing or names no chat of this owner.
        """
        chat_uuid = message_data.chat_uuid
        if chat_uuid is None:
            raise ValueError("create_message needs chat_uuid; pass the chat the message joins.")
        state = self.chats._states.get(chat_uuid)
        if state is None:
            state = await unit_of_work(self.chats._state_sync)(chat_uuid)
        if state is None or state.deleted:
            raise ChatNotFoundError(chat_uuid)
        declared = self.message_class.model_fields
        kept = {k: v for k, v in message_data.model_dump().items() if k in declared}
        emitter_type, emitter_id = emitter_for_role(
            message_data.role, participant_id(owner_uuid(state.owner_id))
        )
        async with self.transaction():
            message = self.message_class(
                **kept,
                message_uuid=uuid.uuid4(),
                tool_calls=[],
                reasonings=[],
                emitter_type=emitter_type,
                emitter_id=emitter_id,
            )
            message._sequence_id = state.next_position + 1
            message._created_at = _now_iso()
            self._keep(message)
            self._touch(message).created = True
            return self._copy(message)

    async def update_message(self, message_uuid: UUID, update: MessageUpdate) -> Message | None:
        """Apply an update (a content delta becomes an O(delta) ``UPDATE``); ``None`` if unknown."""
        message = await self._cached(message_uuid)
        if message is None:
            return None
        changes = update_fields(update)
        if not changes:
            return self._copy(message)
        async with self.transaction():
            staged = self._copy(message)
            applied = apply_update(staged, update)
            self._keep(staged)
            pending = self._touch(staged)
            if not pending.created:
                if "content_delta" in changes and not pending.full_content:
                    offset = int(changes["content_offset"])
                    if pending.content_offset is None or offset < pending.content_offset:
                        pending.content_offset = offset
                elif "content" in applied:
                    pending.full_content = True
                own = set(applied) - {"content"}
                if own:
                    pending.fields.add("record")
                    pending.fields.update(f for f in ("status", "run_id") if f in own)
                    if "agui_id" in own:
                        pending.fields.add("message_id")
            return self._copy(staged)

    async def _append_child(self, field_name: str, record_class: type[Any], data: Any) -> Any:
        parent = await self._cached(data.message_uuid)
        if parent is None:
            raise ValueError(
                f"Message {data.message_uuid} does not exist; create the message before "
                f"appending to its {field_name}."
            )
        async with self.transaction():
            child = record_class(**data.model_dump(exclude={"message_uuid"}), uuid=uuid.uuid4())
            staged = self._copy(parent)
            getattr(staged, field_name).append(child)
            self._keep(staged)
            pending = self._touch(staged)
            if not pending.created:
                pending.fields.add(field_name)
            return detached(child)

    async def _update_child(self, field_name: str, uuid_: UUID, update: Any) -> Any:
        parent = await self._parent_of(uuid_)
        if parent is None:
            return None
        children = getattr(parent, field_name)
        index = next((i for i, c in enumerate(children) if c.uuid == uuid_), None)
        if index is None:
            return None
        if not update_fields(update):
            return detached(children[index])
        async with self.transaction():
            staged = self._copy(parent)
            child = getattr(staged, field_name)[index]
            apply_update(child, update)
            self._keep(staged)
            pending = self._touch(staged)
            if not pending.created:
                pending.fields.add(field_name)
            return detached(child)

    # Reads --------------------------------------------------------------------------------

    def _get_sync(self, message_uuid: UUID) -> Message | None:
        record = self._lookup_sync(message_uuid)
        return None if record is None else self._copy(record)

    async def get_message(self, message_uuid: UUID) -> Message | None:
        """Return a message of this owner by uuid, or ``None``."""
        return await unit_of_work(self._get_sync)(message_uuid)

    @staticmethod
    def _active_rows(state: _ChatState) -> Any:
        """The thread's active branch as named tuples of ``READ_COLUMNS`` (the (conversation,
        position) index of the active rows)."""
        from django_pydantic_agent.contrib.store.models import StoredMessage

        rows = StoredMessage.objects.filter(conversation_id=state.pk, active=True)
        return rows.values_list(*rows_.READ_COLUMNS, named=True)

    def _thread_sync(self, chat_uuid: UUID) -> list[Message]:
        state = self.chats._state_sync(chat_uuid)
        if state is None:
            return []
        return self._handed(list(self._active_rows(state).order_by("position")), state)

    def _recent_sync(self, chat_uuid: UUID, limit: int, agui_id: str | None) -> list[Message]:
        state = self.chats._state_sync(chat_uuid)
        if state is None:
            return []
        rows = self._active_rows(state)
        if agui_id is None:
            found = _newest(rows, state.next_position, limit)
        else:  # the column keeps MAX_KEY characters of an id: the record has it whole
            # Unordered in SQL, so the (conversation, message_id) index answers it: with ORDER
            # BY position, SQLite walked the thread's position index instead (every row of a
            # 10,000-message thread, twice a run). The rows sharing the prefix are few.
            same = rows.filter(message_id=agui_id[:MAX_KEY]).order_by()[:16]
            found = sorted(
                (r for r in same if (r.record or {}).get("agui_id", r.message_id) == agui_id),
                key=lambda r: r.position,
            )[:1]
        return self._handed(found, state)

    async def get_recent_messages(self, chat_uuid: UUID, limit: int) -> Sequence[Message]:
        """Return the newest ``limit`` messages of the chat, oldest first, in one query
        (``ORDER BY position DESC LIMIT``, on the thread's position index)."""
        return await unit_of_work(self._recent_sync)(chat_uuid, limit, None)

    async def get_message_by_agui_id(self, chat_uuid: UUID, agui_id: str) -> Message | None:
        """Return the first message of the chat with this AG-UI id, or ``None`` (one indexed
        query)."""
        found = await unit_of_work(self._recent_sync)(chat_uuid, 1, agui_id)
        return found[0] if found else None

    async def get_tool_call_by_agui_id(self, message_uuid: UUID, agui_id: str) -> ToolCall | None:
        """Return the tool call of a message with this AG-UI id, or ``None``."""
        message = await self.get_message(message_uuid)
        if message is None:
            return None
        for call in message.tool_calls:
            if call.agui_id == agui_id:
                return call
        return None

    async def get_chat_messages(self, chat_uuid: UUID) -> Sequence[Message]:
        """Return every message of the chat in sequence order (``[]`` for an unknown chat)."""
        return await unit_of_work(self._thread_sync)(chat_uuid)

    # SummaryStore -------------------------------------------------------------------------

    def _latest_summary_sync(self, chat_uuid: UUID) -> StoredSummary | None:
        state = self.chats._state_sync(chat_uuid)
        if state is None:
            return None
        from django_pydantic_agent.contrib.store.models import StoredSummary as Row

        row = (
            Row.objects.filter(conversation_id=state.pk)
            .select_related("through")
            .order_by("-id")
            .first()
        )
        if row is None:
            return None
        through = row.through
        return StoredSummary(
            summary_id=row.summary_uuid,
            text=row.text,
            through_uuid=through.message_uuid,
            through_id=rows_.record_of(self.message_class, through, chat_uuid).agui_id or "",
            created_at=row.created_at,
            run_id=row.run_id,
        )

    async def get_latest_summary(self, chat_uuid: UUID) -> StoredSummary | None:
        """The chat's newest compaction summary, or ``None`` (one indexed query)."""
        return await unit_of_work(self._latest_summary_sync)(chat_uuid)

    def _add_summary_sync(
        self, chat_uuid: UUID, text: str, through_uuid: UUID, created_at: datetime, run_id: str
    ) -> StoredSummary | None:
        state = self.chats._state_sync(chat_uuid)
        if state is None:
            return None
        from django_pydantic_agent.contrib.store.models import StoredMessage
        from django_pydantic_agent.contrib.store.models import StoredSummary as Row

        through = StoredMessage.objects.filter(
            conversation_id=state.pk, message_uuid=through_uuid
        ).first()
        if through is None:
            return None
        with write_transaction():
            if self.fence is not None:
                self.fence()
            row = Row.objects.create(
                conversation_id=state.pk,
                through=through,
                text=text,
                run_id=run_id[:255],
                created_at=created_at,
            )
        return StoredSummary(
            summary_id=row.summary_uuid,
            text=text,
            through_uuid=through_uuid,
            through_id=rows_.record_of(self.message_class, through, chat_uuid).agui_id or "",
            created_at=created_at,
            run_id=row.run_id,
        )

    async def add_summary(
        self, chat_uuid: UUID, *, text: str, through_uuid: UUID, created_at: datetime, run_id: str
    ) -> StoredSummary | None:
        """Store a summary standing for the chat's messages up to ``through_uuid``: one row
        (``StoredSummary``); ``None`` when the chat or that message is not this owner's."""
        return await unit_of_work(self._add_summary_sync)(
            chat_uuid, text, through_uuid, created_at, run_id
        )

    def _last_sync(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        result: dict[UUID, Message] = {}
        for chat_uuid in chat_uuids:
            newest = self._recent_sync(chat_uuid, 1, None)
            if newest:
                result[chat_uuid] = newest[0]
        return result

    async def get_last_messages(self, chat_uuids: list[UUID]) -> dict[UUID, Message]:
        """Return the latest message of each given chat that has one."""
        return await unit_of_work(self._last_sync)(chat_uuids)
