"""``Webhooks``, the options of ``AGUIServer(webhooks=...)``, and the dispatcher that delivers.

``WebhookDispatcher`` queues an event when a run ends or a thread is deleted (its ``run_ended``
and ``thread_deleted`` are the run engine's and the thread routes' hooks) and delivers what is
due: each message is claimed from the queue, posted (signed, to the address its URL was checked
to resolve to, no redirects followed, within ``timeout_seconds``), and settled. A ``2xx`` is
delivered; anything else is retried with exponential backoff and jitter, with the same
``webhook-id``, until ``max_attempts`` (a ``410 Gone`` gives up at once). Delivery is
at-least-once: a receiver deduplicates on ``webhook-id``.

A mount's dispatcher delivers in a background task of the worker (started like the run
sweeper: by the mount's first request or the ASGI lifespan, woken as soon as an event is
queued here and every ``poll_seconds``), or, with ``poll_seconds=0``, only when
``manage.py agent_store_deliver_webhooks`` runs. Workers share the queue safely: a message is
claimed by one of them at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import random
import weakref
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from email.utils import parsedate_to_datetime
from typing import Any, Final

import httpx
from django.utils import timezone

from django_pydantic_agent.chat_history.protocols import missing_members
from django_pydantic_agent.persistence.outages import OutageLog, is_outage
from django_pydantic_agent.persistence.runs import RunRecord
from django_pydantic_agent.webhooks.events import (
    EVENT_TYPES,
    WebhookDelivery,
    WebhookMessage,
    WebhookQueue,
    run_event,
    thread_deleted_event,
)
from django_pydantic_agent.webhooks.signing import secret_key, signed_headers
from django_pydantic_agent.webhooks.targets import (
    WebhookTargetError,
    check_target,
    resolve_target,
    shown_url,
)

__all__ = ["DELIVERED", "FAILED", "PENDING", "WebhookDispatcher", "Webhooks"]

logger = logging.getLogger("django_pydantic_agent.webhooks")

PENDING: Final[str] = "pending"
DELIVERED: Final[str] = "delivered"
FAILED: Final[str] = "failed"
#: Messages claimed at once by one pass of ``deliver_due``.
_BATCH: Final[int] = 20
#: How much longer than the request timeout a claimed message stays with its worker.
_LEASE_MARGIN_SECONDS: Final[float] = 60.0
#: How much of the receiver's error answer the delivery log keeps.
_ERROR_CHARS: Final[int] = 500


@dataclass(frozen=True, kw_only=True)
class Webhooks:
    """Where a mount's webhooks go and how they are signed, kept and retried.

    ``url`` is one URL or several (each gets every event); ``secret`` one ``whsec_`` secret or
    several (each signs: pass the new one first while a receiver still knows only the old);
    ``queue`` the ``WebhookQueue`` that keeps them (``contrib.store``'s
    ``DefaultWebhookQueue()``). Raises ``TypeError``/``ValueError`` naming a wrong value (never
    the secret), and ``WebhookTargetError`` for a URL that resolves where webhooks may not go
    (``targets``): loopback addresses need ``allow_loopback``, private ones ``allow_private``.
    """

    url: str | Sequence[str]
    secret: str | Sequence[str] = field(repr=False)
    queue: WebhookQueue
    #: The event types sent (a subset of ``EVENT_TYPES``).
    events: Collection[str] = EVENT_TYPES
    allow_private: bool = False
    allow_loopback: bool = False
    #: How long one attempt may take, connecting and answering.
    timeout_seconds: float = 15.0
    #: Attempts before a message is given up (``failed``).
    max_attempts: int = 10
    #: The wait before the first retry; each next one waits four times longer, up to
    #: ``max_retry_seconds``, give or take a fifth (jitter).
    first_retry_seconds: float = 5.0
    max_retry_seconds: float = 6 * 3600.0
    #: How often the worker's background task looks for due messages; ``0``: no background
    #: task (deliver with ``manage.py agent_store_deliver_webhooks``).
    poll_seconds: float = 5.0

    def __post_init__(self) -> None:
        urls = (self.url,) if isinstance(self.url, str) else tuple(self.url)
        secrets = (self.secret,) if isinstance(self.secret, str) else tuple(self.secret)
        if not urls or not secrets:
            raise ValueError("Webhooks needs at least one url and one secret.")
        for one in urls:
            check_target(one, allow_private=self.allow_private, allow_loopback=self.allow_loopback)
        object.__setattr__(self, "url", urls)
        object.__setattr__(self, "secret", secrets)
        object.__setattr__(self, "_keys", tuple(secret_key(one) for one in secrets))
        missing = missing_members(self.queue, WebhookQueue)
        if missing:
            raise TypeError(
                f"queue={self.queue!r} is not a WebhookQueue (it has no {', '.join(missing)}); "
                "pass DefaultWebhookQueue() from django_pydantic_agent.contrib.store.webhooks."
            )
        unknown = set(self.events) - EVENT_TYPES if not isinstance(self.events, str) else {""}
        if unknown or not self.events:
            raise ValueError(
                f"events={self.events!r} names no event or unknown ones; pass a collection of "
                f"{', '.join(sorted(EVENT_TYPES))}."
            )
        object.__setattr__(self, "events", frozenset(self.events))
        for flag in ("allow_private", "allow_loopback"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(
                    f"{flag}={getattr(self, flag)!r} is not a bool; pass True or False."
                )
        for name in (
            "timeout_seconds",
            "first_retry_seconds",
            "max_retry_seconds",
            "poll_seconds",
            "max_attempts",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{name}={value!r} is not a number of 0 or more; pass one.")
        if self.timeout_seconds <= 0 or int(self.max_attempts) < 1:
            raise ValueError(
                f"timeout_seconds={self.timeout_seconds!r} and max_attempts="
                f"{self.max_attempts!r} must be positive; pass, for example, 15.0 and 10."
            )

    @property
    def keys(self) -> tuple[bytes, ...]:
        """The HMAC keys of ``secret``, in order."""
        keys: tuple[bytes, ...] = self._keys  # type: ignore[attr-defined]
        return keys

    def retry_delay(self, attempts: int) -> float:
        """Seconds until the next attempt after ``attempts`` failed ones (with jitter)."""
        delay = self.first_retry_seconds * 4.0 ** min(attempts - 1, 32)
        return min(self.max_retry_seconds, delay) * random.uniform(0.8, 1.2)


def _retry_after(response: httpx.Response) -> float:
    """The seconds a ``Retry-After`` header asks for (``0`` without one)."""
    value = response.headers.get("retry-after", "").strip()
    if value.isdigit():
        return float(value)
    with contextlib.suppress(TypeError, ValueError):
        return max(0.0, (parsedate_to_datetime(value) - timezone.now()).total_seconds())
    return 0.0


def _pinned(url: str, address: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """``url`` to ``address`` (the checked IP): the URL, its ``Host`` header and, for https, the
    TLS server name that keeps the certificate checked against the real host."""
    parsed = httpx.URL(url)
    extensions: dict[str, Any] = {}
    if parsed.scheme == "https":
        extensions["sni_hostname"] = parsed.host
    host = {"host": parsed.netloc.decode("ascii")}
    return str(parsed.copy_with(host=address.split("%", 1)[0])), host, extensions


class WebhookDispatcher:
    """A mount's webhooks (see the module docstring): queued by the hooks, delivered by
    ``deliver_due`` (once) or the background task (``start()`` to ``aclose()``)."""

    _instances: weakref.WeakSet[WebhookDispatcher] = weakref.WeakSet()

    def __init__(self, options: Webhooks) -> None:
        self.options = options
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._outages = OutageLog(logger)
        WebhookDispatcher._instances.add(self)

    # -- queueing -----------------------------------------------------------------------

    def _messages(
        self, event: tuple[str, str, str], owner_id: str, thread_id: str, run_id: str = ""
    ) -> list[WebhookMessage]:
        event_id, event_type, body = event
        if event_type not in self.options.events:
            return []
        return [
            WebhookMessage(
                event_id=event_id,
                event_type=event_type,
                url=url,
                body=body,
                owner_id=owner_id,
                thread_id=thread_id,
                run_id=run_id,
            )
            for url in self.options.url
        ]

    async def _enqueue(self, messages: list[WebhookMessage], what: str) -> None:
        """Queue ``messages`` and wake the background task; a failure is logged, not raised
        (the run or the delete it follows has happened)."""
        if not messages:
            return
        try:
            await self.options.queue.enqueue(messages)
        except Exception as exc:
            if not is_outage(exc):
                logger.exception("Queueing the webhook of %s failed.", what)
            else:
                logger.warning(
                    "Queueing the webhook of %s failed (%s: %s).", what, type(exc).__name__, exc
                )
            return
        task = self._task
        if task is None or task.done() or self._wake is None:
            return
        if task.get_loop() is asyncio.get_running_loop():
            self._wake.set()

    async def run_ended(self, records: Iterable[RunRecord]) -> None:
        """Queue the event of each run of ``records`` that ended (the run engine's hook)."""
        messages: list[WebhookMessage] = []
        for record in records:
            event = run_event(record)
            if event is not None:
                messages += self._messages(event, record.owner_id, record.thread_id, record.run_id)
        await self._enqueue(messages, "a run's end")

    async def thread_deleted(self, owner_id: str, thread_id: str) -> None:
        """Queue ``thread.deleted`` for the owner's thread (the thread routes' hook)."""
        event = thread_deleted_event(owner_id, thread_id)
        await self._enqueue(self._messages(event, owner_id, thread_id), "a thread's deletion")

    # -- delivering ---------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=self.options.timeout_seconds, follow_redirects=False)

    async def deliver_due(self, *, client: httpx.AsyncClient | None = None) -> int:
        """Attempt every message due now, once each (in batches); how many were attempted.

        ``client`` is the HTTP client to post with (one is opened for the call without it).
        """
        if client is None:
            async with self._client() as own:
                return await self.deliver_due(client=own)
        options, attempted = self.options, 0
        lease = options.timeout_seconds + _LEASE_MARGIN_SECONDS
        while True:
            batch = await options.queue.claim(limit=_BATCH, lease_seconds=lease)
            await asyncio.gather(*(self._attempt(client, delivery) for delivery in batch))
            attempted += len(batch)
            if len(batch) < _BATCH:
                return attempted

    async def _attempt(self, client: httpx.AsyncClient, delivery: WebhookDelivery) -> None:
        """Post ``delivery`` once and settle it in the queue."""
        options = self.options
        status: int | None = None
        error, wait = "", 0.0
        try:
            address = await resolve_target(
                delivery.url,
                allow_private=options.allow_private,
                allow_loopback=options.allow_loopback,
            )
            url, host, extensions = _pinned(delivery.url, address)
            body = delivery.body.encode()
            stamp = int(timezone.now().timestamp())
            headers = {**signed_headers(options.keys, delivery.event_id, stamp, body), **host}
            response = await client.post(url, content=body, headers=headers, extensions=extensions)
        except WebhookTargetError as exc:
            error = str(exc)
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        else:
            status = response.status_code
            if 200 <= status < 300:
                await options.queue.settle(delivery, status=DELIVERED, response_status=status)
                logger.info("Webhook %s (%s) delivered.", delivery.event_id, delivery.event_type)
                return
            error = f"HTTP {status}: {response.text[:_ERROR_CHARS]}".strip()
            wait = _retry_after(response) if status in (429, 503) else 0.0
        given_up = delivery.attempts >= options.max_attempts or status == 410
        delay = max(options.retry_delay(delivery.attempts), min(wait, options.max_retry_seconds))
        retry_at = None if given_up else timezone.now() + timedelta(seconds=delay)
        await options.queue.settle(
            delivery,
            status=FAILED if given_up else PENDING,
            next_attempt_at=retry_at,
            response_status=status,
            error=error,
        )
        logger.warning(
            "Webhook %s (%s) to %s failed on attempt %d of %d: %s; %s.",
            delivery.event_id,
            delivery.event_type,
            shown_url(delivery.url),
            delivery.attempts,
            options.max_attempts,
            error,
            "given up" if retry_at is None else f"next attempt in {delay:.0f} s",
        )

    # -- the background task ------------------------------------------------------------

    async def _deliver_forever(self) -> None:
        wake = self._wake = asyncio.Event()
        async with self._client() as client:
            while True:
                wake.clear()
                try:
                    await self.deliver_due(client=client)
                except Exception as exc:
                    if is_outage(exc):
                        self._outages.failed("Delivering webhooks", exc)
                    else:
                        logger.exception("Delivering webhooks failed; retrying in a moment.")
                else:
                    self._outages.recovered("Delivering webhooks")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), self.options.poll_seconds)

    def start(self) -> bool:
        """Start delivering in the background on the running event loop, once; whether it runs.

        ``False`` with ``poll_seconds=0`` or outside an event loop. Safe to call on every
        request (the mount's views do). A task of a loop that is gone is replaced.
        """
        if not self.options.poll_seconds:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        task = self._task
        if task is not None and not task.done():
            if task.get_loop() is loop:
                return True
            if not task.get_loop().is_closed():
                task.get_loop().call_soon_threadsafe(task.cancel)
        self._task = loop.create_task(
            self._deliver_forever(), name="agent webhook delivery", context=contextvars.Context()
        )
        return True

    async def aclose(self) -> None:
        """Stop the background task (if running) and wait for it; queued messages stay."""
        task, self._task = self._task, None
        if task is None or task.done():
            return
        if task.get_loop() is not asyncio.get_running_loop():
            if not task.get_loop().is_closed():
                task.get_loop().call_soon_threadsafe(task.cancel)
            return
        task.cancel()
        await asyncio.wait({task})

    @classmethod
    async def aclose_all(cls) -> None:
        """``aclose`` every dispatcher of this process (test teardown, shutdown)."""
        for dispatcher in list(cls._instances):
            await dispatcher.aclose()
