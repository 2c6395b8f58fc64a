"""contrib.chat's page in Chromium, on the default store and on the Memory Service.

``chat_features.mjs`` asks the demo agent for a markdown answer and checks the table, the code
block and its Copy button (the clipboard gets the code), takes screenshots in light and dark
mode and at 360 px (no horizontal scroll), reloads and finds the same markdown rendered from
the stored thread. Then it opens a thread whose title, user text, tool name, tool arguments,
tool result and answer carry script payloads (stored with ``store_thread.py`` through the
example's own stores), uploads a file whose name is one and sends a message that is one, reloads,
and checks nothing ran and no element the payloads named exists. Last, a stored thread of 1,000
messages: the page paints the newest turns that fill the view first and records how long that
took (``docs/benchmarks.md``; nothing here is timed), then the oldest message is found in the
page, copied from the keyboard and present in the accessibility tree, and a turn on the thread
posts its new message alone and is answered. Screenshots and the JSON
report go to ``$E2E_ARTIFACTS``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.nodejs import run_node, run_page_script
from tests.e2e.test_browser import artifacts, memory_service_server  # noqa: F401  (fixtures)
from tests.example_project.support import EXAMPLE_DIR, RunningServer, example_env

pytestmark = pytest.mark.e2e

USERNAME = "features"
PASSWORD = "features-password"
STORE_THREAD = Path(__file__).resolve().parent / "store_thread.py"


def _store(server: RunningServer, store: str, *args: str) -> None:
    result = subprocess.run(
        [sys.executable, str(STORE_THREAD), USERNAME, *args],
        cwd=EXAMPLE_DIR,
        env=server.env or example_env(server.database, AGENT_STORE=store),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture(params=["default", "memory-service"])
def server(request: pytest.FixtureRequest) -> RunningServer:
    """The example server on each store (the memory-service one is shared with test_browser)."""
    name = "example_server" if request.param == "default" else "memory_service_server"
    running: RunningServer = request.getfixturevalue(name)
    return running


def test_markdown_hostile_content_and_a_long_thread_in_chromium(
    server: RunningServer,
    node_scripts: Path,
    chromium: str,
    artifacts: Path,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:
    kind = "memory-service" if "memory" in request.node.name else "default"
    store = kind.split("-")[0]
    server.add_user(USERNAME, PASSWORD)
    _store(server, kind, "hostile", f"hostile-{store}")
    _store(server, kind, "long", f"long-{store}", "1000")

    report, steps = run_page_script(
        node_scripts,
        "chat_features.mjs",
        server.url,
        USERNAME,
        PASSWORD,
        str(artifacts),
        f"chat-{store}",
        f"hostile-{store}",
        f"long-{store}",
        artifacts=artifacts,
        name=f"chat-{store}",
        chromium=chromium,
    )

    markdown = steps["markdown"]["markdown"]
    assert markdown["headings"] == ["What the page renders"]
    assert markdown["tableHead"] == ["Feature", "Where"]
    assert markdown["tableRows"] == [["Tables", "here"], ["Code blocks", "below"]]
    (code,) = markdown["code"]
    assert code["language"] == "python"
    assert code["text"].startswith("from django_pydantic_agent.contrib.chat.views import ChatView")
    assert markdown["copyButtons"] == 1
    assert steps["markdown"]["clipboard"] == code["text"]
    assert steps["markdown"]["answerClipboard"].startswith("## What the page renders\n\n")
    assert "| Tables | here |" in steps["markdown"]["answerClipboard"]
    assert steps["markdown"]["questionClipboard"] == "Show me a markdown table."
    assert markdown["links"] == [
        {
            "href": "https://github.com/pydantic/pydantic-ai",
            "rel": "noopener noreferrer",
            "text": "links",
        }
    ]
    assert markdown["rawHtmlAsText"] is True
    assert markdown["boldElements"] == 0
    assert steps["reloaded"]["markdown"] == markdown
    # Thumbs on the Default store (it keeps feedback), none on the Memory Service store.
    rated = steps["rated"]
    assert rated["thumbs"] is (store == "default")
    if rated["thumbs"]:
        assert rated["pressed"] == [["up", "false"], ["down", "true"]]
        assert steps["reloaded"]["pressed"] == [["up", "false"], ["down", "true"]]
    else:
        assert rated["pressed"] == []
        assert steps["reloaded"]["pressed"] == []

    assert steps["dark"]["background"] == "rgb(16, 19, 26)"
    narrow = steps["narrow"]
    assert narrow["scrollWidth"] <= narrow["clientWidth"], "the page scrolls sideways at 360 px"

    keyboard = steps["keyboard"]
    assert keyboard["typed"] == "Tell me a long story\nabout streaming."
    assert keyboard["lastUser"] == {"text": "Tell me a long storyabout streaming.", "breaks": 1}
    assert keyboard["role"] == "log"
    assert keyboard["live"] == "polite"
    assert keyboard["statusRole"] == "status"
    assert keyboard["promptLabel"] == "Message"

    refused = steps["refused"]
    assert refused["refusals"] == 1
    assert refused["notice"].startswith(
        "The server refused the message: Too many requests. Try again in 30 s."
    )
    assert refused["composer"] == "What is 6 * 7?"
    assert refused["retryButtons"] == 1
    assert refused["retried"]["users"][-1] == "What is 6 * 7?"
    assert refused["retried"]["users"].count("What is 6 * 7?") == 1
    assert refused["retried"]["notices"] == 0
    assert refused["retried"]["composer"] == ""
    assert refused["retried"]["answer"] == "I asked the calculator, and 6 * 7 = 42."
    assert refused["retriedAfterReload"] == ["What is 6 * 7?"]

    offline = steps["offline"]
    assert offline["notice"].startswith(
        "The message was not sent: You are offline: try again when the connection is back."
    )
    assert offline["composer"] == "What is 2 + 2?"

    hostile = steps["hostile"]
    assert hostile["owned"] is None
    assert hostile["elements"] == 0
    assert hostile["javascriptLinks"] == []
    assert any("<img src=x onerror=" in title for title in hostile["titles"])
    assert any("<script>" in text for text in hostile["userTexts"])
    assert any("<img src=x onerror=" in name for name in hostile["fileNames"])
    assert any("<img src=x onerror=" in name for name in hostile["toolNames"])
    assert any("window.__owned='tool-args'" in args for args in hostile["toolArgs"])

    long = steps["long"]
    # The newest turns that fill the view paint first; the rest fill in above them, in order.
    assert 2 <= long["firstTurns"] < 60
    assert long["firstFilled"] is True
    assert long["turns"] == 1000
    assert long["firstUser"] == "Question 0?"
    assert long["atBottom"] is True
    # The oldest message is reachable: find in page, the keyboard (Copy), screen readers.
    older = long["older"]
    assert older["found"] is True
    assert older["copied"] == "Question 0?"
    assert "Question 0?" in older["aria"]
    assert older["shown"] is True
    # A turn on it posts the new message alone, and the answer comes from the stored thread.
    continued = long["continued"]
    assert continued["posted"] == [{"role": "user", "content": "What is 6 * 7?"}]
    assert continued["turns"] == 1002
    assert continued["answer"] == "I asked the calculator, and 6 * 7 = 42."
    for path in report["screenshots"]:
        assert Path(path).stat().st_size > 10_000


def test_the_first_paint_bench_runs_as_documented(
    example_server: RunningServer, node_scripts: Path, chromium: str
) -> None:
    """``first_paint.mjs`` (docs/benchmarks.md, "First paint"), at a toy size: two rounds over
    a thread of 200 messages. Its times are not checked; the turns it saw are."""
    example_server.add_user(USERNAME, PASSWORD)
    _store(example_server, "default", "long", "bench-200", "200")

    report = run_node(
        node_scripts,
        "first_paint.mjs",
        example_server.url,
        USERNAME,
        PASSWORD,
        "bench-200",
        "2",
        env={"CHROMIUM": chromium},
    )

    assert "error" not in report, report.get("error")
    assert report["pageErrors"] == []
    assert len(report["rounds"]) == 2
    for round_ in report["rounds"]:
        assert round_["turns"] == 200
        assert 2 <= round_["firstTurns"] < 60
    assert set(report["paintMs"]) == {"median", "worst"}
    assert 0 <= report["overFrame"] <= 2
