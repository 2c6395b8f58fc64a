"""``DefaultStepStore``: the pydantic-ai-harness ``StepStore`` on the Django ORM.

It satisfies the harness protocol structurally and partitions every row by an owner resolved
on the server, so a guessed run id never reaches another user's rows. Each protocol method is
one ``sync_to_async`` hop that resolves the owner and runs its queries (in one transaction
where there are several). Needs the ``harness`` extra and the
``django_pydantic_agent.contrib.store`` app installed.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from django.db import IntegrityError
from pydantic_ai.messages import ModelMessagesTypeAdapter

from django_pydantic_agent.contrib.store._harness_extra import harness_missing
from django_pydantic_agent.persistence.transactions import write_transaction

try:
    from pydantic_ai_harness.step_persistence import (
        ContinuableSnapshot,
        RunRecord,
        StepEvent,
        ToolEffectRecord,
    )
except ModuleNotFoundError as exc:
    raise harness_missing(exc, "DefaultStepStore") from None

from django_pydantic_agent.contrib.store._owner_scoped import OwnerScoped
from django_pydantic_agent.contrib.store.models.harness import (
    StoredRun,
    StoredSnapshot,
    StoredSnapshotKey,
    StoredStepEvent,
    StoredToolEffect,
)

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from django.http import HttpRequest
    from pydantic_ai_harness.step_persistence import EventKind, SnapshotState, ToolEffectStatus

__all__ = ["DefaultStepStore"]

_logger = logging.getLogger(__name__)

_EVENT_KINDS: frozenset[str] = frozenset(
    {
        "run_started",
        "run_completed",
        "run_failed",
        "model_request_started",
        "model_request_completed",
        "model_request_failed",
        "tool_call_started",
        "tool_call_completed",
        "tool_call_failed",
    }
)
_TOOL_STATUSES: frozenset[str] = frozenset({"started", "completed", "failed"})
_SNAPSHOT_STATES: frozenset[str] = frozenset({"complete", "interrupted"})


class DefaultStepStore(OwnerScoped):
    """A durable, owner-scoped harness ``StepStore`` over the ``Stored*`` step models.

    Built per request (``StepPersistence(store=DefaultStepStore(request))``): the protocol's
    methods carry no request, so it is bound here. Every row is stored under, and every query
    filtered by, the request's owner, so another user's run id behaves exactly like a missing
    one. An anonymous request without ``allow_anonymous=True`` (or without a session) turns
    every write into a no-op and every read into ``None``/``[]``.

    ``register_run`` raises ``ValueError`` for a run id the owner already registered.
    ``list_runs`` is oldest first by ``started_at`` (the protocol's contract). Snapshot
    messages are stored inline as pydantic-ai's JSON message format; ``max_snapshots_per_run``
    bounds them per run like the harness stores (newest N, plus the newest overall and the
    newest ``complete``), and idempotency keys stay applied after pruning.
    """

    def __init__(
        self,
        request: HttpRequest,
        *,
        allow_anonymous: bool = False,
        max_snapshots_per_run: int | None = None,
    ) -> None:
        if max_snapshots_per_run is not None and (
            isinstance(max_snapshots_per_run, bool)
            or not isinstance(max_snapshots_per_run, int)
            or max_snapshots_per_run < 1
        ):
            raise ValueError(
                f"max_snapshots_per_run must be an int >= 1 or None, got "
                f"{max_snapshots_per_run!r}; pass None to keep every snapshot."
            )
        super().__init__(request, allow_anonymous=allow_anonymous)
        self._max_snapshots = max_snapshots_per_run

    # Runs

    async def register_run(self, record: RunRecord) -> None:
        """Store ``record``; ``ValueError`` if this owner already registered its run id."""

        def op(owner: str) -> None:
            try:
                with write_transaction():
                    StoredRun.objects.create(
                        owner_id=owner,
                        run_id=record.run_id,
                        conversation_id=record.conversation_id,
                        parent_run_id=record.parent_run_id,
                        agent_name=record.agent_name,
                        metadata=dict(record.metadata),
                        started_at=record.started_at,
                        registration_id=record.registration_id,
                    )
            except IntegrityError as exc:
                raise ValueError(
                    f"Run {record.run_id!r} is already registered; a run id is single-use, so "
                    "start a new run (or fork this one) under a fresh run_id."
                ) from exc

        await self._call(op, None)

    async def get_run(self, *, run_id: str) -> RunRecord | None:
        """The owner's run ``run_id``, or ``None`` (also for another owner's run)."""

        def op(owner: str) -> RunRecord | None:
            row = StoredRun.objects.filter(owner_id=owner, run_id=run_id).first()
            return None if row is None else _run_record(row)

        return await self._call(op, None)

    async def list_runs(
        self, *, parent_run_id: str | None = None, conversation_id: str | None = None
    ) -> list[RunRecord]:
        """The owner's runs matching every given filter, oldest ``started_at`` first.

        Ascending order is the protocol's contract (callers take ``[-1]`` as the newest);
        ties keep registration order.
        """

        def op(owner: str) -> list[RunRecord]:
            rows = StoredRun.objects.filter(owner_id=owner)
            if parent_run_id is not None:
                rows = rows.filter(parent_run_id=parent_run_id)
            if conversation_id is not None:
                rows = rows.filter(conversation_id=conversation_id)
            return [_run_record(row) for row in rows.order_by("started_at", "pk")]

        return await self._call(op, [])

    # Events

    async def append_event(self, event: StepEvent) -> None:
        """Append ``event``; a repeated non-``None`` idempotency key for the run is ignored."""

        def op(owner: str) -> None:
            try:
                with write_transaction():
                    StoredStepEvent.objects.create(
                        owner_id=owner,
                        run_id=event.run_id,
                        kind=event.kind,
                        step_index=event.step_index,
                        timestamp=event.timestamp,
                        conversation_id=event.conversation_id,
                        parent_run_id=event.parent_run_id,
                        agent_name=event.agent_name,
                        tool_call_id=event.tool_call_id,
                        tool_name=event.tool_name,
                        error=event.error,
                        metadata=dict(event.metadata),
                        idempotency_key=event.idempotency_key,
                    )
            except IntegrityError:
                if event.idempotency_key is None:  # pragma: no cover - no other constraint
                    raise

        await self._call(op, None)

    async def list_events(self, *, run_id: str) -> list[StepEvent]:
        """The owner's events of ``run_id`` in insertion order.

        Raises ``ValueError`` for a stored ``kind`` the harness does not define.
        """

        def op(owner: str) -> list[StepEvent]:
            rows = StoredStepEvent.objects.filter(owner_id=owner, run_id=run_id).order_by("pk")
            return [_step_event(row) for row in rows]

        return await self._call(op, [])

    # Snapshots

    async def save_snapshot(self, snapshot: ContinuableSnapshot) -> None:
        """Append ``snapshot``; a key ever applied to the run (even if pruned) is ignored."""
        messages = ModelMessagesTypeAdapter.dump_python(snapshot.messages, mode="json")

        def op(owner: str) -> None:
            with write_transaction():
                if snapshot.idempotency_key is not None:
                    try:
                        with write_transaction():
                            StoredSnapshotKey.objects.create(
                                owner_id=owner,
                                run_id=snapshot.run_id,
                                idempotency_key=snapshot.idempotency_key,
                            )
                    except IntegrityError:
                        return
                StoredSnapshot.objects.create(
                    owner_id=owner,
                    run_id=snapshot.run_id,
                    step_index=snapshot.step_index,
                    messages=messages,
                    conversation_id=snapshot.conversation_id,
                    parent_run_id=snapshot.parent_run_id,
                    agent_name=snapshot.agent_name,
                    timestamp=snapshot.timestamp,
                    state=snapshot.state,
                    idempotency_key=snapshot.idempotency_key,
                )
                if self._max_snapshots is not None:
                    self._prune(owner, snapshot.run_id, self._max_snapshots)

        await self._call(op, None)

    @staticmethod
    def _prune(owner: str, run_id: str, keep: int) -> None:
        rows = StoredSnapshot.objects.filter(owner_id=owner, run_id=run_id)
        entries = list(rows.order_by("-pk").values_list("pk", "state"))
        retained = {pk for pk, _ in entries[:keep]}
        retained.update(next(([pk] for pk, state in entries if state == "complete"), []))
        if len(retained) < len(entries):
            rows.exclude(pk__in=retained).delete()

    async def latest_snapshot(
        self, *, run_id: str, include_interrupted: bool = False
    ) -> ContinuableSnapshot | None:
        """The newest ``complete`` snapshot of the run (newest of any state if asked), or None."""

        def op(owner: str) -> StoredSnapshot | None:
            return _snapshot_rows(owner, run_id, include_interrupted).order_by("-pk").first()

        row = await self._call(op, None)
        return None if row is None else _snapshot(row)

    async def list_snapshots(
        self, *, run_id: str, include_interrupted: bool = False
    ) -> list[ContinuableSnapshot]:
        """The run's retained snapshots in write order, like ``latest_snapshot``'s filter.

        Not in the protocol; ``conversation_search`` needs it. A row that no longer parses
        is skipped with a warning instead of hiding the rest of the run.
        """

        def op(owner: str) -> list[StoredSnapshot]:
            return list(_snapshot_rows(owner, run_id, include_interrupted).order_by("pk"))

        none: list[StoredSnapshot] = []
        snapshots: list[ContinuableSnapshot] = []
        for row in await self._call(op, none):
            try:
                snapshots.append(_snapshot(row))
            except ValueError:
                _logger.warning("Skipping unparsable snapshot row %s.", row.pk, exc_info=True)
        return snapshots

    # Tool effects

    async def record_tool_effect(self, record: ToolEffectRecord) -> None:
        """Insert or wholly replace the effect of ``(run_id, tool_call_id)``; newest wins."""

        def op(owner: str) -> None:
            # update_or_create's own transaction reads first: begin it as a write.
            with write_transaction():
                StoredToolEffect.objects.update_or_create(
                    owner_id=owner,
                    run_id=record.run_id,
                    tool_call_id=record.tool_call_id,
                    defaults={
                        "tool_name": record.tool_name,
                        "status": record.status,
                        "started_at": record.started_at,
                        "ended_at": record.ended_at,
                        "idempotency_key": record.idempotency_key,
                        "effect_summary": record.effect_summary,
                    },
                )

        await self._call(op, None)

    async def get_tool_effect(self, *, run_id: str, tool_call_id: str) -> ToolEffectRecord | None:
        """The owner's current effect record of the tool call, or ``None``."""

        def op(owner: str) -> ToolEffectRecord | None:
            row = StoredToolEffect.objects.filter(
                owner_id=owner, run_id=run_id, tool_call_id=tool_call_id
            ).first()
            return None if row is None else _tool_effect(row)

        return await self._call(op, None)

    async def list_unresolved_tool_effects(self, *, run_id: str) -> list[ToolEffectRecord]:
        """The run's effects whose current status is ``started``, in first-recorded order."""

        def op(owner: str) -> list[ToolEffectRecord]:
            rows = StoredToolEffect.objects.filter(
                owner_id=owner, run_id=run_id, status=StoredToolEffect.Status.STARTED
            ).order_by("pk")
            return [_tool_effect(row) for row in rows]

        return await self._call(op, [])


