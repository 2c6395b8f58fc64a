"""``DefaultConversationStore``: conversations as ``StoredConversation`` and ``StoredMessage`` rows.

``save`` writes only what changed (see "save(): what changed" below), ``load`` returns what
was saved verbatim and renders what runs wrote; ``repositories`` hands a run the ORM
chat-history pair over the same rows. Rows are built by ``contrib.store.rows``.

This module imports no models at import time (see ``stores``).
"""

from __future__ import annotations

import hashlib
import json
import marshal
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from django.db import IntegrityError, connections, router, transaction
from django.utils import timezone

from django_pydantic_agent.contrib.store import branches, forks, rows, transfer
from django_pydantic_agent.contrib.store.checks import store_app_installed
from django_pydantic_agent.contrib.store.deletion import delete_conversations
from django_pydantic_agent.contrib.store.links import reconcile_conversation_attachments
from django_pydantic_agent.contrib.store.quotas import (
    MAX_KEY,
    check_key,
    check_quota,
    lock_owner,
    refuse_new_thread,
)
from django_pydantic_agent.contrib.store.repositories import (
    OrmChatRepository,
    OrmMessageRepository,
)
from django_pydantic_agent.contrib.store.retention import RetentionPolicy
from django_pydantic_agent.contrib.store.runs import DefaultRunStore
from django_pydantic_agent.contrib.store.search import find_threads
from django_pydantic_agent.persistence import (
    Conversation,
    ConversationMeta,
    ConversationMetaList,
    ModelConversationStore,
    UnstorableMessageError,
    derive_preview,
    derive_title,
)
from django_pydantic_agent.persistence.branching import BranchPoint
from django_pydantic_agent.persistence.derive import normalize_title
from django_pydantic_agent.persistence.listing import ThreadPage, ThreadQuery
from django_pydantic_agent.persistence.outages import unit_of_work

if TYPE_CHECKING:
    from django.core.checks import CheckMessage
    from django.http import HttpRequest

    from django_pydantic_agent.contrib.store.models import StoredConversation

__all__ = ["DEFAULT_LIST_LIMIT", "DefaultConversationStore"]

#: Threads ``DefaultConversationStore.list`` returns when called with ``limit=None``.
DEFAULT_LIST_LIMIT = 100


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


