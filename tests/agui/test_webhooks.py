"""Signed webhooks (``AGUIServer(webhooks=...)``) posted over real HTTP to a local receiver:
signed as Standard Webhooks specifies, retried with backoff from the database queue, delivered
by another worker after the first one died, owner-scoped, SSRF-checked, secrets kept out of
the log."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.utils import timezone

from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.store.models import StoredWebhookDelivery
from django_pydantic_agent.contrib.store.webhooks import DefaultWebhookQueue
from django_pydantic_agent.persistence.runs import RunRecord
from django_pydantic_agent.webhooks import (
    WebhookDispatcher,
    Webhooks,
    WebhookTargetError,
    new_secret,
)
from tests.agui.conftest import logged_in, run_body, sse_events
from tests.agui.urls_webhooks import SECRET, hooked

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls_webhooks")]


class Receiver:
    """A real HTTP receiver on loopback: answers the scripted statuses in turn (then 204)."""

    def __init__(self, statuses: list[int]) -> None:
        self.statuses = statuses
        self.received: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.statuses.pop(0) if receiver.statuses else 204
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks?token=receiver-token"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[Receiver]:
    statuses = getattr(request, "param", [])
    found = Receiver(list(statuses))
    found.thread.start()
    dispatcher = hooked.webhook_dispatcher
    assert dispatcher is not None
    kept = dispatcher.options
    dispatcher.options = replace(kept, url=found.url)
    yield found
    dispatcher.options = kept
    found.server.shutdown()
    found.server.server_close()
    found.thread.join()


def verify(headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    """The receiver's side of Standard Webhooks, written from the spec."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        hmac.compare_digest(part.removeprefix("v1,"), expected)
        for part in headers["webhook-signature"].split()
    )


async def one_run(user: Any, thread: str = "thread-1", run: str = "run-1") -> None:
    async with await logged_in(user) as http:
        payload = run_body(thread_id=thread, run_id=run)
        payload["messages"] = [{"id": "u1", "role": "user", "content": "Secret plans"}]
        response = await http.post("/hooked/", json=payload)
    assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
    await RunCoordinator.wait_for_all_runs()


async def rows() -> list[StoredWebhookDelivery]:
    return [row async for row in StoredWebhookDelivery.objects.order_by("pk")]


def dispatcher() -> WebhookDispatcher:
    assert hooked.webhook_dispatcher is not None
    return hooked.webhook_dispatcher


async def make_due() -> None:
    """The backoff has passed (the row's next attempt moved to now)."""
    await StoredWebhookDelivery.objects.aupdate(next_attempt_at=timezone.now())


@pytest.mark.parametrize("receiver", [[500]], indirect=True)
async def test_a_receiver_that_fails_then_accepts_gets_the_event_signed_once_delivered(
    alice: Any, receiver: Receiver
) -> None:
    await one_run(alice)
    [queued] = await rows()
    assert (queued.event_type, queued.status, queued.attempts) == ("run.finished", "pending", 0)

    started = timezone.now()
    assert await dispatcher().deliver_due() == 1
    [failed] = await rows()
    # Durably recorded, retried later with backoff (first_retry_seconds=30, +-20 %).
    assert (failed.status, failed.attempts, failed.response_status) == ("pending", 1, 500)
    assert failed.next_attempt_at >= started + timedelta(seconds=23)
    assert await dispatcher().deliver_due() == 0  # not due yet: no second post

    await make_due()
    assert await dispatcher().deliver_due() == 1
    [done] = await rows()
    assert (done.status, done.attempts, done.response_status) == ("delivered", 2, 204)
    assert done.delivered_at is not None

    assert len(receiver.received) == 2
    (first, _), (headers, body) = receiver.received
    assert first["webhook-id"] == headers["webhook-id"]  # one id: the receiver dedupes
    assert verify(headers, body)
    assert not verify(headers, body, new_secret())
    assert not verify(headers, body.replace(b"run.finished", b"run.errored"))
    event = json.loads(body)
    assert event["type"] == "run.finished"
    assert event["data"]["threadId"] == "thread-1"
    assert event["data"]["runId"] == "run-1"
    assert b"Secret plans" not in body  # ids, never what was said


async def test_the_event_survives_the_worker_that_ended_the_run(
    alice: Any, receiver: Receiver
) -> None:
    """The event is in the database before any attempt: a worker that dies right after the
    run ends (its dispatcher never delivers) loses nothing; another worker's delivers it."""
    await one_run(alice)
    another_worker = WebhookDispatcher(dispatcher().options)
    assert await another_worker.deliver_due() == 1
    assert [row.status for row in await rows()] == ["delivered"]
    assert len(receiver.received) == 1
    assert await dispatcher().deliver_due() == 0  # delivered once


