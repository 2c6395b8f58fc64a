"""Run records in the database (``StoredAgentRun``) and the sweeper of runs whose worker died.

``DefaultRunStore`` is the ``persistence.runs.RunStore`` of ``DefaultConversationStore``: one
row per run, at most one ``running`` row per thread (a partial unique constraint, so two
workers starting a run on one thread at once cannot both win).

It keeps the usage ledger too (``persistence.usage.UsageLedger``): every run that ``finish``
ends gets one ``StoredRunUsage`` row (its tokens, and its cost where the model has a price),
written in the same transaction, so the ledger counts the runs the run table does. A run ended
without a usage (nothing reported it) gets a row of no tokens marked ``estimated``, and one the
sweeper ends gets the estimate of what it stored. ``usage_totals`` / ``usage_by_day`` sum an
owner's rows in the database.

``sweep_runs(lease=...)`` finalises every ``running`` run whose heartbeat is older than
``lease`` seconds as ``errored``, and with it the records that run left in progress (their
message rows, tool calls and reasoning steps become ``errored``), so nothing stays
``running`` after a worker was killed. Call it at start-up and periodically
(``run_sweeper``), or run ``manage.py agent_store_sweep_runs [--lease SECONDS]``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, TypeVar

from django.db import IntegrityError
from django.db.models import Count, Q, Sum
from django.db.models.functions import Length, TruncDate
from django.utils import timezone

from django_pydantic_agent.chat_history.errors import RunFencedError
from django_pydantic_agent.chat_history.records import decode_placeholder
from django_pydantic_agent.persistence.outages import unit_of_work
from django_pydantic_agent.persistence.runs import (
    DEFAULT_LEASE_SECONDS,
    HANDED_OVER_HEARTBEAT,
    HeldRun,
    RunRecord,
    RunStatus,
    SyncRunStore,
    check_terminal,
)
from django_pydantic_agent.persistence.transactions import write_transaction
from django_pydantic_agent.persistence.usage import (
    ESTIMATED_KEY,
    RunUsage,
    UsageTotals,
    estimate_text_tokens,
    run_usage,
)

if TYPE_CHECKING:
    from django_pydantic_agent.contrib.store.models import StoredAgentRun

__all__ = [
    "SWEPT_ERROR",
    "DefaultRunStore",
    "asweep_runs",
    "run_sweeper",
    "sweep_runs",
    "take_over_runs",
]

logger = logging.getLogger("django_pydantic_agent.contrib.store")

_T = TypeVar("_T")

SWEPT_ERROR: Final[str] = (
    "The worker running this run stopped sending heartbeats; the run was ended by the sweeper."
)
"""The ``error`` of a swept run and of the records it left in progress."""


#: How often ``start`` inserts again after the thread's running run ended in its way.
_START_ATTEMPTS: Final[int] = 3


def _record(row: StoredAgentRun) -> RunRecord:
    return RunRecord(
        owner_id=row.owner_id,
        thread_id=row.thread_id,
        run_id=row.run_id,
        status=row.status,
        worker_id=row.worker_id,
        heartbeat_at=row.heartbeat_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        usage=dict(row.usage or {}),
        last_seq=row.last_seq,
        error=row.error,
        resumes=row.resumes,
        resume_input=dict(row.resume_input or {}),
    )


def _rows() -> Any:
    from django_pydantic_agent.contrib.store.models import StoredAgentRun

    return StoredAgentRun.objects


def _ledger() -> Any:
    from django_pydantic_agent.contrib.store.models import StoredRunUsage

    return StoredRunUsage.objects


def _record_usage(row: StoredAgentRun) -> None:
    """The ledger row of a run that just ended: its usage, or (a run ended without one) no
    tokens, marked ``estimated``: nothing reported what it used."""
    line = run_usage(row.usage) or RunUsage(estimated=True)
    _ledger().update_or_create(
        owner_id=row.owner_id,
        thread_id=row.thread_id,
        run_id=row.run_id,
        defaults={
            "finished_at": row.finished_at or timezone.now(),
            "status": row.status,
            "model": line.model,
            "provider": line.provider,
            "input_tokens": line.input_tokens,
            "output_tokens": line.output_tokens,
            "total_tokens": line.total_tokens,
            "cost_usd": line.cost_usd,
            "estimated": line.estimated,
        },
    )


#: The sums of ``UsageTotals`` as aggregates, one ``sum_<field>`` for each of its fields (the
#: admin's by-cost page reads them too).
USAGE_SUMS = {
    "sum_runs": Count("pk"),
    "sum_input_tokens": Sum("input_tokens"),
    "sum_output_tokens": Sum("output_tokens"),
    "sum_total_tokens": Sum("total_tokens"),
    "sum_cost_usd": Sum("cost_usd"),
    "sum_unpriced_runs": Count("pk", filter=Q(cost_usd__isnull=True)),
    "sum_estimated_runs": Count("pk", filter=Q(estimated=True)),
}


def _plain(amount: Decimal) -> Decimal:
    """``amount`` without trailing zeros, never in exponent form (``0.0075``, ``3``)."""
    return amount.quantize(Decimal(1)) if amount == amount.to_integral() else amount.normalize()


def _totals(values: dict[str, Any]) -> UsageTotals:
    """The ``UsageTotals`` of one row of ``USAGE_SUMS`` (a sum over no rows is zero)."""
    summed: dict[str, Any] = {
        field.name: values.get(f"sum_{field.name}") or 0 for field in fields(UsageTotals)
    }
    summed["cost_usd"] = _plain(Decimal(summed["cost_usd"]))
    return UsageTotals(**summed)


def _ledger_rows(
    owner_id: str, thread_id: str | None, since: datetime | None, until: datetime | None
) -> Any:
    rows = _ledger().filter(owner_id=owner_id)
    if thread_id is not None:
        rows = rows.filter(thread_id=thread_id)
    if since is not None:
        rows = rows.filter(finished_at__gte=since)
    if until is not None:
        rows = rows.filter(finished_at__lt=until)
    return rows


def _running(owner_id: str, thread_id: str, run_id: str, epoch: int | None = None) -> Any:
    """The run's row while it is ``running`` (in execution ``epoch``, when given)."""
    rows = _rows().filter(
        owner_id=owner_id, thread_id=thread_id, run_id=run_id, status=RunStatus.RUNNING
    )
    return rows if epoch is None else rows.filter(resumes=epoch)