class DefaultConversationStore(ModelConversationStore):
    """A ``ModelConversationStore`` over ``StoredConversation`` and ``StoredMessage`` rows.

    Every query filters by the owner the base resolves from the request. ``save`` diffs the
    posted messages against the stored rows by position and content digest and writes only
    what changed: an appended message is one INSERT, a grown message one UPDATE, trailing
    messages that went away are deleted. The title is derived from the first user message at
    the first save and afterwards changes only through ``rename``; the preview is re-derived
    on every save. Saving reconciles the thread's attachment links; deleting the thread also
    deletes the attachments no other conversation quotes.

    ``list_limit`` is how many threads ``list(limit=None)`` returns. Thread ids are at most 255
    characters: ``save`` raises ``ValueError`` for a longer one, reads treat it as missing.
    A new or changed message that is ``None`` or holds a NUL character or a non-finite
    number makes ``save`` raise ``UnstorableMessageError`` before anything is written.

    ``max_threads_per_owner`` caps how many threads one owner keeps: a ``save`` that would
    create one more raises ``StoreLimitError`` and writes nothing (saving an existing thread
    is never refused). The count is taken inside the saving transaction, under a per-owner
    lock on PostgreSQL, so concurrent first saves cannot overshoot it.

    ``retention`` is the ``RetentionPolicy`` ``agent_store_prune_conversations`` applies to
    these rows (``None``: keep everything until a command option says otherwise).
    """

    def __init__(
        self,
        *,
        allow_anonymous: bool = False,
        list_limit: int = DEFAULT_LIST_LIMIT,
        max_threads_per_owner: int | None = None,
        retention: RetentionPolicy | None = None,
    ) -> None:
        super().__init__(allow_anonymous=allow_anonymous)
        if retention is not None and not isinstance(retention, RetentionPolicy):
            raise TypeError(
                f"retention={retention!r} is not a RetentionPolicy: pass, for example, "
                "RetentionPolicy(idle_days=90, keep_newest=500), or None."
            )
        self.retention = retention
        if isinstance(list_limit, bool) or not isinstance(list_limit, int) or list_limit < 1:
            raise ValueError(
                f"list_limit={list_limit!r} is not valid: pass a positive integer, the "
                "number of threads list() returns when called without a limit."
            )
        self.list_limit = list_limit
        self.max_threads_per_owner = check_quota(
            "max_threads_per_owner", max_threads_per_owner, "threads"
        )

    def _refuse_new_thread(self, owner_id: str, limit: int) -> None:
        """Raise ``StoreLimitError`` if the owner already keeps ``limit`` threads."""
        refuse_new_thread(owner_id, limit)

    def run_store(self) -> DefaultRunStore:
        """Where ``AGUIServer`` records this store's runs: ``StoredAgentRun`` rows."""
        return DefaultRunStore()

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """The base's system checks, and E001 when ``contrib.store`` is not installed."""
        return [*super().check(**kwargs), *store_app_installed(self)]

    async def repositories(
        self, *, request: HttpRequest
    ) -> tuple[OrmChatRepository, OrmMessageRepository]:
        """Return the ORM chat-history repositories of the request's owner.

        The pair writes into the rows this store lists and loads (one row per message, one
        transaction per flush), sees only the owner's threads, refuses a thread over
        ``max_threads_per_owner`` with ``StoreLimitError``, and never recreates a thread
        deleted while a run writes to it. Pass ``chat_repository.user_uuid`` to the storage
        agent as its user id.
        """
        owner_id = await unit_of_work(self._owner)(request)
        chats = OrmChatRepository(
            owner_id=owner_id, max_threads_per_owner=self.max_threads_per_owner
        )
        return chats, OrmMessageRepository(chats)

    # Branches and forks (persistence.branching) ----------------------------------------------

    def _thread_row(self, thread_id: str, owner_id: str, *, lock: bool = False) -> Any:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        if len(thread_id) > MAX_KEY:
            return None
        found = StoredConversation.objects.filter(owner_id=owner_id, thread_id=thread_id)
        return (found.select_for_update() if lock else found).first()

    def _branch_points_sync(
        self, thread_id: str, request: HttpRequest
    ) -> dict[str, BranchPoint] | None:
        row = self._thread_row(thread_id, self._owner(request))
        if row is None:
            return None
        if not row.branches:
            return {}
        points = branches.Tree(branches.nodes(row.pk)).branch_points()
        return {
            key: BranchPoint(siblings=tuple(ids), index=index)
            for key, (ids, index) in points.items()
        }

    async def branch_points(
        self, thread_id: str, *, request: HttpRequest
    ) -> dict[str, BranchPoint] | None:
        """The active messages that have siblings, by AG-UI id (``{}`` for a thread that never
        branched, one query); ``None`` when the owner has no such thread."""
        return await unit_of_work(self._branch_points_sync)(thread_id, request)

    def _activate_sync(self, thread_id: str, message_id: str, request: HttpRequest) -> bool:
        owner_id = self._owner(request)
        with transaction.atomic():
            row = self._thread_row(thread_id, owner_id, lock=True)
            return row is not None and branches.activate(row, message_id)

    async def activate(self, thread_id: str, message_id: str, *, request: HttpRequest) -> bool:
        """Make the branch through the message ``message_id`` (any message of the thread, on
        any branch) the active one, continued down that message's own branch; one
        transaction that flips only the rows whose state changes. ``False`` when the owner's
        thread has no such message (or the owner no such thread)."""
        return await unit_of_work(self._activate_sync)(thread_id, message_id, request)

    def _fork_sync(
        self, thread_id: str, message_id: str, new_thread_id: str, request: HttpRequest
    ) -> bool:
        check_key("thread_id", new_thread_id)
        owner_id = self._owner(request)
        return forks.fork(
            owner_id, thread_id, message_id, new_thread_id, self.max_threads_per_owner
        )

    async def fork(
        self, thread_id: str, message_id: str, new_thread_id: str, *, request: HttpRequest
    ) -> bool:
        """Copy the owner's thread's active branch, up to and including the message
        ``message_id``, into a new thread ``new_thread_id`` of the same owner (see
        ``contrib.store.forks``). ``False`` when the owner has no such thread or its active
        branch no such message; ``StoreLimitError`` over ``max_threads_per_owner``."""
        return await unit_of_work(self._fork_sync)(thread_id, message_id, new_thread_id, request)

    def _export_sync(self, thread_id: str, request: HttpRequest) -> dict[str, Any] | None:
        return transfer.export(self._owner(request), thread_id)

    async def export(self, thread_id: str, *, request: HttpRequest) -> dict[str, Any] | None:
        """The owner's thread, every branch and record, as a ``persistence.transfer``
        document (``contrib.store.transfer``); ``None`` when the owner has no such thread."""
        return await unit_of_work(self._export_sync)(thread_id, request)

    def _import_sync(self, document: dict[str, Any], thread_id: str, request: HttpRequest) -> None:
        check_key("thread_id", thread_id)
        owner_id = self._owner(request)
        transfer.import_document(owner_id, thread_id, document, self.max_threads_per_owner)

    async def import_document(
        self, document: dict[str, Any], thread_id: str, *, request: HttpRequest
    ) -> None:
        """Create the owner's thread ``thread_id`` from a checked document (every branch, new
        uuids, running messages stopped); ``ImportProblem`` for a record that is no message,
        ``StoreLimitError`` over ``max_threads_per_owner``, nothing written either way."""
        await unit_of_work(self._import_sync)(document, thread_id, request)

    def _fetch(self, thread_id: str, owner_id: str) -> Conversation | None:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        if len(thread_id) > MAX_KEY:
            return None
        texts = _wire_texts(owner_id, thread_id)
        messages = rows.loaded((w, i, r, c) for _, w, i, r, c in texts) if texts else None
        if messages is not None:  # one query: every row as saved
            return Conversation(thread_id=thread_id, messages=messages, owner_id=owner_id)
        row = (
            StoredConversation.objects.filter(owner_id=owner_id, thread_id=thread_id)
            .only("pk", "chat_uuid")
            .first()
        )
        if row is None:
            return None
        return Conversation(thread_id=thread_id, messages=_rendered(row, texts), owner_id=owner_id)

    def _create(
        self, thread_id: str, owner_id: str, messages: list[Any], chat_uuid: uuid.UUID
    ) -> tuple[StoredConversation, bool]:
        """Create the thread row, or lock the one a concurrent first save created (``False``)."""
        from django_pydantic_agent.contrib.store.models import StoredConversation

        try:
            with transaction.atomic():
                row = StoredConversation.objects.create(
                    owner_id=owner_id,
                    thread_id=thread_id,
                    chat_uuid=chat_uuid,
                    title=derive_title(messages),
                )
                return row, True
        except IntegrityError:  # a concurrent first save won the race: update its row
            winner = self._locked_row(thread_id, owner_id)
            if winner is None:  # the constraint failed for another reason
                raise
            return winner, False

    def _locked_row(self, thread_id: str, owner_id: str) -> StoredConversation | None:
        """The owner's thread row, locked for the rest of the transaction, or ``None``."""
        from django_pydantic_agent.contrib.store.models import StoredConversation

        return (
            StoredConversation.objects.select_for_update()
            .filter(owner_id=owner_id, thread_id=thread_id)
            .first()
        )

    def _store(self, conversation: Conversation, owner_id: str) -> None:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        thread_id = conversation.thread_id
        check_key("thread_id", thread_id)
        messages = list(conversation.messages)
        with transaction.atomic():
            row = self._locked_row(thread_id, owner_id)
            limit = self.max_threads_per_owner
            if row is None and limit is not None:
                lock_owner("threads", owner_id)
                # Looked up again under the owner lock: a concurrent first save of this very
                # thread may have committed meanwhile, and saving it then creates nothing.
                row = self._locked_row(thread_id, owner_id)
                if row is None:
                    self._refuse_new_thread(owner_id, limit)
            chat_uuid = uuid.uuid4() if row is None else row.chat_uuid
            plan = _plan(row, messages, chat_uuid, thread_id)
            created_now = False
            if row is None:
                row, created_now = self._create(thread_id, owner_id, messages, chat_uuid)
                if not created_now:  # a concurrent first save won: compare with its rows
                    plan = _plan(row, messages, row.chat_uuid, thread_id)
            plan.write(row)
            # Links exist only if the last save left some (its state ends ":1"; unknown
            # state: maybe) or these messages may quote attachments.
            if row.branches > 0:  # the other branches' quotes keep their files too
                kept = branches.inactive_quotes(row.pk)
                reconcile_conversation_attachments(row, [*messages, *kept])
            elif plan.quotes or (created_now is False and not row.save_state.endswith(":0")):
                # Proven to quote no attachment: only stale links (if any) are dropped.
                reconcile_conversation_attachments(row, messages if plan.quotes else [])
            StoredConversation.objects.filter(pk=row.pk).update(
                preview=derive_preview(messages),
                updated_at=timezone.now(),
                save_state=plan.state,
            )

    def _remove(self, thread_id: str, owner_id: str) -> None:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        if len(thread_id) > MAX_KEY:
            return
        delete_conversations(
            StoredConversation.objects.filter(owner_id=owner_id, thread_id=thread_id)
        )

    def _list(self, owner_id: str, limit: int | None) -> ConversationMetaList:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        rows = (
            StoredConversation.objects.filter(owner_id=owner_id)
            .order_by("-updated_at", "-id")
            .values_list("thread_id", "title", "updated_at", "preview", "archived")
        )[: limit or self.list_limit]
        return [
            ConversationMeta(
                thread_id=thread_id,
                title=title,
                updated_at=updated_at,
                preview=preview,
                owner_id=owner_id,
                archived=archived,
            )
            for thread_id, title, updated_at, preview, archived in rows
        ]

    def _find(self, query: ThreadQuery, owner_id: str) -> ThreadPage:
        """Pages and full-text search in SQL (``contrib.store.search``)."""
        return find_threads(owner_id, query)

    def _archive(self, thread_id: str, archived: bool, owner_id: str) -> bool:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        if len(thread_id) > MAX_KEY:
            return False
        threads = StoredConversation.objects.filter(owner_id=owner_id, thread_id=thread_id)
        return bool(threads.update(archived=archived))

    def _exists(self, thread_id: str, owner_id: str) -> bool:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        if len(thread_id) > MAX_KEY:
            return False
        return StoredConversation.objects.filter(owner_id=owner_id, thread_id=thread_id).exists()

    def _rename(self, thread_id: str, title: str, owner_id: str) -> None:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        if len(thread_id) > MAX_KEY:
            return
        StoredConversation.objects.filter(owner_id=owner_id, thread_id=thread_id).update(
            title=normalize_title(title, MAX_KEY)
        )