async def test_a_claimed_message_whose_worker_died_is_attempted_again_after_its_lease(
    alice: Any, receiver: Receiver
) -> None:
    await one_run(alice)
    queue = DefaultWebhookQueue()
    [claimed] = await queue.claim(limit=10, lease_seconds=60)  # then the worker dies
    assert await dispatcher().deliver_due() == 0  # leased: nobody else takes it meanwhile
    await make_due()  # the lease ran out
    assert await dispatcher().deliver_due() == 1
    [row] = await rows()
    assert (row.status, row.attempts) == ("delivered", 2)
    assert json.loads(receiver.received[0][1])["data"]["runId"] == claimed.run_id


@pytest.mark.parametrize("receiver", [[410]], indirect=True)
async def test_gone_gives_up_and_the_log_shows_neither_secret_nor_token(
    alice: Any, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    await one_run(alice)
    with caplog.at_level("INFO", logger="django_pydantic_agent.webhooks"):
        await dispatcher().deliver_due()
    [row] = await rows()
    assert (row.status, row.response_status) == ("failed", 410)
    assert "given up" in caplog.text
    assert SECRET not in caplog.text
    assert SECRET.removeprefix("whsec_") not in caplog.text
    assert "receiver-token" not in caplog.text
    assert "127.0.0.1" in caplog.text  # the target is still named


async def test_thread_deleted_is_sent_for_the_owners_thread_only(
    alice: Any, bob: Any, receiver: Receiver
) -> None:
    await one_run(alice)
    async with await logged_in(bob) as http:
        assert (await http.delete("/hooked/threads/thread-1/")).status_code == 204
    assert [row.event_type for row in await rows()] == ["run.finished"]  # bob deleted nothing
    async with await logged_in(alice) as http:
        assert (await http.delete("/hooked/threads/thread-1/")).status_code == 204
    await dispatcher().deliver_due()
    types = sorted(json.loads(body)["type"] for _, body in receiver.received)
    assert types == ["run.finished", "thread.deleted"]
    assert all(verify(headers, body) for headers, body in receiver.received)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("http://127.0.0.1/hook", {}),
        ("http://[::1]/hook", {}),
        ("http://10.1.2.3/hook", {}),
        ("http://192.168.0.1/hook", {"allow_loopback": True}),
        ("http://[::ffff:127.0.0.1]/hook", {"allow_private": True}),
        (
            "http://169.254.169.254/latest/meta-data",
            {"allow_private": True, "allow_loopback": True},
        ),
        ("http://0.0.0.0/hook", {"allow_private": True, "allow_loopback": True}),
        ("file:///etc/passwd", {"allow_private": True, "allow_loopback": True}),
    ],
)
def test_private_loopback_and_metadata_targets_are_refused(url: str, allowed: Any) -> None:
    with pytest.raises(WebhookTargetError):
        Webhooks(url=url, secret=SECRET, queue=DefaultWebhookQueue(), **allowed)


def test_allowed_targets_and_bad_secrets() -> None:
    Webhooks(
        url="http://10.1.2.3/hook", secret=SECRET, queue=DefaultWebhookQueue(), allow_private=True
    )
    for secret in ("not-a-secret", "whsec_!!", "whsec_c2hvcnQ="):
        with pytest.raises(ValueError, match="webhook secret") as caught:
            Webhooks(url="https://93.184.216.34/", secret=secret, queue=DefaultWebhookQueue())
        assert secret.removeprefix("whsec_") not in str(caught.value)
    assert SECRET not in repr(hooked.webhooks)


async def test_a_target_refused_at_attempt_time_is_not_posted(
    alice: Any, receiver: Receiver
) -> None:
    """The address is checked again before each attempt (DNS may have changed)."""
    await one_run(alice)
    options = dispatcher().options
    strict = WebhookDispatcher(options)
    object.__setattr__(strict.options, "allow_loopback", False)
    try:
        await strict.deliver_due()
    finally:
        object.__setattr__(options, "allow_loopback", True)
    [row] = await rows()
    assert row.status == "pending"
    assert "loopback" in row.last_error
    assert receiver.received == []


async def test_each_end_of_a_run_is_its_event_and_an_end_told_twice_is_one_event(
    receiver: Receiver,
) -> None:
    """The sweeper, a failed resume and the run's own worker may all tell an end: one row."""
    ended = timezone.now()
    records = [
        RunRecord(owner_id="7", thread_id="t", run_id="r-err", status="errored", error="boom"),
        RunRecord(owner_id="anon:sessionkey", thread_id="t", run_id="r-stop", status="interrupted"),
        RunRecord(owner_id="7", thread_id="t", run_id="r-live"),  # still running: no event
    ]
    records = [replace(r, finished_at=ended) if not r.running else r for r in records]
    await dispatcher().run_ended(records)
    await dispatcher().run_ended(records[:1])  # told again
    await dispatcher().deliver_due()
    events = sorted((json.loads(body) for _, body in receiver.received), key=lambda e: e["type"])
    assert [(e["type"], e["data"]["runId"]) for e in events] == [
        ("run.cancelled", "r-stop"),
        ("run.errored", "r-err"),
    ]
    assert events[0]["data"]["userId"] is None  # an anonymous session's key is never sent
    assert events[1]["data"]["userId"] == "7"
    assert events[1]["data"]["error"] == "boom"
    assert len(await rows()) == 2