def _update_running(
    owner_id: str,
    thread_id: str,
    run_id: str,
    values: dict[str, Any],
    last_seq: int | None,
    epoch: int | None = None,
) -> bool:
    """Set ``values`` (and ``last_seq`` when given) on the run if it is still ``running`` (in
    execution ``epoch``, when given); whether it was."""
    if last_seq is not None:
        values = {**values, "last_seq": last_seq}
    return bool(_running(owner_id, thread_id, run_id, epoch).update(**values))


class DefaultRunStore(SyncRunStore):
    """A ``RunStore`` over ``StoredAgentRun`` rows, and the usage ledger over
    ``StoredRunUsage`` rows (see the module docstring); a ``ResumableRunStore``: another
    worker can take a stale run over and run it on."""

    async def take_over(
        self,
        *,
        lease: float,
        worker_id: str,
        max_resumes: int,
        run: tuple[str, str, str] | None = None,
    ) -> tuple[list[RunRecord], list[RunRecord]]:
        """Take over stale runs (see :func:`take_over_runs`)."""
        return await unit_of_work(take_over_runs)(
            lease=lease, worker_id=worker_id, max_resumes=max_resumes, run=run
        )

    def _start_sync(
        self,
        owner_id: str,
        thread_id: str,
        run_id: str,
        worker_id: str,
        resume_input: dict[str, Any] | None = None,
    ) -> tuple[RunRecord, bool]:
        known = _rows().filter(owner_id=owner_id, thread_id=thread_id, run_id=run_id).first()
        if known is not None:
            return _record(known), known.status == RunStatus.RUNNING
        for attempt in range(_START_ATTEMPTS):
            try:
                with write_transaction():
                    row = _rows().create(
                        owner_id=owner_id,
                        thread_id=thread_id,
                        run_id=run_id,
                        worker_id=worker_id,
                        resume_input=resume_input or {},
                    )
            except IntegrityError:
                active = (
                    _rows()
                    .filter(owner_id=owner_id, thread_id=thread_id, status=RunStatus.RUNNING)
                    .first()
                )
                if active is not None:
                    return _record(active), False
                same = _rows().filter(owner_id=owner_id, thread_id=thread_id, run_id=run_id)
                if (found := same.first()) is not None:  # the same run id raced itself
                    return _record(found), False
                # The thread's running run ended between the INSERT and this read: try again.
                if attempt == _START_ATTEMPTS - 1:
                    raise
                continue
            return _record(row), True
        raise AssertionError("unreachable")  # pragma: no cover

    def _heartbeat_sync(
        self, owner_id: str, thread_id: str, run_id: str, last_seq: int | None
    ) -> bool:
        values: dict[str, Any] = {"heartbeat_at": timezone.now()}
        return _update_running(owner_id, thread_id, run_id, values, last_seq)

    async def beat(self, *, worker_id: str, runs: Sequence[HeldRun]) -> set[HeldRun]:
        """Renew every running run of ``worker_id`` (one ``UPDATE``), then read which it holds
        (one ``SELECT``): those of ``runs`` it no longer holds. Two queries a beat, whatever
        the number of runs."""
        return await unit_of_work(self._beat_sync)(worker_id, list(runs))

    def _beat_sync(self, worker_id: str, runs: list[HeldRun]) -> set[HeldRun]:
        held = _rows().filter(worker_id=worker_id, status=RunStatus.RUNNING)
        held.update(heartbeat_at=timezone.now())
        kept = set(held.values_list("owner_id", "thread_id", "run_id", "resumes"))
        return {run for run in runs if tuple(run) not in kept}

    def fence(self, run: HeldRun) -> Callable[[], None]:
        """A check for the run's write transactions: ``RunFencedError`` unless the run still
        runs in execution ``run.epoch``. It locks the run's row (``SELECT ... FOR UPDATE`` where
        the database has it), so a take-over waits for a write in flight and every later write
        of the old execution is refused."""
        owner_id, thread_id, run_id, epoch = run

        def check() -> None:
            rows = _running(owner_id, thread_id, run_id, epoch).select_for_update()
            if not list(rows.values_list("pk", flat=True)[:1]):
                raise RunFencedError(run_id, epoch)

        return check

    def _finish_sync(
        self,
        owner_id: str,
        thread_id: str,
        run_id: str,
        status: str,
        usage: dict[str, Any] | None,
        last_seq: int | None,
        error: str,
        epoch: int | None,
    ) -> RunRecord | None:
        check_terminal(status)
        values: dict[str, Any] = {"status": status, "finished_at": timezone.now(), "error": error}
        if usage is not None:
            values["usage"] = dict(usage)
        if last_seq is not None:
            values["last_seq"] = last_seq
        rows = _rows().filter(owner_id=owner_id, thread_id=thread_id, run_id=run_id)
        with write_transaction():
            ended = _running(owner_id, thread_id, run_id, epoch).update(**values)
            row = rows.first()
            if ended and row is not None:
                _record_usage(row)
        return None if row is None else _record(row)

    def _hand_over_sync(
        self, owner_id: str, thread_id: str, run_id: str, last_seq: int | None, epoch: int | None
    ) -> bool:
        values: dict[str, Any] = {"heartbeat_at": HANDED_OVER_HEARTBEAT, "worker_id": ""}
        return _update_running(owner_id, thread_id, run_id, values, last_seq, epoch)

    def _get_sync(self, owner_id: str, thread_id: str, run_id: str) -> RunRecord | None:
        row = _rows().filter(owner_id=owner_id, thread_id=thread_id, run_id=run_id).first()
        return None if row is None else _record(row)

    def _active_sync(self, owner_id: str, thread_id: str) -> RunRecord | None:
        row = (
            _rows().filter(owner_id=owner_id, thread_id=thread_id, status=RunStatus.RUNNING).first()
        )
        return None if row is None else _record(row)

    async def sweep(self, *, lease: float = DEFAULT_LEASE_SECONDS) -> list[RunRecord]:
        """Finalise stale runs (see :func:`sweep_runs`)."""
        return await asweep_runs(lease=lease)

    async def usage_totals(
        self,
        *,
        owner_id: str,
        thread_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> UsageTotals:
        """The owner's ledger rows summed (one query), on ``thread_id`` when given, finished in
        ``[since, until)``."""

        def totals() -> UsageTotals:
            rows = _ledger_rows(owner_id, thread_id, since, until)
            return _totals(rows.aggregate(**USAGE_SUMS))

        return await unit_of_work(totals)()

    async def usage_by_day(
        self, *, owner_id: str, since: datetime, until: datetime
    ) -> list[tuple[date, UsageTotals]]:
        """The owner's ledger rows summed per UTC day in ``[since, until)`` (one query), oldest
        first."""

        def by_day() -> list[tuple[date, UsageTotals]]:
            rows = (
                _ledger_rows(owner_id, None, since, until)
                .annotate(day=TruncDate("finished_at", tzinfo=UTC))
                .values("day")
                .annotate(**USAGE_SUMS)
                .order_by("day")
            )
            return [(row["day"], _totals(row)) for row in rows]

        return await unit_of_work(by_day)()


def _ended(record: dict[str, Any], status: str) -> dict[str, Any]:
    if record.get("status") == "active" or record.get("in_progress"):
        ended = {**record, "status": status, "in_progress": False}
        if status == RunStatus.ERRORED:
            ended["error"] = SWEPT_ERROR
        return ended
    return record


def _finalise_records(run: StoredAgentRun, *, status: str = RunStatus.ERRORED.value) -> int:
    """Finalise the records the run wrote as the storage agent does for a crashed run.

    In-progress messages, tool calls and reasoning steps become ``errored`` with
    ``SWEPT_ERROR``, and the run's last answer carries its outcome (``type: error``); with
    ``status="interrupted"`` (a run taken over to be resumed) they become ``interrupted`` and
    no outcome is written. Returns the rows changed.
    """
    from django_pydantic_agent.contrib.store.models import StoredMessage

    rows = list(
        StoredMessage.objects.filter(
            conversation__owner_id=run.owner_id,
            conversation__thread_id=run.thread_id,
            run_id=run.run_id,
        )
        .exclude(run_id="")  # the condition of the partial (run_id, status) index
        .order_by("position")
        .select_for_update()
    )
    answers = [row for row in rows if row.role not in ("user", "activity")]
    carrier = answers[-1] if answers else None
    changed: list[StoredMessage] = []
    erroring = status == RunStatus.ERRORED
    for row in rows:
        record = _ended(dict(row.record or {}), status)
        if erroring and row is carrier and not record.get("run_outcome"):
            outcome = {"run_id": run.run_id, "type": "error", "message": SWEPT_ERROR}
            record = {**record, "run_outcome": outcome}
        calls = [_ended(dict(c), status) for c in row.tool_calls or []]
        steps = [_ended(dict(s), status) for s in row.reasonings or []]
        if (record, calls, steps) == (row.record, row.tool_calls, row.reasonings):
            continue
        row.record, row.tool_calls, row.reasonings = record, calls, steps
        row.status = str(record.get("status") or row.status)[:16]
        row.wire = None  # no longer what a save stored: load renders the record
        changed.append(row)
    StoredMessage.objects.bulk_update(
        changed, ["record", "tool_calls", "reasonings", "status", "wire"]
    )
    return len(changed)


def _cutoff(lease: float, now: datetime | None) -> datetime:
    """The heartbeat before which a run is stale; ``ValueError`` for a lease that is not
    positive."""
    if lease <= 0:
        raise ValueError(f"lease={lease!r} is not valid: pass a positive number of seconds.")
    return (now or timezone.now()) - timedelta(seconds=lease)


def _stale(cutoff: datetime) -> Any:
    """The ``running`` runs with no heartbeat since ``cutoff``."""
    return _rows().filter(status=RunStatus.RUNNING, heartbeat_at__lt=cutoff)


def _settle_each(
    stale: Any, cutoff: datetime, settle: Callable[[StoredAgentRun], _T]
) -> Iterator[tuple[StoredAgentRun, _T]]:
    """``settle`` each run of ``stale`` in a transaction of its own, the run row locked and
    re-checked first (a run whose worker renewed its heartbeat meanwhile, or that another
    sweeper settled, is skipped); yields each run and what ``settle`` returned, once committed.
    """
    for pk in list(stale.values_list("pk", flat=True)):
        with write_transaction():
            row = _stale(cutoff).select_for_update().filter(pk=pk).first()
            if row is None:
                continue
            outcome = settle(row)
        yield row, outcome


def _swept_usage(run: StoredAgentRun) -> dict[str, Any]:
    """An estimate of what a swept run used (its worker, which knew, is gone): as input, the
    thread's active messages before the run's first answer, its question included (four
    characters a token, summed in the database); as output, the answers it stored
    (``estimate_text_tokens``)."""
    from django_pydantic_agent.contrib.store.models import StoredMessage

    thread = StoredMessage.objects.filter(
        conversation__owner_id=run.owner_id, conversation__thread_id=run.thread_id
    )
    wrote = thread.filter(run_id=run.run_id).exclude(run_id="").exclude(role="user")
    texts: list[str] = []
    first: int | None = None
    for position, content, calls, steps in wrote.values_list(
        "position", "content", "tool_calls", "reasonings"
    ):
        first = position if first is None else min(first, position)
        texts.append(content or "")
        nested = [(call, "arguments") for call in calls or []]
        nested += [(step, "content") for step in steps or []]
        texts += [
            decode_placeholder(str(item.get(key) or ""))  # stored JSON-encoded (the codec)
            for item, key in nested
            if isinstance(item, dict)
        ]
    before = thread.filter(active=True)
    if first is not None:
        before = before.filter(position__lt=first)
    chars = before.aggregate(chars=Sum(Length("content")))["chars"] or 0
    input_tokens, output_tokens = chars // 4, estimate_text_tokens("".join(texts))
    entry = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        ESTIMATED_KEY: True,
    }
    return {"tokens": [entry]}


