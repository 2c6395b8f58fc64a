"""Run the suites of ``python -m bench`` and assemble their Markdown (``--write`` puts it in the
docs page, between ``START`` and ``END``)."""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["END", "START", "Report", "machine", "run_suites"]

START = "<!-- bench:start (python -m bench --write rewrites this part) -->"
END = "<!-- bench:end -->"
ROOT = Path(__file__).resolve().parents[1]
PREDECESSOR_VENV = ROOT / ".venv-predecessor"
COMPETITOR_VENV = ROOT / ".venv-django-ag-ui"


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(database: str | None = None) -> str:
    """One line naming the CPU, cores, Python, Django and the database."""
    import django
    from django.db import connection

    if database is None:
        database = connection.vendor
        if database == "sqlite":
            import sqlite3

            database = f"SQLite {sqlite3.sqlite_version}"
        elif database == "postgresql":
            version = connection.cursor().connection.info.server_version
            database = f"PostgreSQL {version // 10000}.{version % 10000}"
    return (
        f"{_cpu()}, {os.cpu_count()} cores (shared), Linux {platform.release()}, "
        f"Python {platform.python_version()}, Django {django.get_version()}, {database}"
    )


@dataclass
class Report:
    """The sections of one ``python -m bench`` run, in order."""

    command: str
    parts: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def table(
        self,
        title: str,
        lines: Sequence[str],
        *,
        note: str = "",
        commands: Sequence[str] = (),
        database: str | None = None,
    ) -> None:
        block = [f"### {title}", ""]
        if note:
            block += [note, ""]
        block += ["```console", *(f"$ {c}" for c in (commands or [self.command])), "```", ""]
        block += [f"Machine: {machine(database)}.", "", *lines, ""]
        self.parts.append("\n".join(block))
        print("\n".join(block), file=sys.stderr, flush=True)

    def markdown(self) -> str:
        took = time.monotonic() - self.started
        return "\n".join(self.parts) + f"\nThe whole run took {took / 60:.1f} minutes.\n"

    def write(self, path: str) -> None:
        page = Path(path).read_text()
        if START not in page or END not in page:
            raise SystemExit(f"{path} has no {START!r} ... {END!r} markers to rewrite between.")
        head, rest = page.split(START, 1)
        _, tail = rest.split(END, 1)
        Path(path).write_text(f"{head}{START}\n\n{self.markdown()}\n{END}{tail}")


def _met(ok: bool) -> str:
    return "met" if ok else "missed"


# -- store and save() against 0.28.3 -----------------------------------------------------------


def _ensure_venv(venv: Path, *requirements: str) -> Path | None:
    python = venv / "bin" / "python"
    marker = venv / ".bench-installed"
    if marker.exists():
        return python
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *requirements], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"Could not install {requirements} in {venv}: {exc}", file=sys.stderr)
        return None
    marker.write_text(" ".join(requirements))
    return python


def _parse_table(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] != "scenario" and not cells[0].startswith("---"):
            rows[cells[1]] = cells
    return rows


