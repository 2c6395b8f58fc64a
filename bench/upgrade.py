"""``python -m bench.upgrade``: how long the one-row-shape migration takes on a big table.

Builds a database at ``0009_chat_records_and_run_records`` holding ``--conversations``
threads of ``--messages-per`` messages each as wire rows (the shape 0007 and ``save()`` of
0.29 left: a user question, and an answer that calls a tool, with its reasoning and result,
in every fourth turn), then times ``migrate`` to the newest migration, and back to 0009 and
forwards again. ``DATABASE_URL`` picks the database (default: a SQLite file in a temporary
directory); on PostgreSQL the database is created afresh and dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from typing import Any

APP = "django_pydantic_agent_store"
BEFORE = (APP, "0009_chat_records_and_run_records")


def _turn(thread: int, turn: int) -> list[dict[str, Any]]:
    text = f"question {turn} of thread {thread}: " + "lorem ipsum dolor sit amet " * 6
    messages: list[dict[str, Any]] = [{"id": f"u{turn}", "role": "user", "content": text}]
    if turn % 4 == 3:
        call = {"id": f"c{turn}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages += [
            {"id": f"r{turn}", "role": "reasoning", "content": "thinking " * 10},
            {"id": f"a{turn}t", "role": "assistant", "toolCalls": [call]},
            {"id": f"t{turn}", "role": "tool", "toolCallId": f"c{turn}", "content": "42"},
        ]
    messages.append({"id": f"a{turn}", "role": "assistant", "content": "an answer " * 20})
    return messages


def _fill(conversations: int, per: int) -> int:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    apps = executor.loader.project_state(BEFORE).apps
    conversation = apps.get_model(APP, "StoredConversation")
    message = apps.get_model(APP, "StoredMessage")
    total = 0
    for start in range(0, conversations, 200):
        threads = conversation.objects.bulk_create(
            conversation(owner_id="1", thread_id=f"t{n}", chat_uuid=uuid.uuid4())
            for n in range(start, min(start + 200, conversations))
        )
        rows = []
        for row in threads:
            wire: list[dict[str, Any]] = []
            turn = 0
            while len(wire) < per:
                wire += _turn(row.pk, turn)
                turn += 1
            for position, item in enumerate(wire[:per]):
                rows.append(
                    message(
                        conversation_id=row.pk,
                        position=position,
                        message_id=item["id"],
                        role=item["role"],
                        data=item,
                    )
                )
        message.objects.bulk_create(rows, batch_size=2000)
        total += len(rows)
    return total


def _timed(target: tuple[str, str] | None) -> float:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    leaf = target or executor.loader.graph.leaf_nodes(APP)[0]
    started = time.perf_counter()
    executor.migrate([leaf])
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument("--messages-per", type=int, default=50)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    url = os.environ.get("DATABASE_URL", "")
    fresh = None
    if url.startswith("postgres"):
        from bench.report import fresh_postgres

        fresh = fresh_postgres(url)
        os.environ["DATABASE_URL"] = fresh.__enter__()
    try:
        import django

        django.setup()
        from django.db import connection

        messages = _fill(args.conversations, args.messages_per)
        forwards = _timed(None)
        backwards = _timed(BEFORE)
        again = _timed(None)
        vendor = connection.vendor
    finally:
        if fresh is not None:
            from django.db import connections

            connections.close_all()
            fresh.__exit__(None, None, None)
    print("| database | messages | 0009 → 0012 | back to 0009 | 0009 → 0012 again |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| {vendor} | {messages:,} | {forwards:.1f} s | {backwards:.1f} s | {again:.1f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