_Texts = list[tuple[int, str | None, str, str, str]]


def _wire_texts(owner_id: str, thread_id: str) -> _Texts:
    """``(position, wire as JSON text, message_id, role, content)`` of each row of the owner's
    thread, in order (what ``rows.loaded`` reads).

    One plain ``SELECT`` joined on the thread, read by a cursor: the ORM's query building and
    row iteration took about 1.5 of a 1,000-message load's 3.2 ms (docs/benchmarks.md).
    """
    from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage

    using = router.db_for_read(StoredMessage)
    quote = connections[using].ops.quote_name
    message, thread = StoredMessage._meta, StoredConversation._meta

    def column(meta: Any, name: str) -> str:
        return quote(meta.get_field(name).column)

    selected = ", ".join(
        f"m.{column(message, name)}"
        for name in ("position", "wire", "message_id", "role", "content")
    )
    sql = (
        f"SELECT {selected} "
        f"FROM {quote(message.db_table)} m INNER JOIN {quote(thread.db_table)} t "
        f"ON t.{column(thread, 'id')} = m.{column(message, 'conversation')} "
        f"WHERE t.{column(thread, 'owner_id')} = %s AND t.{column(thread, 'thread_id')} = %s "
        f"AND m.{column(message, 'active')} = %s "
        f"ORDER BY m.{column(message, 'position')}"
    )
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [owner_id, thread_id, True])
        return cast(_Texts, cursor.fetchall())