def store_suite(report: Report, args: Any, *, compare: bool) -> None:
    from bench.measure import HEADER
    from bench.scenarios import run_all

    figures = run_all(
        messages=args.messages, threads=args.threads, orphans=args.orphans, samples=args.samples
    )
    ours = [HEADER, *(f.row() for f in figures)]
    sizes = [
        f"--messages {args.messages}",
        f"--threads {args.threads}",
        f"--orphans {args.orphans}",
        f"--samples {args.samples}",
    ]
    report.table("contrib.store operations", ours)
    if not compare:
        return
    python = _ensure_venv(PREDECESSOR_VENV, "django-pydantic-agent==0.28.3", "dj-database-url")
    if python is None:
        report.parts.append("0.28.3 could not be installed: no comparison.\n")
        return
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    env.pop("BENCH_DIR", None)
    if env.get("DATABASE_URL"):
        env.pop("DATABASE_URL")  # the predecessor gets a temporary SQLite file of its own
    command = [str(python), "bench/predecessor.py", *" ".join(sizes).split()]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"bench/predecessor.py failed:\n{done.stderr}")
    theirs = _parse_table(done.stdout)
    mine = _parse_table("\n".join(ours))
    grow = f"grow to {args.messages} messages, one save each (total)"
    rounds = _grow_in_turns(python, env, args.messages, GROW_ROUNDS)
    mine[grow][2] = f"{statistics.median(a for a, _ in rounds):.2f}"
    theirs[grow][2] = f"{statistics.median(b for _, b in rounds):.2f}"
    lines = [
        "| operation | this package ms | 0.28.3 ms | ratio | target |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    pairs = [
        (grow, grow, 0.5),
        ("first save (bulk insert)", "first save", 2.0),
        ("append one message", "append one message", None),
        ("grow the last message", "grow the last message", None),
        ("load", "load", None),
    ]
    for our_name, their_name, target in pairs:
        a, b = float(mine[our_name][2]), float(theirs[their_name][2])
        goal = "" if target is None else f"≤ {target:g}\u00d7: {_met(a / b <= target)}"
        lines.append(f"| {our_name} | {a:.2f} | {b:.2f} | {a / b:.2f}\u00d7 | {goal} |")
    per_round = ", ".join(f"{a / b:.2f}\u00d7" for a, b in rounds)
    report.table(
        f"save() against 0.28.3 ({args.messages:,}-message thread, medians)",
        lines,
        commands=[
            f"python -m bench --suite store {' '.join(sizes)}",
            f".venv-predecessor/bin/python bench/predecessor.py {' '.join(sizes)}",
        ],
        note=(
            f"Growing a thread is measured {GROW_ROUNDS} times in turns, this package then "
            f"0.28.3 (`bench/predecessor.py --grow-round N`), so both see the same load; "
            f"the row gives the medians. The ratio of each round: {per_round}."
        ),
    )


GROW_ROUNDS = 3


def _grow_in_turns(
    python: Path, env: dict[str, str], messages: int, rounds: int
) -> list[tuple[float, float]]:
    """``(ours, theirs)`` ms of growing a thread, each round one of each, back to back."""
    from bench.scenarios import grow_figure

    pairs = []
    for n in range(1, rounds + 1):
        ours = grow_figure(messages, round=n).median_ms
        command = [
            str(python),
            "bench/predecessor.py",
            f"--messages={messages}",
            f"--grow-round={n}",
        ]
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"bench/predecessor.py --grow-round failed:\n{done.stderr}")
        [row] = _parse_table(done.stdout).values()
        pairs.append((ours, float(row[2])))
    return pairs


# -- chat history ------------------------------------------------------------------------------


def chat_history_suite(report: Report, args: Any) -> None:
    from bench.chat_history_requests import HEADER, run

    lines: list[str] = []
    rows = run(turns=args.turns, emit=lambda line: None)
    lines = [HEADER, *(row.row() for row in rows)]
    within = all(row.within_budget for row in rows)
    report.table(
        "Memory Service requests per turn",
        lines,
        note=f"Budgets: {_met(within)}. The reference column quotes seed 000's figures.",
    )
    import asyncio

    from bench.chat_history_requests import serve
    from bench.memory_window import WINDOW_HEADER, measure_window

    with serve() as origin:
        window = asyncio.run(measure_window(f"{origin}/api/v2"))
    report.table(
        "What a run reads of a long thread on the Memory Service",
        [WINDOW_HEADER, *(row.row() for row in window)],
        note=(
            "One turn through AGUIStorageAgent (default window: 100 messages) on a seeded "
            "thread; events read are the message events the event listings returned."
        ),
    )


# -- HTTP suites -------------------------------------------------------------------------------


def _bench_user() -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get_or_create(username="bench")[0]


