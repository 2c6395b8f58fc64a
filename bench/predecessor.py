# mypy: ignore-errors
# (type-checked against the predecessor package, which lives in another virtualenv)
"""The same scenarios against the predecessor, django-pydantic-agent 0.28.3, for comparison.

Its import name clashes with ours, so it runs from a separate virtualenv, as a script (not
``-m``, which would put this repository's package first on ``sys.path``)::

    python -m venv /tmp/dpa-old && /tmp/dpa-old/bin/pip install django-pydantic-agent==0.28.3
    /tmp/dpa-old/bin/python bench/predecessor.py

Same sizes and options as ``python -m bench``; ``DATABASE_URL`` and ``BENCH_DIR`` likewise.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import django
from django.conf import settings
from measure import HEADER, Figure, measure, message


def configure() -> None:
    bench_dir = Path(os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="dpa-old-bench-"))
    url = os.environ.get("DATABASE_URL")
    if url:
        import dj_database_url

        database = dj_database_url.parse(url)
    else:
        database = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(bench_dir / "bench.sqlite3"),
        }
    settings.configure(
        SECRET_KEY="bench-only-not-secret",
        USE_TZ=True,
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django_pydantic_agent.contrib.store",
        ],
        DATABASES={"default": database},
        STORAGES={
            "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
            "django_pydantic_agent_attachments": {
                "BACKEND": "django.core.files.storage.FileSystemStorage",
                "OPTIONS": {"location": str(bench_dir / "blobs")},
            },
        },
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()


def grow_figure(messages: int, round: int = 0) -> Figure:
    """As in bench.scenarios: a new thread saved with 1, 2, ..., ``messages`` messages."""
    from django_pydantic_agent.contrib.store.default_conversation_store import (
        DefaultConversationStore,
    )
    from django_pydantic_agent.persistence.types.conversation import Conversation

    store = DefaultConversationStore()
    thread = f"thread-{messages}-grown-{round}"

    def grow_thread(i: int) -> None:
        growing = []
        for n in range(messages):
            growing.append(message(n))
            store._store(Conversation(thread_id=thread, messages=growing), "bench-append")

    return measure(
        f"{messages}-message thread",
        f"grow to {messages} messages, one save each (total)",
        1,
        grow_thread,
    )


def run(messages: int, threads: int, orphans: int, samples: int) -> list[Figure]:
    from django.core.files.base import ContentFile
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from django_pydantic_agent.contrib.store.attachment_storage import attachment_storage
    from django_pydantic_agent.contrib.store.default_conversation_store import (
        DefaultConversationStore,
    )
    from django_pydantic_agent.contrib.store.models import StoredAttachment, StoredConversation
    from django_pydantic_agent.persistence.types.conversation import Conversation

    figures: list[Figure] = []
    store = DefaultConversationStore()
    owner, thread = "bench-append", f"thread-{messages}"
    history = [message(i) for i in range(messages)]
    scenario = f"{messages}-message thread"

    def first_save(i: int) -> None:
        # As in bench.scenarios: sample 0 creates the thread the appends use.
        target = thread if i == 0 else f"{thread}-first-{i}"
        store._store(Conversation(thread_id=target, messages=history), owner)

    figures.append(measure(scenario, "first save", max(1, samples // 10), first_save))

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

    now = timezone.now()
    rows = [
        StoredConversation(
            owner_id=who,
            thread_id=f"t-{i}",
            title=f"Thread {i}",
            preview="a one-line preview",
            messages=[],
        )
        for i in range(threads)
        for who in ("bench-list", "bench-list-other")
    ]
    StoredConversation.objects.bulk_create(rows, batch_size=1000)
    with transaction.atomic():  # auto_now stamped them all alike: spread them out
        for i in range(threads):
            StoredConversation.objects.filter(thread_id=f"t-{i}").update(
                updated_at=now - timedelta(seconds=i)
            )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {StoredConversation._meta.db_table}")
    scenario = f"{threads:,} threads per owner"
    figures.append(
        measure(scenario, "list newest 50", samples, lambda _: store._list("bench-list", 50))
    )
    figures.append(
        measure(scenario, "exists", samples, lambda i: store._exists(f"t-{i}", "bench-list"))
    )

    storage = attachment_storage()
    conversation = StoredConversation.objects.create(owner_id="bench-prune", thread_id="keep")
    linked = 500
    created = []
    for i in range(orphans + linked):
        name = storage.save(f"django_pydantic_agent/attachments/bench-{i}", ContentFile(b"x" * 64))
        created.append(
            StoredAttachment(
                owner_id="bench-prune", attachment_id=f"a{i}", name=f"f{i}", size=64, file=name
            )
        )
    created = StoredAttachment.objects.bulk_create(created, batch_size=1000)
    StoredAttachment.objects.update(created_at=now - timedelta(days=2))
    conversation.attachments.add(*created[orphans:])
    scenario = f"{orphans:,} orphan attachments"
    out = io.StringIO()
    figures.append(
        measure(
            scenario,
            "agent_store_prune_attachments --dry-run",
            1,
            lambda _: call_command("agent_store_prune_attachments", "--dry-run", stdout=out),
        )
    )
    figures.append(
        measure(
            scenario,
            "agent_store_prune_attachments",
            1,
            lambda _: call_command("agent_store_prune_attachments", stdout=out),
        )
    )
    remaining = StoredAttachment.objects.filter(owner_id="bench-prune").count()
    assert remaining == linked, f"expected {linked} linked attachments to survive, got {remaining}"
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/predecessor.py", description=__doc__)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--orphans", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument(
        "--grow-round",
        type=int,
        metavar="N",
        help="only grow a thread (round N of a comparison run in turns with this package)",
    )
    args = parser.parse_args()
    configure()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    if args.grow_round is not None:
        figures = [grow_figure(args.messages, args.grow_round)]
    else:
        figures = run(args.messages, args.threads, args.orphans, args.samples)
    from importlib.metadata import version

    print(
        f"django-pydantic-agent {version('django-pydantic-agent')} (predecessor), "
        f"Python {platform.python_version()}, Django {django.get_version()}, {connection.vendor}"
    )
    print()
    print(HEADER)
    for figure in figures:
        print(figure.row())
    return 0


if __name__ == "__main__":
    sys.exit(main())
