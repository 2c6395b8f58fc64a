"""``python -m bench``: measure contrib.store on a fresh database and print a Markdown table.

Options: ``--messages`` (default 1000), ``--threads`` (10000), ``--orphans`` (5000),
``--samples`` (50). ``DATABASE_URL`` selects the database (default: SQLite in a temporary
directory, or under ``BENCH_DIR``); blobs go to a filesystem directory next to it.
``--suite chat-history`` prints only the Memory Service request table (``--turns``, default
50); ``--suite store`` only the store timings.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--orphans", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--suite", choices=("all", "store", "chat-history"), default="all")
    args = parser.parse_args(argv)
    for name in ("messages", "threads", "orphans", "samples", "turns"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)!r} is not valid: pass a positive integer.")

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    call_command("migrate", verbosity=0)
    vendor = connection.vendor
    if vendor == "sqlite":
        import sqlite3

        vendor += f" {sqlite3.sqlite_version}"
    print(f"Python {platform.python_version()}, Django {django.get_version()}, {vendor}")
    print(f"database: {settings.DATABASES['default']['NAME']}")
    if args.suite in ("all", "store"):
        from bench.measure import HEADER
        from bench.scenarios import run_all

        figures = run_all(
            messages=args.messages,
            threads=args.threads,
            orphans=args.orphans,
            samples=args.samples,
        )
        print()
        print(HEADER)
        for figure in figures:
            print(figure.row())
    if args.suite in ("all", "chat-history"):
        from bench.chat_history_requests import run

        print()
        run(turns=args.turns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
