"""``docs/vercel-ai.md``'s Node snippet, as printed, against the example project: it prints
exactly the output the page shows."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.example_project.support import REPO_DIR, RunningServer, cookie_header

pytestmark = pytest.mark.e2e

PAGE = REPO_DIR / "docs" / "vercel-ai.md"


def documented() -> tuple[str, list[str]]:
    """The page's ``chat.mjs`` block and the output printed under it (its command left out)."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(
        r"```js\n(// chat\.mjs.*?)```\s*```console\n\$ [^\n]*\n(.*?)```", text, re.DOTALL
    )
    assert found is not None, "docs/vercel-ai.md has no chat.mjs block followed by its output"
    return found.group(1), found.group(2).splitlines()


def test_the_node_snippet_prints_what_the_page_shows(
    example_server: RunningServer, demo_client: httpx.Client, node_scripts: Path
) -> None:
    snippet, output = documented()
    script = node_scripts / "docs_chat.mjs"  # beside node_modules, so `ai` resolves
    script.write_text(snippet, encoding="utf-8")
    try:
        result = subprocess.run(
            ["node", script.name],
            cwd=node_scripts,
            env={
                **os.environ,
                "CHAT_ORIGIN": example_server.url,
                "CHAT_COOKIE": cookie_header(demo_client),
                "CHAT_CSRF": demo_client.cookies["csrftoken"],
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        script.unlink()
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == output
