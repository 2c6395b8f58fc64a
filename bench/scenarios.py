"""The benchmark scenarios. Each needs a configured Django with contrib.store migrated.

They drive the stores' synchronous hooks and the management commands directly, so the
figures are database and storage work, not event-loop or HTTP overhead.
"""

from __future__ import annotations

import io
from datetime import timedelta

from django.core.files.base import ContentFile
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from bench.measure import Figure, measure, message
from django_pydantic_agent.contrib.store.models import (
    StoredAttachment,
    StoredConversation,
    resolve_attachment_storage,
)
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import Conversation

__all__ = ["bench_append", "bench_list", "bench_prune", "grow_figure", "run_all"]


def bench_append(messages: int = 1000, samples: int = 50) -> list[Figure]:
    """Creates (``samples // 10`` times), appends to, grows and loads a thread of ``messages``."""
    store = DefaultConversationStore()
    owner, thread = "bench-append", f"thread-{messages}"
    history = [message(i) for i in range(messages)]
    scenario = f"{messages}-message thread"

    def first_save(i: int) -> None:
        # Sample 0 creates the thread the appends use; later samples create fresh threads.
        target = thread if i == 0 else f"{thread}-first-{i}"
        store._store(Conversation(thread_id=target, messages=history), owner)

    figures = [measure(scenario, "first save (bulk insert)", max(1, samples // 10), first_save)]

    def append(i: int) -> None:
        history.append(message(len(history)))
        store._store(Conversation(thread_id=thread, messages=history), owner)

    figures.append(measure(scenario, "append one message", samples, append))

    def grow(i: int) -> None:
        history[-1] = {**history[-1], "content": history[-1]["content"] + f" delta {i}"}
        store._store(Conversation(thread_id=thread, messages=history), owner)

    figures.append(measure(scenario, "grow the last message", samples, grow))
    figures.append(
        measure(scenario, "load", max(1, samples // 5), lambda _: store._fetch(thread, owner))
    )

    figures.append(grow_figure(messages))
    return figures


def grow_figure(messages: int = 1000, round: int = 0) -> Figure:
    """A caller saving after every message: a new thread saved with 1, 2, ..., ``messages``."""
    store = DefaultConversationStore()
    thread = f"thread-{messages}-grown-{round}"

    def grow_thread(i: int) -> None:
        growing: list[dict[str, object]] = []
        for n in range(messages):
            growing.append(message(n))
            store._store(Conversation(thread_id=thread, messages=growing), "bench-append")

    return measure(
        f"{messages}-message thread",
        f"grow to {messages} messages, one save each (total)",
        1,
        grow_thread,
    )


def bench_list(threads: int = 10_000, samples: int = 50, limit: int = 50) -> list[Figure]:
    """Lists the newest ``limit`` of one owner's ``threads`` threads (others own as many)."""
    now = timezone.now()
    rows = []
    for i in range(threads):
        for owner in ("bench-list", "bench-list-other"):
            rows.append(
                StoredConversation(
                    owner_id=owner,
                    thread_id=f"t-{i}",
                    title=f"Thread {i}",
                    preview="a one-line preview",
                    updated_at=now - timedelta(seconds=i),
                )
            )
    StoredConversation.objects.bulk_create(rows, batch_size=1000)
    if connection.vendor == "postgresql":  # as autovacuum would, before the planner sees it
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {StoredConversation._meta.db_table}")
    store = DefaultConversationStore()
    scenario = f"{threads:,} threads per owner"
    figure = measure(
        scenario, f"list newest {limit}", samples, lambda _: store._list("bench-list", limit)
    )
    listed = store._list("bench-list", limit)
    assert [meta.thread_id for meta in listed][:2] == ["t-0", "t-1"], listed[:2]
    exists = measure(scenario, "exists", samples, lambda i: store._exists(f"t-{i}", "bench-list"))
    return [figure, exists]


def bench_prune(orphans: int = 5000, linked: int = 500) -> list[Figure]:
    """Prunes ``orphans`` old orphan attachments (real blobs) next to ``linked`` live ones."""
    storage = resolve_attachment_storage()
    old = timezone.now() - timedelta(days=2)
    conversation = StoredConversation.objects.create(owner_id="bench-prune", thread_id="keep")
    rows = []
    for i in range(orphans + linked):
        name = storage.save(f"django_pydantic_agent/attachments/bench-{i}", ContentFile(b"x" * 64))
        rows.append(
            StoredAttachment(
                owner_id="bench-prune", name=f"f{i}", size=64, file=name, created_at=old
            )
        )
    created = StoredAttachment.objects.bulk_create(rows, batch_size=1000)
    conversation.attachments.add(*created[orphans:])
    scenario = f"{orphans:,} orphan attachments"
    out = io.StringIO()
    dry = measure(
        scenario,
        "agent_store_prune_attachments --dry-run",
        1,
        lambda _: call_command("agent_store_prune_attachments", "--dry-run", stdout=out),
    )
    real = measure(
        scenario,
        "agent_store_prune_attachments",
        1,
        lambda _: call_command("agent_store_prune_attachments", stdout=out),
    )
    remaining = StoredAttachment.objects.filter(owner_id="bench-prune").count()
    assert remaining == linked, f"expected {linked} linked attachments to survive, got {remaining}"
    return [dry, real]


def run_all(
    *, messages: int = 1000, threads: int = 10_000, orphans: int = 5000, samples: int = 50
) -> list[Figure]:
    """Run every scenario and return the figures, in order."""
    return [
        *bench_append(messages, samples),
        *bench_list(threads, samples),
        *bench_prune(orphans),
    ]
