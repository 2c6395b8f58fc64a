"""Running the Node.js clients in ``tests/e2e/js`` from pytest."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

JS_DIR = Path(__file__).resolve().parent / "js"


def run_node(scripts: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run ``node <args>`` in ``scripts``, with ``env`` added, and decode the JSON it prints."""
    result = subprocess.run(
        ["node", *args],
        cwd=scripts,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, f"node {args[0]} failed ({result.returncode}):\n{result.stderr}"
    return json.loads(result.stdout)


def run_page_script(
    scripts: Path, script: str, *args: str, artifacts: Path, name: str, chromium: str
) -> tuple[Any, dict[str, Any]]:
    """Run a Chromium page script (``node <script> <args>``), keep its JSON report as
    ``<name>-report.json`` in ``artifacts``, check that it ended without an error or a page
    error, and return the report and its steps by name."""
    report = run_node(scripts, script, *args, env={"CHROMIUM": chromium})
    (artifacts / f"{name}-report.json").write_text(json.dumps(report, indent=2))
    assert "error" not in report, report.get("error")
    assert report["pageErrors"] == []
    return report, {step["step"]: step for step in report["steps"]}
