"""``python -m bench``: the benchmark suites, each printed as Markdown.

``--suite`` picks one (default ``all``): ``store`` (contrib.store timings, and with ``all``
the same against 0.28.3), ``chat-history`` (Memory Service requests per turn), ``streaming``
(events/s and time to first event over HTTP, persistence on and off, and django-ag-ui 0.70),
``overhead`` (the durable path's loop CPU per run over the stateless one, no model or database),
``run-path`` (a whole turn at message 10, 1,000 and 10,000, what the model is sent,
and an append at message 10 and at message 1,000), ``long-thread`` (a turn at message 10
and 10,000, the client posting one message or its whole transcript), ``runs`` (reattach,
cancel, upload RSS), ``sweeper`` (``sweep_runs`` on stale runs), ``vercel-ai`` (the AI SDK
transport's events/s against AG-UI's on the same run, and a resume's first byte) and
``capacity`` (one worker holding ``--capacity`` N concurrent streams: largest gaps, CPU and
RSS; not in ``all``). ``--quick`` shrinks every size to a smoke test. ``--write FILE`` replaces
the text between the bench markers of FILE (the docs page) with the output. ``DATABASE_URL``
selects the database (default: SQLite under ``BENCH_DIR`` or a temporary directory);
``POSTGRES_URL`` adds the sweeper on PostgreSQL, ``REDIS_URL`` the cancel and the resume across
two workers.
"""

from __future__ import annotations

import argparse
import os
import sys

SUITES = (
    "store",
    "chat-history",
    "streaming",
    "overhead",
    "run-path",
    "long-thread",
    "runs",
    "sweeper",
    "vercel-ai",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--orphans", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--runs", type=int, default=10_000, help="stale runs for the sweeper")
    parser.add_argument("--streams", type=int, default=5, help="runs per streaming figure")
    parser.add_argument("--upload-mb", type=int, default=50)
    parser.add_argument("--suite", choices=("all", *SUITES, "capacity"), default="all")
    parser.add_argument(
        "--capacity",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[25, 100, 250],
        help="concurrent streams per capacity wave (comma-separated)",
    )
    parser.add_argument(
        "--profile-at", type=int, default=100, help="the capacity wave py-spy records"
    )
    parser.add_argument("--quick", action="store_true", help="toy sizes: a smoke test")
    parser.add_argument(
        "--no-predecessors",
        action="store_true",
        help="skip 0.28.3 and django-ag-ui (no virtualenvs installed)",
    )
    parser.add_argument("--write", metavar="FILE", help="rewrite FILE between the bench markers")
    return parser


QUICK = {
    "messages": 20,
    "threads": 20,
    "orphans": 5,
    "samples": 2,
    "turns": 2,
    "runs": 20,
    "streams": 1,
    "upload_mb": 2,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    args = parser.parse_args(argv)
    if args.quick:
        for name, value in QUICK.items():
            setattr(args, name, min(getattr(args, name), value))
    for name in (
        "messages",
        "threads",
        "orphans",
        "samples",
        "turns",
        "runs",
        "streams",
        "upload_mb",
    ):
        if getattr(args, name) < 1:
            option = name.replace("_", "-")
            parser.error(
                f"--{option}={getattr(args, name)!r} is not valid: pass a positive integer."
            )

    if any(n < 1 for n in args.capacity):
        parser.error(f"--capacity={args.capacity!r} is not valid: pass positive integers.")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from bench.report import Report, run_suites

    shown = [
        f"{name}=…"
        for name in ("DATABASE_URL", "POSTGRES_URL", "REDIS_URL")
        if os.environ.get(name)
    ]
    report = Report(command=" ".join([*shown, "python -m bench", *argv]))
    run_suites(report, args, SUITES if args.suite == "all" else (args.suite,))
    text = report.markdown()
    print(text)
    if args.write:
        report.write(args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
