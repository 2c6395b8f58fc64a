"""``python -m bench.sqlite_defaults``: concurrent persisting runs on Django's default SQLite
settings, and on the options docs/contrib-store.md recommends.

``--runs`` runs (16) of ``bench.site``'s ``default/`` mount (``DefaultConversationStore``, the
streaming bench's agent of ``BENCH_DELTAS`` deltas), ``--concurrency`` (8) at a time, each on a
new thread, ``--rounds`` times, through one uvicorn process. Each configuration gets a fresh
SQLite file with a rollback journal (no WAL):

- Django's defaults, as ``startproject`` writes them: no ``OPTIONS``, so deferred transactions
  and sqlite3's 5 s timeout;
- ``"transaction_mode": "IMMEDIATE"`` and ``"timeout": 20``.

A run completed when its stream ended with ``RUN_FINISHED``; any other end (``RUN_ERROR``
"The run could not be stored", an error status) is a failed run. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import httpx

__all__ = ["HEADER", "main", "measure"]

HEADER = (
    "| SQLite settings | runs | at once | completed | failed | failed per round "
    "| round s (median) |\n"
    "| --- | ---: | ---: | ---: | ---: | --- | ---: |"
)
CONFIGURATIONS: tuple[tuple[str, dict[str, str]], ...] = (
    ("Django's defaults (no `OPTIONS`)", {"BENCH_SQLITE_DEFAULTS": "1"}),
    ('`"transaction_mode": "IMMEDIATE"`, `"timeout": 20`', {}),
)
_BENCH_USER = (
    "from django.contrib.auth import get_user_model; "
    "get_user_model().objects.get_or_create(username='bench')"
)
#: Between rounds: the previous round's runs store their last writes after their streams end.
SETTLE_SECONDS = 0.5


def _fresh_database(env: Mapping[str, str], bench_dir: Path, name: str) -> None:
    """Remove ``name`` (and its journals) from ``bench_dir``, then migrate it and add the user."""
    for suffix in ("", "-journal", "-wal", "-shm"):
        (bench_dir / f"{name}{suffix}").unlink(missing_ok=True)
    from bench.live import ROOT

    for command in (["migrate", "--verbosity", "0"], ["shell", "-c", _BENCH_USER]):
        subprocess.run(
            [sys.executable, "-m", "django", *command],
            cwd=ROOT,
            env=dict(env),
            check=True,
            capture_output=True,
        )


async def _round(origin: str, runs: int, concurrency: int) -> tuple[int, float]:
    """Failed runs of one round of ``runs`` runs, ``concurrency`` at a time; and its seconds."""
    from bench.live import run_body, stream

    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=120.0, limits=limits) as client:

        async def one(index: int) -> bool:
            thread = f"t-{uuid.uuid4().hex[:12]}"
            async with gate:
                result = await stream(
                    client, "POST", f"{origin}/default/", body=run_body(thread, f"r-{index}")
                )
            return result.status == 200 and result.terminal_type == "RUN_FINISHED"

        start = time.perf_counter()
        completed = await asyncio.gather(*(one(index) for index in range(runs)))
        took = time.perf_counter() - start
    return completed.count(False), took


def measure(runs: int, concurrency: int, rounds: int) -> list[str]:
    """One table row per configuration (``CONFIGURATIONS``)."""
    from bench.live import _env, served
    from bench.settings import BENCH_DIR

    lines = []
    for label, extra in CONFIGURATIONS:
        name = f"sqlite-{'defaults' if extra else 'immediate'}.sqlite3"
        env = {"BENCH_DB": name, "BENCH_SQLITE_WAL": "", **extra}
        _fresh_database(
            _env({"BENCH_DIR": str(BENCH_DIR), **env, "DJANGO_SETTINGS_MODULE": "bench.settings"}),
            BENCH_DIR,
            name,
        )
        failed: list[int] = []
        seconds: list[float] = []
        with served(env=env, emulator=False) as [live]:
            for index in range(rounds):
                if index:
                    time.sleep(SETTLE_SECONDS)
                lost, took = asyncio.run(_round(live.origin, runs, concurrency))
                failed.append(lost)
                seconds.append(took)
            time.sleep(SETTLE_SECONDS)
        total = runs * rounds
        lines.append(
            f"| {label} | {total} | {concurrency} | {total - sum(failed)} | {sum(failed)} "
            f"| {', '.join(map(str, failed))} | {statistics.median(seconds):.1f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16, help="runs per round")
    parser.add_argument("--concurrency", type=int, default=8, help="runs streaming at once")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    for option in ("runs", "concurrency", "rounds"):
        if getattr(args, option) < 1:
            parser.error(
                f"--{option}={getattr(args, option)!r} is not valid: pass a positive integer."
            )
    if os.environ.get("DATABASE_URL"):
        parser.error("This bench is SQLite's: unset DATABASE_URL.")
    import sqlite3

    from bench.report import machine

    lines = measure(args.runs, args.concurrency, args.rounds)
    print(f"Machine: {machine(f'SQLite {sqlite3.sqlite_version}')}.\n")
    print("\n".join([HEADER, *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
