"""``python -m bench.branches``: fork, branch and switch a thread of N messages (contrib.store).

Measures ``DefaultConversationStore``'s sync hooks, as ``bench.scenarios`` does: a fork of
the whole active branch into a new thread, a regenerate's cut (``start_branch`` with the new
answer, one flush), a branch switch back and forth, and the load of the active branch of a
thread that branched. ``DATABASE_URL`` selects the database (a fresh PostgreSQL database is
created and dropped for the run); the default is SQLite under ``BENCH_DIR``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["bench_branches", "main"]


def bench_branches(messages: int = 1000, samples: int = 20) -> list[Any]:
    """Figures for forking, branching and switching a thread of ``messages`` messages."""
    from asgiref.sync import async_to_sync
    from django.test import RequestFactory

    from bench.measure import measure, message
    from django_pydantic_agent.chat_history import MessageCreate
    from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
    from django_pydantic_agent.persistence import Conversation

    store = DefaultConversationStore(allow_anonymous=True)
    request = RequestFactory().post("/agent/")
    request.session = _Session("bench-branches")  # type: ignore[attr-defined]
    owner = store._owner(request)
    thread = f"fork-{messages}"
    history = [message(i) for i in range(messages)]
    store._store(Conversation(thread_id=thread, messages=history), owner)
    scenario = f"{messages}-message thread"
    last = history[-1]["id"]
    fork = measure(
        scenario,
        "fork the whole active branch",
        samples,
        lambda i: store._fork_sync(thread, last, f"{thread}-copy-{i}", request),
    )

    async def regenerate(i: int) -> None:
        chats, repo = await store.repositories(request=request)
        chat = await chats.get_chat_by_thread_id(chats.user_uuid, thread)
        assert chat is not None
        records = await repo.get_chat_messages(chat.chat_uuid)
        async with repo.transaction():
            await repo.start_branch(chat.chat_uuid, records[-1].message_uuid)
            await repo.create_message(
                MessageCreate(chat_uuid=chat.chat_uuid, role="assistant", agui_id=f"again-{i}")
            )

    cut = measure(
        scenario,
        "regenerate the last answer (read the branch, cut, first row)",
        samples,
        async_to_sync(regenerate),
    )
    targets = [last, f"again-{samples - 1}"]
    switch = measure(
        scenario,
        "switch branches (PATCH activeMessageId)",
        samples,
        lambda i: store._activate_sync(thread, targets[i % 2], request),
    )
    load = measure(
        scenario,
        "load the active branch of a branched thread",
        samples,
        lambda _: store._fetch(thread, owner),
    )
    return [fork, cut, switch, load]


class _Session(dict[str, Any]):
    """The least of a session an anonymous owner needs: a key."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.session_key = key

    def save(self) -> None:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=20)
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
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        from django.db import connection

        from bench.measure import HEADER

        figures = bench_branches(args.messages, args.samples)
        vendor = connection.vendor
    finally:
        if fresh is not None:
            from django.db import connections

            connections.close_all()
            fresh.__exit__(None, None, None)
    print(f"Database: {vendor}.\n")
    print(HEADER)
    for figure in figures:
        print(figure.row())
    return 0


if __name__ == "__main__":
    sys.exit(main())