def _snapshot_rows(owner: str, run_id: str, include_interrupted: bool) -> QuerySet[StoredSnapshot]:
    """The run's snapshot rows, only the ``complete`` ones unless ``include_interrupted``."""
    rows = StoredSnapshot.objects.filter(owner_id=owner, run_id=run_id)
    if not include_interrupted:
        rows = rows.filter(state=StoredSnapshot.State.COMPLETE)
    return rows


def _run_record(row: StoredRun) -> RunRecord:
    return RunRecord(
        run_id=row.run_id,
        conversation_id=row.conversation_id,
        parent_run_id=row.parent_run_id,
        agent_name=row.agent_name,
        metadata=dict(row.metadata),
        started_at=row.started_at,
        registration_id=row.registration_id,
    )


def _step_event(row: StoredStepEvent) -> StepEvent:
    if row.kind not in _EVENT_KINDS:
        raise ValueError(
            f"Stored step event {row.pk} has kind {row.kind!r}, which the harness does not "
            "define; fix or delete the row."
        )
    return StepEvent(
        run_id=row.run_id,
        kind=cast("EventKind", row.kind),
        step_index=row.step_index,
        timestamp=row.timestamp,
        conversation_id=row.conversation_id,
        parent_run_id=row.parent_run_id,
        agent_name=row.agent_name,
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        error=row.error,
        metadata=dict(row.metadata),
        idempotency_key=row.idempotency_key,
    )


def _snapshot(row: StoredSnapshot) -> ContinuableSnapshot:
    if row.state not in _SNAPSHOT_STATES:
        raise ValueError(
            f"Stored snapshot {row.pk} has state {row.state!r}; expected 'complete' or "
            "'interrupted'."
        )
    return ContinuableSnapshot(
        run_id=row.run_id,
        step_index=row.step_index,
        messages=ModelMessagesTypeAdapter.validate_python(row.messages),
        conversation_id=row.conversation_id,
        parent_run_id=row.parent_run_id,
        agent_name=row.agent_name,
        timestamp=row.timestamp,
        state=cast("SnapshotState", row.state),
        idempotency_key=row.idempotency_key,
    )


def _tool_effect(row: StoredToolEffect) -> ToolEffectRecord:
    if row.status not in _TOOL_STATUSES:
        raise ValueError(
            f"Stored tool effect {row.pk} has status {row.status!r}; expected 'started', "
            "'completed' or 'failed'."
        )
    return ToolEffectRecord(
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        run_id=row.run_id,
        status=cast("ToolEffectStatus", row.status),
        started_at=row.started_at,
        ended_at=row.ended_at,
        idempotency_key=row.idempotency_key,
        effect_summary=row.effect_summary,
    )
