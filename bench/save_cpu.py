# mypy: ignore-errors
# (runs under this package and, as a script, under the predecessor's virtualenv)
"""``python -m bench.save_cpu``: ``save()``'s write path against 0.28.3, in turns, CPU and wall.

On a machine shared with other jobs wall times swing by 2-5x between runs; the CPU time of the
process does not (SQLite works in the process, so its CPU is the whole cost; on PostgreSQL the
server's share is not in it, so the WAL written is given too). Each round runs a fresh
process of this package, then one of 0.28.3, on fresh databases of their own, and prints one
JSON line each: the median of ``--samples`` first saves of a ``--messages``-message thread
(bulk insert), and growing a thread to ``--messages``, one save per message (total). Then a
table of the medians over the rounds and the ratios. ``DATABASE_URL`` (PostgreSQL) gives each
process a fresh database on that server; default SQLite files. ``--no-predecessor``: this
package only. Run as ``python bench/save_cpu.py --worker ours|theirs`` it is one process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _configure(url: str | None) -> None:
    import django
    from django.conf import settings

    here = Path(tempfile.mkdtemp(prefix="dpa-save-cpu-"))
    if url:
        import dj_database_url

        database = dj_database_url.parse(url)
    else:
        database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(here / "b.sqlite3")}
    memory = {"BACKEND": "django.core.files.storage.InMemoryStorage"}
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
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        STORAGES={
            "default": memory,
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
            "django_pydantic_agent_attachments": memory,
        },
    )
    django.setup()


def worker(which: str, messages: int, samples: int) -> dict[str, object]:
    """One process's figures (``which``: ``ours`` or ``theirs``, the label only)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    _configure(os.environ.get("DATABASE_URL"))
    from django.core.management import call_command
    from django.db import connection
    from measure import message

    call_command("migrate", verbosity=0)
    try:
        from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
        from django_pydantic_agent.persistence import Conversation
    except ImportError:  # 0.28.3
        from django_pydantic_agent.contrib.store.default_conversation_store import (
            DefaultConversationStore,
        )
        from django_pydantic_agent.persistence.types.conversation import Conversation

    store = DefaultConversationStore()
    history = [message(i) for i in range(messages)]

    def lsn() -> str | None:
        if connection.vendor != "postgresql":
            return None
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_lsn()")
            return cursor.fetchone()[0]

    def timed(action) -> tuple[float, float, float | None]:
        start = lsn()
        wall, cpu = time.perf_counter(), time.process_time()
        action()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        wal = None
        if start is not None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [start])
                wal = float(cursor.fetchone()[0]) / 1024
        return wall * 1000, cpu * 1000, wal

    def first(i: int) -> None:
        store._store(Conversation(thread_id=f"first-{i}", messages=history), "bench")

    def grow() -> None:
        growing: list[dict[str, object]] = []
        for n in range(messages):
            growing.append(message(n))
            store._store(Conversation(thread_id="grown", messages=growing), "bench")

    firsts = [timed(lambda i=i: first(i)) for i in range(samples)]
    grown = timed(grow)
    wals = [f[2] for f in firsts if f[2] is not None]
    return {
        "which": which,
        "vendor": connection.vendor,
        "first_wall_ms": statistics.median(f[0] for f in firsts),
        "first_cpu_ms": statistics.median(f[1] for f in firsts),
        "first_wal_kib": statistics.median(wals) if wals else None,
        "grow_wall_ms": grown[0],
        "grow_cpu_ms": grown[1],
        "grow_wal_kib": grown[2],
    }


def _run(python: Path, which: str, args: argparse.Namespace, url: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    env.pop("DATABASE_URL", None)
    if which == "ours":
        env["PYTHONPATH"] = str(ROOT)
    if url:
        env["DATABASE_URL"] = url
    argv = [str(python), str(Path(__file__).resolve()), "--worker", which]
    argv += ["--messages", str(args.messages), "--samples", str(args.samples)]
    # Not from ROOT: the predecessor must not import this repository's package.
    done = subprocess.run(argv, cwd=tempfile.gettempdir(), env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{which} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fresh(url: str | None):
    from contextlib import nullcontext

    if not url:
        return nullcontext(None)
    from bench.report import fresh_postgres

    return fresh_postgres(url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-predecessor", action="store_true")
    parser.add_argument(
        "--predecessor-python",
        type=Path,
        help="0.28.3's Python (default .venv-predecessor/bin/python; needs dj-database-url "
        "for DATABASE_URL)",
    )
    parser.add_argument("--worker", choices=["ours", "theirs"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.messages, args.samples)))
        return 0
    from bench.report import PREDECESSOR_VENV

    url = os.environ.get("DATABASE_URL") or None
    pythons = {"ours": Path(sys.executable)}
    if not args.no_predecessor:
        pythons["theirs"] = args.predecessor_python or PREDECESSOR_VENV / "bin" / "python"
    results: dict[str, list[dict]] = {which: [] for which in pythons}
    for _ in range(args.rounds):
        for which, python in pythons.items():
            with _fresh(url) as database:
                result = _run(python, which, args, database)
            results[which].append(result)
            print(json.dumps(result), flush=True)
    print()
    print("| operation | figure | this package | 0.28.3 | ratio |")
    print("| --- | --- | ---: | ---: | ---: |")
    for operation in ("first", "grow"):
        for figure in ("cpu_ms", "wall_ms", "wal_kib"):
            key = f"{operation}_{figure}"
            values = {w: [r[key] for r in rs if r[key] is not None] for w, rs in results.items()}
            if not values["ours"]:
                continue
            ours = statistics.median(values["ours"])
            theirs = statistics.median(values["theirs"]) if values.get("theirs") else None
            name = (
                f"first save of {args.messages:,} messages"
                if operation == "first"
                else f"grow to {args.messages:,} messages (total)"
            )
            cells = [f"{ours:.1f}", "n/a" if theirs is None else f"{theirs:.1f}"]
            ratio = "n/a" if not theirs else f"{ours / theirs:.2f}\u00d7"
            print(f"| {name} | {figure.replace('_', ' ')} | {cells[0]} | {cells[1]} | {ratio} |")
    return 0


if __name__ == "__main__":
    if "--worker" not in sys.argv:
        sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
