"""The events webhooks carry, the messages queued for them, and the queue that keeps them.

An event is a Standard Webhooks JSON body, ``{"type", "timestamp", "data"}``: ``run.finished``,
``run.errored``, ``run.cancelled`` (built from a run record that ended) and ``thread.deleted``.
``data`` names the thread, the run and the user, never what was said: no message text, no tool
arguments, and no session key of an anonymous owner (``userId`` is ``null`` for them). One
``WebhookMessage`` is queued per event and URL; a ``WebhookQueue`` keeps them durably until each
is delivered or given up (``contrib.store``'s ``DefaultWebhookQueue``).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol, runtime_checkable

from django.utils import timezone

from django_pydantic_agent.persistence.runs import RunRecord, RunStatus
from django_pydantic_agent.persistence.usage import run_usage

__all__ = [
    "EVENT_TYPES",
    "RUN_CANCELLED",
    "RUN_ERRORED",
    "RUN_FINISHED",
    "THREAD_DELETED",
    "WebhookDelivery",
    "WebhookMessage",
    "WebhookQueue",
    "run_event",
    "thread_deleted_event",
]

RUN_FINISHED: Final[str] = "run.finished"
RUN_ERRORED: Final[str] = "run.errored"
RUN_CANCELLED: Final[str] = "run.cancelled"
THREAD_DELETED: Final[str] = "thread.deleted"
#: Every event type, the default ``Webhooks.events``.
EVENT_TYPES: Final[frozenset[str]] = frozenset(
    {RUN_FINISHED, RUN_ERRORED, RUN_CANCELLED, THREAD_DELETED}
)
#: The event of each final run status (``interrupt``: the run ended waiting for a human).
_RUN_EVENTS: Final[dict[str, str]] = {
    RunStatus.COMPLETE: RUN_FINISHED,
    RunStatus.INTERRUPT: RUN_FINISHED,
    RunStatus.ERRORED: RUN_ERRORED,
    RunStatus.INTERRUPTED: RUN_CANCELLED,
}


@dataclass(frozen=True, kw_only=True)
class WebhookMessage:
    """One event bound for one URL: what a ``WebhookQueue`` keeps until it is delivered.

    ``event_id`` is the ``webhook-id`` of every attempt; ``body`` the JSON sent and signed, byte
    for byte, on each. ``owner_id``, ``thread_id`` and ``run_id`` (empty for a thread event)
    are kept beside it for the delivery log; they are never sent apart from ``body``.
    """

    event_id: str
    event_type: str
    url: str
    body: str
    owner_id: str = ""
    thread_id: str = ""
    run_id: str = ""


@dataclass(frozen=True, kw_only=True)
class WebhookDelivery(WebhookMessage):
    """A queued message claimed for an attempt: its queue's ``key`` and the attempts counted
    so far, this one included."""

    key: Any
    attempts: int


@runtime_checkable
class WebhookQueue(Protocol):
    """Where webhook messages wait until they are delivered. Every method is async.

    A message is ``pending`` (due at its next attempt time), ``delivered`` or ``failed``.
    """

    async def enqueue(self, messages: Sequence[WebhookMessage]) -> None:
        """Keep ``messages``, due now; one already kept (same event id and URL) is left as it
        is, so queueing an event twice delivers it once."""
        ...

    async def claim(self, *, limit: int, lease_seconds: float) -> list[WebhookDelivery]:
        """Up to ``limit`` due messages, oldest first, each claimed atomically for one attempt:
        its attempts counted and its next attempt pushed ``lease_seconds`` away, so no other
        worker takes it meanwhile, and one whose worker died is taken again after the lease."""
        ...

    async def settle(
        self,
        delivery: WebhookDelivery,
        *,
        status: str,
        next_attempt_at: datetime | None = None,
        response_status: int | None = None,
        error: str = "",
    ) -> None:
        """Record how an attempt went: ``delivered``, ``failed`` (given up), or ``pending``
        again at ``next_attempt_at``; with the receiver's HTTP status and the error, if any."""
        ...


def _body(event_type: str, moment: datetime, data: dict[str, Any]) -> str:
    stamp = moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"type": event_type, "timestamp": stamp, "data": data}, separators=(",", ":"))


def _user_id(owner_id: str) -> str | None:
    """The owner as a receiver may see it: a user's id, ``None`` for an anonymous session
    (whose owner id holds the session key)."""
    return None if owner_id.startswith("anon:") else owner_id


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def run_event(record: RunRecord) -> tuple[str, str, str] | None:
    """``(event id, event type, body)`` of a run that ended, or ``None`` while it runs.

    The event id is derived from the run, so the same run queued twice (by the worker that
    ended it and by one that finished its record) is one event.
    """
    event_type = _RUN_EVENTS.get(record.status)
    if event_type is None:
        return None
    key = "\x00".join(("run", record.owner_id, record.thread_id, record.run_id))
    event_id = "msg_" + hashlib.sha256(key.encode()).hexdigest()[:32]
    line = run_usage(record.usage)
    usage = None
    if line is not None:
        usage = {
            "model": line.model,
            "provider": line.provider,
            "inputTokens": line.input_tokens,
            "outputTokens": line.output_tokens,
            "totalTokens": line.total_tokens,
            "costUsd": None if line.cost_usd is None else str(line.cost_usd),
        }
    data: dict[str, Any] = {
        "threadId": record.thread_id,
        "runId": record.run_id,
        "userId": _user_id(record.owner_id),
        "status": record.status,
        "startedAt": _iso(record.started_at),
        "finishedAt": _iso(record.finished_at),
        "usage": usage,
    }
    if record.status == RunStatus.ERRORED:
        data["error"] = record.error
    return event_id, event_type, _body(event_type, record.finished_at or timezone.now(), data)


def thread_deleted_event(owner_id: str, thread_id: str) -> tuple[str, str, str]:
    """``(event id, event type, body)`` of the owner's thread, deleted now."""
    data = {"threadId": thread_id, "userId": _user_id(owner_id)}
    event_id = "msg_" + secrets.token_hex(16)
    return event_id, THREAD_DELETED, _body(THREAD_DELETED, timezone.now(), data)
