"""``bench/sqlite_defaults.py`` at a toy size: it serves both configurations and counts runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.sqlite_defaults import HEADER, main
from tests.support.bench import run_bench


def test_it_prints_completed_and_failed_runs_per_configuration(tmp_path: Path) -> None:
    toy = ["--runs", "2", "--concurrency", "2", "--rounds", "1"]
    done = run_bench("bench.sqlite_defaults", *toy, bench_dir=tmp_path, env={"BENCH_DELTAS": "5"})

    assert done.returncode == 0, done.stderr
    assert HEADER in done.stdout
    assert "| Django's defaults (no `OPTIONS`) | 2 | 2 | 2 | 0 | 0 |" in done.stdout
    assert '| `"transaction_mode": "IMMEDIATE"`, `"timeout": 20` | 2 | 2 | 2 | 0 | 0 |' in (
        done.stdout
    )
    assert {p.name for p in tmp_path.glob("*.sqlite3")} == {
        "sqlite-defaults.sqlite3",
        "sqlite-immediate.sqlite3",
    }


def test_it_refuses_sizes_below_one_and_other_databases(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit):
        main(["--rounds", "0"])
    assert "--rounds=0 is not valid" in capsys.readouterr().err
    monkeypatch.setenv("DATABASE_URL", "postgres://localhost/x")
    with pytest.raises(SystemExit):
        main([])
    assert "unset DATABASE_URL" in capsys.readouterr().err
