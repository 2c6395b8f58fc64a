"""contrib.chat's rough edges in Chromium, where only a browser shows them.

The search box's placeholder fits it; the drawer shows a thread whose title and preview are
markdown as plain text; a fenced code block and inline code in the user's own bubble read with
a contrast of at least 4.5:1 in the light and the dark scheme; a reloaded answer still says how
long its reasoning took; and a send that fails (offline, the connection dropped, the server
refusing with its JSON error) says what happened in words, with Retry, inside the log's view
after a long message grew the composer (``chat_rough_edges.mjs``). Screenshots and the JSON
report go to ``$E2E_ARTIFACTS``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.nodejs import run_page_script
from tests.e2e.test_browser import artifacts  # noqa: F401  (the $E2E_ARTIFACTS fixture)
from tests.example_project.support import EXAMPLE_DIR, RunningServer, example_env

pytestmark = pytest.mark.e2e

USERNAME = "rough"
PASSWORD = "rough-password"
STORE_THREAD = Path(__file__).resolve().parent / "store_thread.py"
#: WCAG AA for normal text.
READABLE = 4.5


def test_the_rough_edges_are_gone_in_chromium(
    example_server: RunningServer,
    node_scripts: Path,
    chromium: str,
    artifacts: Path,  # noqa: F811
) -> None:
    example_server.add_user(USERNAME, PASSWORD)
    stored = subprocess.run(
        [sys.executable, str(STORE_THREAD), USERNAME, "markdown", "rough-markdown"],
        cwd=EXAMPLE_DIR,
        env=example_server.env or example_env(example_server.database),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert stored.returncode == 0, stored.stderr

    _report, steps = run_page_script(
        node_scripts,
        "chat_rough_edges.mjs",
        example_server.url,
        USERNAME,
        PASSWORD,
        str(artifacts),
        "rough-markdown",
        artifacts=artifacts,
        name="rough-edges",
        chromium=chromium,
    )

    search = steps["search"]
    assert search["textWidth"] <= search["room"], f"the placeholder is cut off: {search}"

    drawer = steps["drawer"]
    assert drawer["title"] == "What does notes.txt say?"
    assert drawer["tooltip"] == "What does notes.txt say?"
    assert drawer["preview"] == "notes.txt lists three items: see the file."
    assert drawer["rename"] == "Rename “What does notes.txt say?”"

    for scheme in ("light", "dark"):
        contrast = steps["code"][scheme]
        assert min(contrast.values()) >= READABLE, f"unreadable in the {scheme} scheme: {contrast}"

    reasoning = steps["reasoning"]
    assert reasoning["live"] == ["Thought for 1 s"]
    assert reasoning["reloaded"] == reasoning["live"]

    failed = steps["failed"]
    assert failed["offline"]["text"].startswith(
        "The message was not sent: You are offline: try again when the connection is back."
    )
    assert failed["dropped"]["text"].startswith(
        "The message was not sent: The connection to the server was lost before it arrived."
    )
    assert failed["refused"]["text"].startswith(
        "The server refused the message: The message is longer than this server takes "
        "(8 lines at most)."
    )
    for name in ("offline", "dropped", "refused"):
        notice = failed[name]
        assert "Failed to fetch" not in notice["text"], name
        assert re.search(r"Retry$", notice["text"]), name
        assert notice["noticeInView"] is True, f"the {name} notice is out of view"
        assert notice["retryInView"] is True, f"the {name} notice's Retry is out of view"
        assert notice["composer"].startswith("Line 1 of a long question.")
        assert notice["notices"] == 1