def _rendered(row: StoredConversation, texts: _Texts) -> list[Any]:
    """The wire messages of a thread some of whose rows a run wrote or changed: those rows'
    records rendered (one more query), the others' as saved."""
    from django_pydantic_agent.chat_history import Message

    rendered = {
        message_row.position: rows.render(rows.record_of(Message, message_row, row.chat_uuid))
        for message_row in row.message_rows.filter(wire__isnull=True, active=True)
    }
    messages: list[Any] = []
    for position, wire, message_id, role, content in texts:
        messages.extend(
            rendered.get(position) or rows.loaded([(wire, message_id, role, content)]) or []
        )
    return messages


# save(): what changed -------------------------------------------------------------------------
#
# A save reads the posted list into records (``rows.saved_records``) and writes the rows from
# the first one that differs from what is stored. ``StoredConversation.save_state`` lets most
# saves skip reading the rows: after a save it is ``"<k>:<p>:<head>:<tail>:<links>"``, where
# the last row (at position ``p``) holds messages ``k`` onwards, ``head`` hashes the first
# ``k`` messages and ``tail`` the last row's, each message as its ``marshal`` (format 2: no
# back-references, so equal values give equal bytes), and ``<links>`` is ``0`` when the save
# proved the thread quotes no attachment. A later save whose first ``k`` messages hash to
# ``head`` changed nothing there: only messages ``k`` onwards are read into records, and the
# last row is rewritten only when its messages changed, so appending or growing a message reads
# no row. Marshal bytes of a list are its items' bytes after a 5-byte header, so the next head
# extends the hash state instead of starting over. A list marshal cannot encode, a false
# mismatch (keys in another order), or a tail that answers a tool call of an earlier row takes
# the full comparison. Any other write to a thread's rows (a run, the strip command) clears the
# state, and the next save compares every row (one read).