def _end_as_errored(run: StoredAgentRun) -> int:
    """End ``run`` as ``errored`` with ``SWEPT_ERROR``, its usage estimated (``_swept_usage``)
    in the ledger, and finalise what it left in progress; returns the records changed."""
    run.status = RunStatus.ERRORED.value
    run.finished_at = timezone.now()
    run.error = SWEPT_ERROR
    run.usage = _swept_usage(run)
    run.save(update_fields=["status", "finished_at", "error", "usage"])
    _record_usage(run)
    return _finalise_records(run)


def sweep_runs(
    *, lease: float = DEFAULT_LEASE_SECONDS, now: datetime | None = None
) -> list[RunRecord]:
    """Finalise every ``running`` run with no heartbeat for ``lease`` seconds as ``errored``.

    Each run and the records it left in progress are finalised in one transaction, the run
    row locked and re-checked first, so a run whose worker renewed its heartbeat meanwhile
    is left alone. Returns the runs swept.
    """
    cutoff = _cutoff(lease, now)
    swept: list[RunRecord] = []
    for run, count in _settle_each(_stale(cutoff), cutoff, _end_as_errored):
        logger.warning(
            "Run %r of a thread was swept as errored (no heartbeat for %s s; %d records "
            "finalised).",
            run.run_id,
            lease,
            count,
        )
        swept.append(_record(run))
    return swept


