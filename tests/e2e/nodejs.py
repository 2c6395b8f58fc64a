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