def streaming_suite(report: Report, args: Any) -> None:
    from bench.live import served
    from bench.streaming import (
        FIRST_EVENT_HEADER,
        HEADER,
        first_event_table,
        measure_mounts,
    )

    _bench_user()
    samples = args.streams
    with served() as [live]:
        o = live.origin
        rows = asyncio.run(
            measure_mounts(
                "django-pydantic-agent",
                [
                    ("off (NullConversationStore)", f"{o}/off/"),
                    ("on (DefaultConversationStore)", f"{o}/default/"),
                    ("on (Memory Service, emulator)", f"{o}/ms/"),
                ],
                samples=samples,
                off="off (NullConversationStore)",
            )
        )
        first = asyncio.run(
            first_event_table(
                f"{o}/off/", f"{o}/ms20/", f"{o}/lookups/", latency_ms=20, samples=max(3, samples)
            )
        )
    ratios = [r.ratio for r in rows if r.ratio is not None]
    paired = [r.paired_ratio for r in rows if r.paired_ratio is not None]
    closes = [r.median(lambda s: s.finished_to_close_ms) for r in rows]
    report.table(
        "Streaming a 2,000-delta run over HTTP",
        [HEADER, *(r.row() for r in rows)],
        note=(
            '"vs off" is the ratio of the medians; "paired vs off" the median of the '
            "per-round ratios (each round runs every mount once), with their quartiles. "
            f"Targets: events/s on ≥ 0.9\u00d7 off, paired: {_met(min(paired) >= 0.9)} "
            f"(lowest {min(paired):.2f}\u00d7; ratio of the medians {_met(min(ratios) >= 0.9)}, "
            f"lowest {min(ratios):.2f}\u00d7); RUN_FINISHED → close ≤ 10 ms: "
            f"{_met(max(closes) <= 10)} (highest {max(closes):.2f} ms)."
        ),
    )
    report.table(
        "Time to the first event on a new thread",
        [FIRST_EVENT_HEADER, *first],
        note=(
            "The Memory Service is the emulator behind a transport adding 20 ms to each "
            "request. One request is the median time of the server's thread lookups in these "
            "runs (a GET through that transport: the 20 ms, the emulator's work and the "
            "loopback); on a new thread it is the only request before the first event."
        ),
    )
    if not args.no_predecessors:
        competitor(report, args)


def competitor(report: Report, args: Any) -> None:
    from bench.live import served, served_app
    from bench.settings import BENCH_DIR
    from bench.streaming import HEADER, measure_mounts

    python = _ensure_venv(COMPETITOR_VENV, "django-ag-ui==0.70.0", "uvicorn")
    if python is None:
        report.parts.append("django-ag-ui 0.70.0 could not be installed: no comparison.\n")
        return
    site = ROOT / "bench" / "competitor"
    env = {"BENCH_DIR": str(BENCH_DIR), "PYTHONPATH": ""}
    subprocess.run(
        [str(python), "django_ag_ui_site.py"],
        cwd=site,
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )
    samples = args.streams
    with served_app(
        "django_ag_ui_site:application", python=str(python), cwd=site, env=env
    ) as theirs:
        their_rows = asyncio.run(
            measure_mounts(
                "django-ag-ui 0.70.0",
                [
                    ("off (no store)", f"{theirs.origin}/off/"),
                    ("on (django-spec-agents DefaultConversationStore)", f"{theirs.origin}/on/"),
                ],
                samples=samples,
                off="off (no store)",
            )
        )
    with served(emulator=False) as [live]:
        our_rows = asyncio.run(
            measure_mounts(
                "django-pydantic-agent",
                [
                    ("off (NullConversationStore)", f"{live.origin}/off/"),
                    ("on (DefaultConversationStore)", f"{live.origin}/default/"),
                ],
                samples=samples,
                off="off (NullConversationStore)",
            )
        )
    report.table(
        "Against django-ag-ui 0.70 on the same model",
        [HEADER, *(r.row() for r in [*our_rows, *their_rows])],
        note=(
            "Both serve a pydantic-ai FunctionModel streaming 2,000 deltas, on SQLite, each "
            "measured in its own server process; django-ag-ui runs in its own virtualenv "
            "(pydantic-ai as pip resolved it there)."
        ),
        commands=[
            report.command,
            ".venv-django-ag-ui/bin/python -m uvicorn django_ag_ui_site:application "
            "--app-dir bench/competitor",
        ],
    )


