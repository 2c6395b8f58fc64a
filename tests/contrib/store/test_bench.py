"""The bench/ scenarios at toy sizes: they run, and what they measure is what they claim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.scenarios import bench_append, bench_list, bench_prune
from django_pydantic_agent.contrib.store.models import StoredAttachment, StoredMessage

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.django_db
def test_append_scenario_reports_constant_queries_per_append() -> None:
    figures = {f.operation: f for f in bench_append(messages=40, samples=3)}

    assert figures["append one message"].queries <= 8
    assert figures["grow the last message"].queries <= 8
    assert figures["load"].queries == 2
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
    assert main(["--messages", "6", "--threads", "5", "--orphans", "4", "--samples", "2"]) == 0
    out = capsys.readouterr().out
    assert "| scenario | operation | median ms | p95 ms | queries | WAL KiB | samples |" in out
    assert "| 6-message thread | append one message |" in out


def test_main_rejects_non_positive_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--orphans", "0"])
    assert "--orphans=0 is not valid" in capsys.readouterr().err


TOY = ["--messages", "4", "--threads", "3", "--orphans", "2", "--samples", "1"]


def _bench(env_overrides: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
    }
    env.pop("BENCH_DIR", None)
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_python_dash_m_bench_runs_from_the_repo_root(tmp_path: Path) -> None:
    result = _bench({"BENCH_DIR": str(tmp_path)}, *TOY)
    assert result.returncode == 0, result.stderr
    assert "agent_store_prune_attachments" in result.stdout
    assert (tmp_path / "bench.sqlite3").exists()


def test_a_missing_bench_dir_is_created_and_kept(tmp_path: Path) -> None:
    """Regression: a BENCH_DIR that did not exist yet crashed the run."""
    bench_dir = tmp_path / "not" / "yet"
    result = _bench({"BENCH_DIR": str(bench_dir)}, *TOY)
    assert result.returncode == 0, result.stderr
    assert (bench_dir / "bench.sqlite3").exists()


def test_the_temporary_directory_is_removed_at_exit(tmp_path: Path) -> None:
    """Regression: without BENCH_DIR every run left a dpa-bench-* directory behind."""
    result = _bench({"TMPDIR": str(tmp_path)}, *TOY)
    assert result.returncode == 0, result.stderr
    assert list(tmp_path.iterdir()) == []
