"""``python -m bench.search``: ``GET threads/?q=`` and its pages on a big owner.

Fills a fresh database with ``--owners`` owners of ``--messages-per-owner`` messages each
(threads of ``--messages-per-thread``, user and assistant texts drawn from a 5,000-word
vocabulary with Zipf frequencies, so some words are in most threads and some in a few), then
times ``DefaultConversationStore.find_threads`` for one owner (what the route calls, without
HTTP): searches for a common, a medium and a rare word, two words, a word prefix, and the
plain list's first and a later page; ``--samples`` of each, p50 and p95. ``DATABASE_URL`` picks
the database (default: SQLite in a temporary directory); on PostgreSQL the database is created
afresh and dropped afterwards. The first search's catch-up of the lazy index (every message of
the fill) is timed on its own, before the samples; on PostgreSQL ``VACUUM ANALYZE`` follows
(what autovacuum does once the catch-up has rewritten every message row).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import uuid
from typing import Any

VOCABULARY = 5000
_SEED = 25


def _words() -> tuple[list[str], list[float]]:
    rng = random.Random(_SEED)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < VOCABULARY:
        word = "".join(rng.choice(letters) for _ in range(rng.randint(4, 9)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    weights = [1 / (rank + 1) for rank in range(VOCABULARY)]
    return words, weights


def _fill(owners: int, per_owner: int, per_thread: int) -> None:
    from django.utils import timezone

    from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage

    words, weights = _words()
    rng = random.Random(_SEED)
    now = timezone.now()
    for owner in range(owners):
        threads = per_owner // per_thread
        for start in range(0, threads, 100):
            rows = StoredConversation.objects.bulk_create(
                StoredConversation(
                    owner_id=str(owner + 1),
                    thread_id=f"t{n}",
                    title=" ".join(rng.choices(words, weights, k=4)),
                    updated_at=now - timezone.timedelta(minutes=n),
                )
                for n in range(start, min(start + 100, threads))
            )
            messages = [
                StoredMessage(
                    conversation_id=row.pk,
                    position=position,
                    message_uuid=uuid.uuid4(),
                    role="user" if position % 2 == 0 else "assistant",
                    content=" ".join(rng.choices(words, weights, k=rng.randint(8, 40))),
                    status="complete",
                )
                for row in rows
                for position in range(per_thread)
            ]
            StoredMessage.objects.bulk_create(messages, batch_size=2000)


def _time(samples: int, call: Any) -> tuple[float, float, int]:
    timings = []
    found = 0
    for _ in range(samples):
        started = time.perf_counter()
        page = call()
        timings.append((time.perf_counter() - started) * 1000)
        found = len(page.hits)
    timings.sort()
    p95 = timings[min(len(timings) - 1, int(len(timings) * 0.95))]
    return statistics.median(timings), p95, found


def _queries() -> list[tuple[str, dict[str, Any]]]:
    from django_pydantic_agent.contrib.store.search import find_threads
    from django_pydantic_agent.persistence.listing import ThreadQuery

    words, _ = _words()
    first = find_threads("1", ThreadQuery(limit=20))
    later = ["k", *first.next_position[1:]] if first.next_position else None
    return [
        (f"common word (rank 1) {words[0]!r}", {"text": words[0]}),
        (f"medium word (rank 200) {words[199]!r}", {"text": words[199]}),
        (f"rare word (rank 4,000) {words[3999]!r}", {"text": words[3999]}),
        (f"two words {words[5]!r} {words[300]!r}", {"text": f"{words[5]} {words[300]}"}),
        (f"prefix {words[50][:3]!r}", {"text": words[50][:3]}),
        ("list, first page", {}),
        ("list, second page", {"after": later}),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--owners", type=int, default=2)
    parser.add_argument("--messages-per-owner", type=int, default=100_000)
    parser.add_argument("--messages-per-thread", type=int, default=50)
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    url = os.environ.get("DATABASE_URL", "")
    fresh = None
    if url.startswith("postgres"):
        from bench.report import fresh_postgres

        fresh = fresh_postgres(url)
        os.environ["DATABASE_URL"] = fresh.__enter__()
    rows: list[str] = []
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from django_pydantic_agent.contrib.store.search import find_threads
        from django_pydantic_agent.persistence.listing import ThreadQuery

        call_command("migrate", verbosity=0)
        started = time.perf_counter()
        _fill(args.owners, args.messages_per_owner, args.messages_per_thread)
        filled = time.perf_counter() - started
        vendor = connection.vendor
        # The lazy index (migration 0018): the first search indexes the whole fill.
        from django_pydantic_agent.contrib.store.search_index import catch_up

        started = time.perf_counter()
        indexed = catch_up(connection.alias)
        took = time.perf_counter() - started
        caught_up = (
            f" The first search indexed the {indexed:,} user and assistant messages in "
            f"{took:.1f} s ({took * 1e6 / max(indexed, 1):.0f} µs a message)."
        )
        if vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("VACUUM ANALYZE")
        for label, kwargs in _queries():
            query = ThreadQuery(limit=20, **kwargs)
            p50, p95, found = _time(args.samples, lambda q=query: find_threads("1", q))
            rows.append(f"| {vendor} | {label} | {found} | {p50:.1f} | {p95:.1f} |")
    finally:
        if fresh is not None:
            from django.db import connections

            connections.close_all()
            fresh.__exit__(None, None, None)
    print(
        f"{args.owners} owners x {args.messages_per_owner:,} messages "
        f"({args.messages_per_thread} per thread), filled in {filled:.0f} s; "
        f"{args.samples} samples of each query for owner 1, 20 threads a page.{caught_up}"
    )
    print()
    print("| database | query | threads | p50 ms | p95 ms |")
    print("| --- | --- | ---: | ---: | ---: |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