def overhead_suite(report: Report, args: Any) -> None:
    from bench.overhead import DELTAS, HEADER, measure

    rows = asyncio.run(measure(args.samples))
    report.table(
        f"The durable path's own cost on the event loop: one {DELTAS:,}-delta run",
        [HEADER, *rows],
        note=(
            "A scripted agent, no model and no database: the loop thread's CPU for one run "
            "through the stateless stream, and through GuardedStorageAgent, AGUIStorageAgent "
            "(in-memory repositories), the run manager, the relay and replay; runs of the two "
            "alternate. Cache writes in worker threads are not counted."
        ),
    )


def run_path_suite(report: Report, args: Any) -> None:
    from django.conf import settings

    from bench.live import served
    from bench.turncost import (
        HEADER,
        SAME_WINDOW,
        SIZES,
        TOKENS_HEADER,
        measure,
        seed,
        sent_to_model,
    )

    user = _bench_user()
    owner = str(user.pk)
    sizes = (10, 20, 40) if args.quick else SIZES
    samples = max(3, min(args.samples, 20))
    threads = {size: [seed(owner, size) for _ in range(samples)] for size in sizes}
    with served(emulator=False) as [live]:
        lines, _ = asyncio.run(measure(f"{live.origin}/short/", threads))
    vendor = settings.DATABASES["default"]["ENGINE"].rpartition(".")[2]
    report.table(
        f"The run path: a turn at message {sizes[0]:,}, {sizes[1]:,} and {sizes[2]:,} ({vendor})",
        [HEADER, *lines],
        note=(
            f"{samples} threads on DefaultConversationStore of each size (alternate user and "
            "assistant messages of about 50 words, every fifth answer with a tool call), one "
            "run on each, the sizes in turn, through the run endpoint: one new user message "
            "and a 5-delta answer. Wall time of the whole run, and the time to its "
            "first event (RUN_STARTED) and to the first event of the answer, which comes "
            "after the history is read; the model is sent the default HistoryWindow."
        ),
    )
    tokens = asyncio.run(sent_to_model(owner, {size: names[0] for size, names in threads.items()}))
    report.table(
        "What a run reads and what the model is sent",
        [TOKENS_HEADER, *tokens],
        note=(
            "One run per thread in process, on a cold worker (fresh repositories, so every "
            "row it needs is read): the message rows it read, on PostgreSQL the rows the "
            "database read to answer it (pg_stat_user_tables, every row a plan touched), and "
            "the history the model was sent, its tokens by pydantic-ai-harness's "
            "estimate_message_tokens."
        ),
    )
    # The same turn from a client that posts its transcript back, as the chat page does.
    threads = {size: [seed(owner, size) for _ in range(samples)] for size in sizes}
    with served(emulator=False) as [live]:
        lines, _ = asyncio.run(measure(f"{live.origin}/short/", threads, transcript=True))
    report.table(
        f"The same turn, the client posting the thread back ({vendor})",
        [HEADER, *lines],
        note=(
            "New threads as above; each run posts the thread's messages as GET threads/<id>/ "
            "returned them (read before the clock starts), then its new one, as the chat page "
            "and every AG-UI client do. The run checks what was posted from the first "
            "message of its window on."
        ),
    )
    # The same again with a window every size fills (SAME_WINDOW messages): what is left of
    # the difference above is the thread's length, not the window's size.
    from django_pydantic_agent.chat_history import HistoryWindow

    threads = {size: [seed(owner, size) for _ in range(samples)] for size in sizes}
    with served(emulator=False) as [live]:
        lines, _ = asyncio.run(measure(f"{live.origin}/short10/", threads))
    report.table(
        f"The same turn with a window of {SAME_WINDOW} messages at every size ({vendor})",
        [HEADER, *lines],
        note=(
            f"New threads as above, through a mount whose HistoryWindow holds at most "
            f"{SAME_WINDOW} messages, which a thread of {sizes[0]:,} fills: the model is sent "
            "as much at every size, so the ratios are the thread's length alone."
        ),
    )
    window = HistoryWindow(max_messages=SAME_WINDOW)
    firsts = {size: names[0] for size, names in threads.items()}
    tokens = asyncio.run(sent_to_model(owner, firsts, history=window))
    report.table(
        f"What a run reads and what the model is sent, window of {SAME_WINDOW}",
        [TOKENS_HEADER, *tokens],
        note="As above, with that window.",
    )


