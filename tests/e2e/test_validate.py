"""(b) ``ag-ui-validate``, the conformance CLI, on the live endpoint and on a captured stream."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.example_project.support import RunningServer, cookie_header, run_input

pytestmark = pytest.mark.e2e

VALIDATE = str(Path(sys.executable).parent / "ag-ui-validate")


def _validate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [VALIDATE, "--no-color", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_live_endpoint_is_conformant(
    example_server: RunningServer, demo_client: httpx.Client
) -> None:
    result = _validate(
        f"{example_server.url}/agent/",
        "--timeout",
        "30",
        "--header",
        f"Cookie: {cookie_header(demo_client)}",
        "--header",
        f"X-CSRFToken: {demo_client.cookies['csrftoken']}",
        "--fail-on",
        "warning",
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no conformance violations" in result.stdout


def test_captured_stream_is_conformant(demo_client: httpx.Client, tmp_path: Path) -> None:
    capture = tmp_path / "run.sse"
    with demo_client.stream(
        "POST",
        "/agent/",
        json=run_input("Tell me a long story about 2 + 2", thread_id="captured", run_id="cap-1"),
        headers={"X-CSRFToken": demo_client.cookies["csrftoken"]},
    ) as response:
        assert response.status_code == 200
        capture.write_bytes(response.read())

    result = _validate(str(capture), "--fail-on", "warning")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no conformance violations" in result.stdout
