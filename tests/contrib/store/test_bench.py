"""The bench/ scenarios at toy sizes: they run, and what they measure is what they claim."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import main
from bench.scenarios import bench_append, bench_list, bench_prune
from django_pydantic_agent.contrib.store.models import StoredAttachment, StoredMessage
from tests.support.bench import ROOT, run_bench


@pytest.mark.django_db
def test_append_scenario_reports_constant_queries_per_append() -> None:
    figures = {f.operation: f for f in bench_append(messages=40, samples=3)}

    assert figures["append one message"].queries <= 8
    assert figures["grow the last message"].queries <= 8
    assert figures["load"].queries == 1  # the rows, joined on the thread
    # Growing a second thread one save at a time: 40 saves, each a handful of queries.
    assert figures["grow to 40 messages, one save each (total)"].queries <= 40 * 6
    assert StoredMessage.objects.count() == 43 + 40


@pytest.mark.django_db
def test_list_scenario_is_one_query() -> None:
    [listing, exists] = bench_list(threads=30, samples=2, limit=10)
    assert listing.queries == 1
    assert exists.queries == 1


@pytest.mark.django_db(transaction=True)
def test_prune_scenario_removes_only_orphans() -> None:
    bench_prune(orphans=12, linked=3)
    assert StoredAttachment.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_main_prints_a_markdown_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--suite", "store", "--messages", "6", "--threads", "5", "--orphans", "4"]
    argv += ["--samples", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| scenario | operation | median ms | p95 ms | queries | WAL KiB | samples |" in out
    assert "| 6-message thread | append one message |" in out


def test_main_rejects_non_positive_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--orphans", "0"])
    assert "--orphans=0 is not valid" in capsys.readouterr().err


# Toy sizes, and one chat-history turn: the full 50-turn request budget has its own tests
# (tests/chat_history/test_memory_service.py).
TOY = [
    "--suite",
    "store",
    "--messages",
    "4",
    "--threads",
    "3",
    "--orphans",
    "2",
    "--samples",
    "1",
    "--turns",
    "1",
]


def _start_bench(env_overrides: dict[str, str]) -> subprocess.Popen[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
    }
    env.pop("BENCH_DIR", None)
    env.update(env_overrides)
    return subprocess.Popen(
        [sys.executable, "-m", "bench", *TOY],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@dataclass(frozen=True, kw_only=True)
class BenchRun:
    returncode: int
    stdout: str
    stderr: str
    directory: Path


@pytest.fixture(scope="module")
def bench_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BenchRun]:
    """``python -m bench`` three ways, started together: each run mostly waits on its disk."""
    base = tmp_path_factory.mktemp("bench")
    directories = {
        "existing BENCH_DIR": base / "kept",
        "missing BENCH_DIR": base / "not" / "yet",
        "no BENCH_DIR": base / "tmp",
    }
    directories["existing BENCH_DIR"].mkdir()
    directories["no BENCH_DIR"].mkdir()
    started = {
        "existing BENCH_DIR": _start_bench({"BENCH_DIR": str(directories["existing BENCH_DIR"])}),
        "missing BENCH_DIR": _start_bench({"BENCH_DIR": str(directories["missing BENCH_DIR"])}),
        "no BENCH_DIR": _start_bench({"TMPDIR": str(directories["no BENCH_DIR"])}),
    }
    runs = {}
    try:
        for name, process in started.items():
            stdout, stderr = process.communicate(timeout=120)
            runs[name] = BenchRun(
                returncode=process.returncode,
                stdout=stdout,
                stderr=stderr,
                directory=directories[name],
            )
    finally:
        for process in started.values():
            if process.poll() is None:  # pragma: no cover - only after a timeout
                process.kill()
                process.wait()
    return runs


def test_python_dash_m_bench_runs_from_the_repo_root(bench_runs: dict[str, BenchRun]) -> None:
    result = bench_runs["existing BENCH_DIR"]
    assert result.returncode == 0, result.stderr
    assert "agent_store_prune_attachments" in result.stdout
    assert (result.directory / "bench.sqlite3").exists()


def test_a_missing_bench_dir_is_created_and_kept(bench_runs: dict[str, BenchRun]) -> None:
    """Regression: a BENCH_DIR that did not exist yet crashed the run."""
    result = bench_runs["missing BENCH_DIR"]
    assert result.returncode == 0, result.stderr
    assert (result.directory / "bench.sqlite3").exists()


def test_the_temporary_directory_is_removed_at_exit(bench_runs: dict[str, BenchRun]) -> None:
    """Regression: without BENCH_DIR every run left a dpa-bench-* directory behind."""
    result = bench_runs["no BENCH_DIR"]
    assert result.returncode == 0, result.stderr
    assert list(result.directory.iterdir()) == []


@pytest.mark.timeout(300)  # every suite, on a shared 2-core machine
def test_quick_runs_every_suite_and_prints_sane_tables(tmp_path: Path) -> None:
    """``python -m bench --quick``: every suite runs over real HTTP and prints its table, and
    ``--write`` replaces only the text between the markers (no timings are asserted)."""
    from bench.report import END, START

    page = tmp_path / "benchmarks.md"
    page.write_text(f"# Benchmarks\n\nprose kept\n\n{START}\nold figures\n{END}\n\ntail kept\n")
    done = run_bench(
        "bench",
        *("--quick", "--no-predecessors", "--write", str(page)),
        bench_dir=tmp_path / "bench",
        drop=("REDIS_URL", "POSTGRES_URL"),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nprose kept\n")
    assert text.endswith("\ntail kept\n")
    assert "old figures" not in text
    for title in (
        "contrib.store operations",
        "Memory Service requests per turn",
        "What a run reads of a long thread on the Memory Service",
        "Streaming a 2,000-delta run over HTTP",
        "Time to the first event on a new thread",
        "The durable path's own cost on the event loop",
        "The run path: a turn at message 10",
        "What a run reads and what the model is sent",
        "The same turn, the client posting the thread back",
        "The same turn with a window of 10 messages at every size",
        "What a run reads and what the model is sent, window of 10",
        "The run path's writes alone, at message 10",
        "A turn at message 10 and 40, the client posting one new message",
        "A turn at message 10 and 40, the client posting the whole transcript",
        "Reattach latency",
        "Cancel latency",
        "Upload RSS",
        "The sweeper on 20 stale runs",
        "The AI SDK's stream against AG-UI's on a 2,000-delta run",
        "A resume's first byte (`GET api/chat/<id>/stream`)",
    ):
        assert f"### {title}" in text
    assert text.count("Machine: ") == 20
    assert text.count("$ python -m bench --quick --no-predecessors --write") >= 12
    # Each streaming row counts the whole run: RUN_STARTED, 2,000 deltas with their
    # start and end, RUN_FINISHED.
    streaming = [line for line in text.splitlines() if line.startswith("| django-pydantic-agent")]
    assert len(streaming) == 3
    assert all("| 2004 |" in line for line in streaming)
    assert "| sqlite | 20 |" in text
    # The rows a run read: a thread of 40 (and the turn the timed run added) whole in the
    # default window, the newest 10 in a window of 10.
    assert "| 40 | 42 | n/a |" in text
    assert "| 40 | 10 | n/a |" in text
    # Both paths of the overhead table streamed the whole run, and the durable one costs more.
    overhead = [line for line in text.splitlines() if line.startswith(("| stateless", "| durable"))]
    assert len(overhead) == 2
    assert overhead[1].split("|")[4].strip().startswith("+")
    assert "REDIS_URL is not set" in text
    # The same run on both wires: AG-UI's 2,004 events, the AI SDK's 2,006 chunks (start,
    # start-step, the text with its start and end, finish-step, finish).
    assert "| AG-UI `POST default/` | 2004 |" in text
    assert "| AI SDK `POST default-chat` | 2006 |" in text
    assert "| the worker running the run |" in text


def _stream(seconds: float) -> Any:
    from bench.live import Stream

    return Stream(
        status=200,
        first_byte=0.005,
        first_event=0.005,
        terminal=seconds - 0.001,
        closed=seconds,
        events=2000,
        terminal_type="RUN_FINISHED",
        outcome="success",
    )


def test_a_streaming_row_pairs_each_run_with_the_off_run_of_its_round() -> None:
    """Persistence costs 5% in every round, and the machine halves its speed from round 3 on,
    between round 3's off run and its on run: the paired ratio still reads 0.95x, where the
    ratio of the two medians reads about half."""
    from bench.streaming import Row

    off = [0.4, 0.4, 0.4, 0.8, 0.8]
    on = [0.4 * 1.05, 0.4 * 1.05, 0.8 * 1.05, 0.8 * 1.05, 0.8 * 1.05]
    on_streams = [_stream(seconds) for seconds in on]
    off_rates = [2000 / seconds for seconds in off]
    row = Row(
        server="s",
        persistence="on",
        streams=on_streams,
        baseline=sorted(off_rates)[2],
        paired=[
            stream.events_per_second / rate
            for stream, rate in zip(on_streams, off_rates, strict=True)
        ],
    )
    assert row.paired_ratio == pytest.approx(1 / 1.05)
    assert row.ratio == pytest.approx(0.5 / 1.05)
    low, high = row.paired_quartiles()
    assert low < row.paired_ratio == pytest.approx(high)
    cells = row.row().split(" | ")
    assert cells[5:7] == ["0.48\u00d7", f"0.95\u00d7 ({low:.2f} to 0.95)"]
    off_row = Row(server="s", persistence="off", streams=[_stream(s) for s in off])
    assert off_row.ratio is None
    assert off_row.paired_ratio is None
    assert off_row.row().split(" | ")[5:7] == ["", ""]


def test_the_upgrade_bench_migrates_there_back_and_there_again(tmp_path: Path) -> None:
    """``python -m bench.upgrade`` (docs/upgrading.md), at a toy size, on its own database."""
    done = run_bench(
        "bench.upgrade", "--conversations", "3", "--messages-per", "12", bench_dir=tmp_path
    )
    assert done.returncode == 0, done.stderr
    header, _rule, row = done.stdout.strip().splitlines()
    assert header.startswith("| database | messages | 0009 → 0012 |")
    assert row.startswith("| sqlite | 36 | ")
    assert row.count(" s |") == 3


def test_the_search_bench_times_every_query_on_its_own_database(tmp_path: Path) -> None:
    """``python -m bench.search`` (docs/benchmarks.md), at a toy size, on its own database."""
    argv = ["--messages-per-owner", "400", "--messages-per-thread", "10", "--samples", "2"]
    done = run_bench("bench.search", *argv, bench_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("2 owners x 400 messages (10 per thread)")
    # The lazy index: the first search indexed every message of the fill (all are texts).
    assert "The first search indexed the 800 user and assistant messages" in lines[0]
    rows = [line for line in lines if line.startswith("| sqlite |")]
    assert len(rows) == 7
    # Every search found threads of the owner, and the list pages are full.
    assert all(int(row.split(" | ")[2]) > 0 for row in rows)
    assert rows[-1].split(" | ")[2] == "20"


def test_the_spend_bench_prints_its_row(tmp_path: Path) -> None:
    """``python -m bench.spend`` (docs/benchmarks.md, "Spend check"), at a toy size."""
    pytest.importorskip("pydantic_ai_harness", reason="the spend bench needs the harness extra")
    done = run_bench("bench.spend", "--samples", "4", bench_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    header, _rule, row = done.stdout.strip().splitlines()
    assert header.startswith("| database | runs | run without limits (median ms) |")
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:2] == ["sqlite", "4"]
    assert all(float(cell) > -1000 for cell in cells[2:])


def test_the_save_cpu_bench_prints_cpu_and_wall_of_both_operations(tmp_path: Path) -> None:
    """``python -m bench.save_cpu`` (docs/benchmarks.md, "save() against 0.28.3"), at a toy size."""
    argv = ["--messages", "20", "--samples", "2", "--rounds", "1", "--no-predecessor"]
    done = run_bench("bench.save_cpu", *argv, bench_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.splitlines()[0])
    assert figures["which"] == "ours"
    assert figures["vendor"] == "sqlite"
    assert figures["first_cpu_ms"] > 0
    assert figures["grow_cpu_ms"] > figures["first_cpu_ms"]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| first save")]
    assert [row.split(" | ")[1] for row in rows] == ["cpu ms", "wall ms"]