def long_thread_suite(report: Report, args: Any) -> None:
    """A turn at message 10 and 10,000 from a client posting one message, and from one posting
    its transcript back: the ratios issue 39 sets (1.3x and 1.5x)."""
    from django.conf import settings

    from bench.live import served
    from bench.turncost import HEADER, measure, seed

    owner = str(_bench_user().pk)
    sizes = (10, 40) if args.quick else (10, 10_000)
    samples = max(3, min(args.samples, 20))
    vendor = settings.DATABASES["default"]["ENGINE"].rpartition(".")[2]
    for transcript, title in ((False, "one new message"), (True, "the whole transcript")):
        threads = {size: [seed(owner, size) for _ in range(samples)] for size in sizes}
        with served(emulator=False) as [live]:
            lines, _ = asyncio.run(measure(f"{live.origin}/short/", threads, transcript=transcript))
        report.table(
            f"A turn at message {sizes[0]:,} and {sizes[-1]:,}, the client posting {title} "
            f"({vendor})",
            [HEADER, *lines],
            note=(
                f"{samples} threads of each size on DefaultConversationStore, as in the run-path "
                "suite; one run on each through the run endpoint, the sizes in turn. "
                + (
                    "Each run posts the thread's messages as GET threads/<id>/ returned them, "
                    "then its new one, JSON-encoded before the clock starts, as CopilotKit, "
                    "@ag-ui/client and useChat do."
                    if transcript
                    else "Each run posts its new message alone."
                )
            ),
        )


def append_suite(report: Report, args: Any) -> None:
    from bench.runpath import APPEND_HEADER, append_costs

    large = max(40, args.messages)
    lines = asyncio.run(append_costs(large=large, samples=max(3, min(args.samples, 20))))
    report.table(
        f"The run path's writes alone, at message 10 and at message {large:,}",
        [APPEND_HEADER, *lines],
        note=(
            "One turn's writes as the storage agent makes them (the user message, the answer, "
            "two deltas and the final status: five flushes) through OrmMessageRepository on a "
            "warm worker, in process: what an append costs without the history the agent reads."
        ),
    )


def runs_suite(report: Report, args: Any) -> None:
    from bench.live import served
    from bench.runs import (
        CANCEL_HEADER,
        REATTACH_HEADER,
        UPLOAD_HEADER,
        cancel_latency,
        cancel_row,
        reattach_rows,
        upload_rows,
    )

    _bench_user()
    samples = max(3, args.streams)
    with served(emulator=False) as [live]:
        reattach = asyncio.run(reattach_rows(live, samples=samples))
        same = asyncio.run(cancel_latency(live, live, samples=samples))
        upload = upload_rows(live, megabytes=args.upload_mb)
    report.table("Reattach latency", [REATTACH_HEADER, *reattach])
    cancel = [CANCEL_HEADER, cancel_row("the worker running the run", same)]
    note = "One worker uses the process's cache."
    redis = os.environ.get("REDIS_URL")
    if redis:
        row, database = _cancel_across_workers(os.environ.get("POSTGRES_URL"), redis, samples)
        cancel.append(row)
        if database:
            note += f" The two workers share {database} (a fresh database) and Redis."
        note += (
            " Across workers the cancel intent travels through Redis and the running worker "
            "reads it at most every 0.5 s (CANCEL_POLL_SECONDS)."
        )
    else:
        note += " REDIS_URL is not set: no shared cache, so no figure across two workers."
    report.table("Cancel latency", cancel, note=note)
    report.table(
        "Upload RSS",
        [UPLOAD_HEADER, *upload],
        note=f"One {args.upload_mb} MB file posted to attachments/ (DefaultAttachmentStore).",
    )


