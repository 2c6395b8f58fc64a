"""``StoredHistorySource``: the harness ``HistorySource`` over ``contrib.store`` message rows.

``ConversationSearch(StoredHistorySource(), scope="conversation")`` searches the thread a run
serves, straight from the rows ``DefaultConversationStore`` keeps (no ``StepPersistence``
snapshots). Whose rows is never the client's to say: the run endpoint sets the run's owner and
thread on the task (``persistence.conversation.run_scope``) and derives the run's
``conversation_id`` from both. Outside a run the source lists nothing. ``scope="owner"``
lists every thread of the run's owner; pair it with ``ConversationSearch(scope="all")``.

A search run is one run id of a thread (the messages it wrote, and the user message that
started it); messages saved without a run form one more. Needs the ``harness`` extra.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from django.db.models import Min

from django_pydantic_agent.chat_history import Message
from django_pydantic_agent.chat_history.window import record_model_messages
from django_pydantic_agent.contrib.store import rows as rows_
from django_pydantic_agent.contrib.store._harness_extra import harness_missing
from django_pydantic_agent.contrib.store.models import StoredMessage
from django_pydantic_agent.persistence.conversation import (
    RunScope,
    conversation_id_for,
    current_run_scope,
)
from django_pydantic_agent.persistence.outages import unit_of_work

try:
    from pydantic_ai_harness.step_persistence import RunRecord
except ModuleNotFoundError as exc:  # pragma: no cover - CI installs the harness extra
    raise harness_missing(exc, "StoredHistorySource") from None

__all__ = ["StoredHistorySource"]

_SEPARATOR = ":"


class StoredHistorySource:
    """A ``HistorySource`` over the message rows of the current run's owner.

    Args:
        scope: ``"conversation"`` lists the runs of the run's thread; ``"owner"`` those of
            every thread of its owner.

    Raises:
        ValueError: For another ``scope``.
    """

    def __init__(self, *, scope: Literal["conversation", "owner"] = "conversation") -> None:
        if scope not in ("conversation", "owner"):
            raise ValueError(
                f"StoredHistorySource(scope={scope!r}) must be 'conversation' (the run's "
                "thread) or 'owner' (every thread of the run's owner)."
            )
        self.scope = scope

    def _rows(self, run: RunScope) -> Any:
        rows = StoredMessage.objects.filter(conversation__owner_id=run.owner_id)
        if self.scope == "conversation":
            rows = rows.filter(conversation__thread_id=run.thread_id)
        return rows

    def _list_sync(self, run: RunScope) -> list[RunRecord]:
        grouped = (
            self._rows(run)
            .values("conversation_id", "conversation__thread_id", "run_id")
            .annotate(first=Min("position"), started=Min("conversation__created_at"))
            .order_by("conversation_id", "first")
        )
        records = []
        for group in grouped:
            thread = group["conversation__thread_id"]
            records.append(
                RunRecord(
                    run_id=f"{group['conversation_id']}{_SEPARATOR}{group['run_id']}",
                    conversation_id=conversation_id_for(run.owner_id, thread),
                    started_at=group["started"] or datetime.now(UTC),
                    metadata={"thread_id": thread},
                )
            )
        return records

    async def list_runs(self) -> list[RunRecord]:
        """The runs of the current run's thread (or owner), oldest first; ``[]`` outside a run."""
        run = current_run_scope()
        if run is None:
            return []
        return await unit_of_work(self._list_sync)(run)

    def _history_sync(self, run: RunScope, run_id: str) -> list[Any]:
        pk, separator, own_run = run_id.partition(_SEPARATOR)
        if not separator or not pk.isdigit():
            return []
        rows = self._rows(run).filter(conversation_id=int(pk), run_id=own_run)
        messages: list[Any] = []
        for row in rows.select_related("conversation").order_by("position"):
            record = rows_.record_of(Message, row, row.conversation.chat_uuid)
            messages += record_model_messages(record)
        return messages

    async def run_history(self, *, run_id: str) -> list[Any]:
        """The messages of one listed run, as pydantic-ai messages; ``[]`` for a run id that
        is not the current owner's (or thread's), or outside a run."""
        run = current_run_scope()
        if run is None:
            return []
        return await unit_of_work(self._history_sync)(run, run_id)