def take_over_runs(
    *,
    lease: float,
    worker_id: str,
    max_resumes: int,
    run: tuple[str, str, str] | None = None,
    now: datetime | None = None,
) -> tuple[list[RunRecord], list[RunRecord]]:
    """Take over every ``running`` run with no heartbeat for ``lease`` seconds (or only
    ``run``, an ``(owner, thread, run id)``): ``(taken, ended)``.

    Each run is locked and re-checked in its own transaction. One resumed fewer than
    ``max_resumes`` times, with a ``resume_input``, is claimed for ``worker_id`` (heartbeat
    now, ``resumes`` + 1) and what it left in progress becomes ``interrupted``; any other is
    finalised ``errored`` as :func:`sweep_runs` does.
    """
    cutoff = _cutoff(lease, now)
    stale = _stale(cutoff)
    if run is not None:
        stale = stale.filter(owner_id=run[0], thread_id=run[1], run_id=run[2])

    def settle(row: StoredAgentRun) -> int | None:
        """Claim ``row`` (``None``) or end it as errored (the records finalised)."""
        if row.resumes < max_resumes and row.resume_input:
            row.resumes += 1
            row.worker_id = worker_id
            row.heartbeat_at = timezone.now()
            row.save(update_fields=["resumes", "worker_id", "heartbeat_at"])
            _finalise_records(row, status=RunStatus.INTERRUPTED.value)
            return None
        return _end_as_errored(row)

    taken: list[RunRecord] = []
    ended: list[RunRecord] = []
    for row, count in _settle_each(stale, cutoff, settle):
        if count is None:
            taken.append(_record(row))
            continue
        logger.warning(
            "Run %r of a thread was swept as errored (no heartbeat for %s s, resumed %d "
            "times; %d records finalised).",
            row.run_id,
            lease,
            row.resumes,
            count,
        )
        ended.append(_record(row))
    return taken, ended


async def asweep_runs(*, lease: float = DEFAULT_LEASE_SECONDS) -> list[RunRecord]:
    """The async form of :func:`sweep_runs` (one ``sync_to_async``)."""
    return await unit_of_work(sweep_runs)(lease=lease)


async def run_sweeper(
    *, lease: float = DEFAULT_LEASE_SECONDS, interval: float | None = None
) -> None:
    """Sweep now, then every ``interval`` seconds (default: half the lease) until cancelled.

    A sweep that fails is logged and retried at the next interval.
    """
    pause = lease / 2 if interval is None else interval
    if pause <= 0:
        raise ValueError(f"interval={interval!r} is not valid: pass a positive number of seconds.")
    while True:
        try:
            await asweep_runs(lease=lease)
        except Exception:
            logger.exception("Sweeping stale runs failed; retrying in %s s.", pause)
        await asyncio.sleep(pause)