_MARSHAL_VERSION = 2
_LIST_HEADER = 5


def _items(messages: Sequence[Any]) -> bytes:
    """The marshal bytes of the items of ``messages`` (``ValueError`` if one cannot be)."""
    return marshal.dumps(list(messages), _MARSHAL_VERSION)[_LIST_HEADER:]


def _hash(data: bytes) -> Any:
    return hashlib.blake2b(data, digest_size=16)


@dataclass
class _Plan:
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
        return [s for _, s in (*self.updates, *self.inserts)]

    def write(self, conversation: StoredConversation) -> None:
        from django_pydantic_agent.contrib.store.models import StoredMessage

        using = router.db_for_write(StoredMessage)
        active = conversation.message_rows.filter(active=True)
        branched = conversation.branches > 0
        if self.delete_from is not None:
            if branched:  # the branches forked below the dropped rows go with them
                tree = branches.Tree(branches.nodes(conversation.pk))
                dropped = [
                    n.message_uuid
                    for n in tree.nodes
                    if n.active and n.position >= self.delete_from
                ]
                gone = tree.descendants(dropped)
                conversation.message_rows.filter(message_uuid__in=list(gone)).delete()
            else:
                active.filter(position__gte=self.delete_from).delete()
        for position, saved in self.updates:
            active.filter(position=position).update(
                message_uuid=saved.message_uuid,
                wire=rows.stored_wire(saved),
                **saved.columns,
            )
        parent = None
        if branched and self.inserts:
            parent = (
                active.filter(position__lt=self.inserts[0][0])
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
    tail = _hash(tail_bytes).hexdigest()
    return f"{last.index}:{position}:{head.hexdigest()}:{tail}:{int(quotes)}", quotes


def _fast_plan(row: StoredConversation, messages: list[Any]) -> _Plan | None:
    parts = row.save_state.split(":")
    if len(parts) != 5 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    first, position, head_hash, tail_hash = int(parts[0]), int(parts[1]), parts[2], parts[3]
    if len(messages) <= first:
        return None
    try:
        head_bytes = _items(messages[:first])
        head = _hash(head_bytes)
        if head.hexdigest() != head_hash:
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
        plan = _Plan()
        first_bytes = _items(saved[0].wire)
        if _hash(first_bytes).hexdigest() != tail_hash:
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
) -> _Plan:
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
    plan = _Plan()
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


def _plan(
    row: StoredConversation | None, messages: list[Any], chat_uuid: uuid.UUID, thread_id: str
) -> _Plan:
    """What saving ``messages`` over ``row``'s messages writes.

    Checks each message it writes (``UnstorableMessageError``) before anything is written.
    """
    plan = None if row is None else _fast_plan(row, messages)
    if plan is None:
        plan = _full_plan(row, messages, chat_uuid, thread_id)
    indices = [i for s in plan.written() for i in range(s.index, s.index + len(s.wire))]
    if len(indices) > _FEW:  # one encoding of them all proves most lists clean
        _check_messages(messages, indices, _json_or_none([messages[i] for i in indices]))
    else:
        _check_messages(messages, indices, None)
    return plan


def _check_messages(messages: list[Any], positions: list[int], text: str | None) -> None:
    """``_check_message`` for each position; skipped when ``text`` (their JSON) proves it."""
    clean = text is not None and not any(w in text for w in ("\\u0000", "NaN", "Infinity"))
    if clean and not any(messages[p] is None for p in positions):
        return
    for position in positions:
        _check_message(position, messages[position])
