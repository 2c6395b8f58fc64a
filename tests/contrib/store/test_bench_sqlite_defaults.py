"""``bench/sqlite_defaults.py`` at a toy size: it serves both configurations and counts runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.sqlite_defaults import HEADER, main

ROOT = Path(__file__).resolve().parents[3]


def test_it_prints_completed_and_failed_runs_per_configuration(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
    }
    env.update({"BENCH_DIR": str(tmp_path), "BENCH_DELTAS": "5", "PYTHONPATH": str(ROOT)})
    toy = ["--runs", "2", "--concurrency", "2", "--rounds", "1"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.sqlite_defaults", *toy],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

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