def capacity_suite(report: Report, args: Any) -> None:
    from bench.capacity import HEADER, SPLIT_HEADER, profile_path, split, wave

    _bench_user()
    lines = [HEADER]
    shares: list[tuple[str, float]] = []
    for streams in args.capacity:
        raw = profile_path() if streams == args.profile_at else None
        lines.append(wave(streams, profile=raw).row())
        if raw is not None and raw.exists():
            shares = split(raw)
    load = os.getloadavg()[0]
    report.table(
        "Capacity of one worker",
        lines,
        note=(
            "One uvicorn worker, persisting (the capacity/ mount, DefaultConversationStore), "
            "N runs at once of the example project's scripted model at 20 ms a word; the load "
            "generator is a process of its own on the same machine. Largest gap: per stream, "
            f"the longest wait between two events. Load average when done: {load:.1f}."
        ),
    )
    if shares:
        report.table(
            f"Where the server's CPU goes at {args.profile_at} streams (py-spy)",
            [SPLIT_HEADER, *(f"| {part} | {share:.0%} |" for part, share in shares)],
        )


def sweeper_suite(report: Report, args: Any) -> None:
    from bench.runs import SWEEP_HEADER, sweep_row

    lines = [SWEEP_HEADER, sweep_row(args.runs)]
    commands = [report.command]
    postgres = os.environ.get("POSTGRES_URL")
    if postgres and not os.environ.get("DATABASE_URL"):
        row, command = _sweep_on_postgres(postgres, args.runs)
        lines.append(row)
        commands.append(command)
    report.table(
        f"The sweeper on {args.runs:,} stale runs",
        lines,
        commands=commands,
        note="One transaction per run: each is locked, re-checked and finalised with its records.",
    )


