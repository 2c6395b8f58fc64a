"""``DefaultConversationStore``: conversations as ``StoredConversation`` and ``StoredMessage`` rows.

``save`` writes only what changed (``contrib.store.save_plan``), ``load`` returns what
was saved verbatim and renders what runs wrote; ``repositories`` hands a run the ORM
chat-history pair over the same rows. Rows are built by ``contrib.store.rows``.

This module imports no models at import time (see ``stores``).
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from django.db import IntegrityError, connections, router
from django.utils import timezone

from django_pydantic_agent.contrib.store import branches, feedback, rows, save_plan, transfer
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
from django_pydantic_agent.contrib.store.runs import DefaultRunStore
from django_pydantic_agent.contrib.store.search import find_threads
from django_pydantic_agent.persistence import (
    Conversation,
    ConversationMeta,
    ConversationMetaList,
    ModelConversationStore,
    derive_preview,
    derive_title,
)
from django_pydantic_agent.persistence.branching import BranchPoint
from django_pydantic_agent.persistence.derive import normalize_title
from django_pydantic_agent.persistence.features import RetentionPolicy, StoreFeatures
from django_pydantic_agent.persistence.feedback import Feedback
from django_pydantic_agent.persistence.listing import ThreadPage, ThreadQuery
from django_pydantic_agent.persistence.outages import unit_of_work
from django_pydantic_agent.persistence.transactions import write_transaction

if TYPE_CHECKING:
    from django.core.checks import CheckMessage
    from django.http import HttpRequest

    from django_pydantic_agent.contrib.store.models import StoredConversation

__all__ = ["DEFAULT_LIST_LIMIT", "DefaultConversationStore"]

#: Threads ``DefaultConversationStore.list`` returns when called with ``limit=None``.
DEFAULT_LIST_LIMIT = 100


@functools.cache
def _locked_row_sql(using: str) -> str:
    """The SQL that reads an owner's thread row and locks it, compiled once per database.

    Every save starts with it; ``Manager.raw`` on SQL compiled once is cheaper than the
    queryset built each time (``python -m bench.save_cpu``).
    Call inside a transaction: PostgreSQL's ``FOR UPDATE`` needs one.
    """
    from django_pydantic_agent.contrib.store.models import StoredConversation

    marks = ("\x00owner", "\x00thread")  # stand-ins for the values, found in the parameters
    locked = StoredConversation.objects.using(using).select_for_update()
    query = locked.filter(owner_id=marks[0], thread_id=marks[1]).query
    sql, params = query.get_compiler(using).as_sql()
    if tuple(params) != marks:  # pragma: no cover - a backend that would inline or reorder them
        raise RuntimeError(f"Unexpected parameters {params!r} in the thread row's SQL: {sql}")
    return str(sql)


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
    these rows (``None``: keep everything until a command option says otherwise); ``features``
    reports it.
    """

    overrides = frozenset({"_find", "_archive"})

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

    @property
    def features(self) -> StoreFeatures:
        """What the store can do (``persistence.features``), its retention policy included."""
        return replace(super().features, retention=self.retention)

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
        return branches.tree(branches.nodes(row.pk)).branch_points()

    async def branch_points(
        self, thread_id: str, *, request: HttpRequest
    ) -> dict[str, BranchPoint] | None:
        """The active messages that have siblings, by AG-UI id (``{}`` for a thread that never
        branched, one query); ``None`` when the owner has no such thread."""
        return await unit_of_work(self._branch_points_sync)(thread_id, request)

    def _activate_sync(self, thread_id: str, message_id: str, request: HttpRequest) -> bool:
        owner_id = self._owner(request)
        with write_transaction():
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
        return transfer.fork(
            owner_id, thread_id, message_id, new_thread_id, self.max_threads_per_owner
        )

    async def fork(
        self, thread_id: str, message_id: str, new_thread_id: str, *, request: HttpRequest
    ) -> bool:
        """Copy the owner's thread's active branch, up to and including the message
        ``message_id``, into a new thread ``new_thread_id`` of the same owner (see
        ``contrib.store.transfer``). ``False`` when the owner has no such thread or its active
        branch no such message; ``StoreLimitError`` over ``max_threads_per_owner``."""
        return await unit_of_work(self._fork_sync)(thread_id, message_id, new_thread_id, request)

    # Feedback (persistence.feedback) -------------------------------------------------------

    async def rate(
        self, thread_id: str, message_id: str, rating: Feedback, *, request: HttpRequest
    ) -> bool:
        """Set (empty: clear) the owner's feedback on ``message_id`` of ``thread_id``; ``False``
        when the owner has no such thread or message (one transaction)."""
        return await unit_of_work(self._rate_sync)(thread_id, message_id, rating, request)

    async def ratings(self, thread_id: str, *, request: HttpRequest) -> dict[str, Feedback]:
        """The owner's feedback on ``thread_id``, by message id (one query)."""
        return await unit_of_work(self._ratings_sync)(thread_id, request)

    def _rate_sync(
        self, thread_id: str, message_id: str, rating: Feedback, request: HttpRequest
    ) -> bool:
        return feedback.rate(self._owner(request), thread_id, message_id, rating)

    def _ratings_sync(self, thread_id: str, request: HttpRequest) -> dict[str, Feedback]:
        return feedback.ratings(self._owner(request), thread_id)

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
            with write_transaction():
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

        using = router.db_for_write(StoredConversation)
        found = StoredConversation.objects.db_manager(using).raw(
            _locked_row_sql(using), [owner_id, thread_id]
        )
        return next(iter(found), None)

    def _store(self, conversation: Conversation, owner_id: str) -> None:
        from django_pydantic_agent.contrib.store.models import StoredConversation

        thread_id = conversation.thread_id
        check_key("thread_id", thread_id)
        messages = list(conversation.messages)
        with write_transaction():
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
            plan = save_plan.plan_save(row, messages, chat_uuid, thread_id)
            created_now = False
            if row is None:
                row, created_now = self._create(thread_id, owner_id, messages, chat_uuid)
                if not created_now:  # a concurrent first save won: compare with its rows
                    plan = save_plan.plan_save(row, messages, row.chat_uuid, thread_id)
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
    row iteration were half of a load (``python -m bench --suite store``).
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
