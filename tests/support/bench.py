"""Run one ``bench/`` module in a child process, the way docs/benchmarks.md runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The child picks its own settings and database: the suite's must not leak into it.
_SUITE_ONLY = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")


def run_bench(
    module: str,
    *argv: str,
    bench_dir: Path,
    env: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    timeout: int = 120,
) -> subprocess.CompletedProcess[str]:
    """``python -m <module> <argv>`` from the repository root with ``BENCH_DIR=bench_dir``."""
    child = {k: v for k, v in os.environ.items() if k not in (*_SUITE_ONLY, *drop)}
    child.update({"BENCH_DIR": str(bench_dir), "PYTHONPATH": str(ROOT), **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=ROOT,
        env=child,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