@contextmanager
def fresh_postgres(url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database on the server of ``url``; its URL. Dropped after."""
    import psycopg

    name = f"dpa_bench_{uuid.uuid4().hex[:8]}"
    admin = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _bench_env(database: str) -> dict[str, str]:
    env = {**os.environ, "DATABASE_URL": database, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def _sweep_on_postgres(url: str, runs: int) -> tuple[str, str]:
    with fresh_postgres(url) as database:
        argv = [sys.executable, "-m", "bench", "--suite", "sweeper", "--runs", str(runs)]
        done = subprocess.run(
            argv, cwd=ROOT, env=_bench_env(database), capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"The PostgreSQL sweep failed:\n{done.stderr}")
        row = next(line for line in done.stdout.splitlines() if line.startswith("| postgresql"))
    name = urlsplit(database).path
    command = f"DATABASE_URL=postgres://…{name} python -m bench --suite sweeper --runs {runs}"
    return row, command


def _cancel_across_workers(postgres: str | None, redis: str, samples: int) -> tuple[str, str]:
    """Cancel through the other of two workers sharing Redis, on PostgreSQL when given."""
    from bench.live import served
    from bench.runs import cancel_latency, cancel_row

    env = {"REDIS_URL": redis, "BENCH_CACHE_PREFIX": f"dpa-bench-{uuid.uuid4().hex[:8]}"}
    if postgres is None:
        with served(2, env=env, emulator=False) as [first, second]:
            across = asyncio.run(cancel_latency(first, second, samples=samples))
        return cancel_row("the other worker (two uvicorn processes, SQLite, Redis)", across), ""
    with fresh_postgres(postgres) as database:
        prepare = _bench_env(database) | {"DJANGO_SETTINGS_MODULE": "bench.settings"}
        subprocess.run(
            [sys.executable, "-m", "django", "migrate", "--verbosity", "0"],
            cwd=ROOT,
            env=prepare,
            check=True,
        )
        user = (
            "from django.contrib.auth import get_user_model; "
            "get_user_model().objects.get_or_create(username='bench')"
        )
        subprocess.run(
            [sys.executable, "-m", "django", "shell", "-c", user],
            cwd=ROOT,
            env=prepare,
            check=True,
            capture_output=True,
        )
        with served(2, env={**env, "DATABASE_URL": database}, emulator=False) as [first, second]:
            across = asyncio.run(cancel_latency(first, second, samples=samples))
    label = "the other worker (two uvicorn processes, PostgreSQL, Redis)"
    return cancel_row(label, across), machine_db_postgres(postgres)


def machine_db_postgres(url: str) -> str:
    """``PostgreSQL <major>.<minor>`` of the server at ``url``."""
    import psycopg

    admin = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin) as conn:
        return f"PostgreSQL {conn.info.server_version // 10000}.{conn.info.server_version % 10000}"


def vercel_ai_suite(report: Report, args: Any) -> None:
    """The AI SDK transport against AG-UI's on the same runs, and a resume's first byte."""
    from bench.live import served
    from bench.vercel_ai import (
        RESUME_HEADER,
        THROUGHPUT_HEADER,
        resume_rows,
        throughput_rows,
    )

    _bench_user()
    samples = max(3, args.streams)
    with served(emulator=False) as [live]:
        rows, paired, medians = asyncio.run(throughput_rows(live, samples=samples))
    report.table(
        "The AI SDK's stream against AG-UI's on a 2,000-delta run",
        [THROUGHPUT_HEADER, *rows],
        note=(
            "One server (DefaultConversationStore), its AG-UI route and its AI SDK route "
            "(VercelAITransport) posted in turn, round by round, each run on a new thread. "
            "events/s counts each wire's own frames (AG-UI events; UI message chunks, [DONE] "
            "left out); deltas/s is the 2,000 deltas over the time to the end of the stream. "
            "The AI SDK's first byte is its `start` chunk, which carries the answer's id and so "
            "waits for the run's first message (AG-UI's RUN_STARTED goes out before the store "
            "is read); the first text is what a page shows first. "
            f"Target: the AI SDK's events/s \u2265 0.9\u00d7 AG-UI's, paired (the median of "
            f"the per-round ratios): {_met(paired >= 0.9)} ({paired:.2f}\u00d7; the ratio of "
            f"the medians {medians:.2f}\u00d7)."
        ),
    )
    redis = os.environ.get("REDIS_URL")
    env = (
        {}
        if not redis
        else {"REDIS_URL": redis, "BENCH_CACHE_PREFIX": f"dpa-bench-{uuid.uuid4().hex[:8]}"}
    )
    with served(2 if redis else 1, env=env, emulator=False) as workers:
        lines = resume_rows(workers, samples=samples)
    note = (
        "A run streams a delta every 10 ms; after 50 chunks `GET slow-chat/<id>/stream` asks "
        "for it; the time from sending that request to the first byte of its body (the "
        "`start` chunk, then the answer from its start)."
    )
    if not redis:
        note += " REDIS_URL is not set: no figure from another worker."
    report.table(
        "A resume's first byte (`GET api/chat/<id>/stream`)", [RESUME_HEADER, *lines], note=note
    )


def run_suites(report: Report, args: Any, suites: Sequence[str]) -> None:
    """Run ``suites`` in order, adding their tables to ``report``."""
    for suite in suites:
        if suite == "store":
            store_suite(report, args, compare=len(suites) > 1 and not args.no_predecessors)
        elif suite == "chat-history":
            chat_history_suite(report, args)
        elif suite == "streaming":
            streaming_suite(report, args)
        elif suite == "overhead":
            overhead_suite(report, args)
        elif suite == "run-path":
            run_path_suite(report, args)
            append_suite(report, args)
        elif suite == "long-thread":
            long_thread_suite(report, args)
        elif suite == "runs":
            runs_suite(report, args)
        elif suite == "capacity":
            capacity_suite(report, args)
        elif suite == "sweeper":
            sweeper_suite(report, args)
        elif suite == "vercel-ai":
            vercel_ai_suite(report, args)
