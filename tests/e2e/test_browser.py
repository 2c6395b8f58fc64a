"""(c) The chat page in Debian's headless Chromium, driven by playwright-core from Node.

The script logs in, asks a question, watches reasoning, a tool call and the streamed answer
arrive, takes a screenshot (``example-chat.png``), stops a long answer mid-stream, then
reloads the page and reopens the thread from the drawer, partial answer included. Then it
attaches files (``example-chat-attached.png``), sends one (the demo agent reads it with
``read_attachment`` and quotes it), reloads and downloads it, and
has an oversized file and a refused type turned down inline
(``example-chat-upload-error.png``). Then the thread drawer: a run stopped in a new chat is
listed without a reload (``-stopped.png``), renamed (a refused title first) and deleted
(``-rename-error.png``, ``-renamed.png``); and at 375px the drawer opens from its toggle
(``-mobile-drawer.png``) and the composer fits on one row, Stop in Send's place while an answer
streams (``-mobile.png``, ``-mobile-running.png``).

``test_thread_links_statuses_and_reattach_in_chromium`` (``browser_runs.mjs links``): the thread
in the URL with Back/Forward, links, Stop's cancel POST, a reload mid-run; then, with the
server's answers replaced in the page, the stopped/failed badges, a failed tool call and both
ways of reattaching; ``test_thread_links_on_the_memory_service_in_chromium`` repeats it with
``AGENT_STORE=memory-service``. ``test_durable_runs_in_chromium`` (``browser_runs.mjs
durable``) needs a server that mounts ``runs/<thread>/<run>/`` and its ``cancel/`` route, and
skips until it does.

Screenshots and the JSON reports go to ``$E2E_ARTIFACTS`` (a fresh temporary directory when
unset), for CI to keep.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.nodejs import run_node
from tests.example_project.support import RunningServer, login, serve_example

pytestmark = pytest.mark.e2e

#: The browser's own account: threads are per user now, and the other e2e tests chat as "demo".
USERNAME = "chromium"
PASSWORD = "chromium-password"

SCREENSHOT_NAMES = [
    "example-chat.png",
    *(
        f"example-chat-{name}.png"
        for name in (
            "attached",
            "upload-error",
            "stopped",
            "rename-error",
            "renamed",
            "mobile-drawer",
            "mobile",
            "mobile-running",
        )
    ),
]
NOTES = "Shopping list\n- coffee\n- more coffee\n"
LONG = "Tell me a long story about streaming."
LONG_ANSWER_START = "Since you asked for a long answer"

#: Chromium logs each deliberately refused request as a console error; nothing else may appear.
EXPECTED_CONSOLE_ERRORS = ("status of 400", "status of 404", "status of 413", "status of 415")


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots and reports go: ``$E2E_ARTIFACTS``, else a fresh temporary directory."""
    configured = os.environ.get("E2E_ARTIFACTS", "").strip()
    directory = Path(configured) if configured else tmp_path_factory.mktemp("e2e-artifacts")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def _keep_report(artifacts: Path, name: str, report: dict[str, Any]) -> None:
    """Keep what the page showed at each step, for a look after a failure."""
    (artifacts / name).write_text(json.dumps(report, indent=2, ensure_ascii=False))


def _unexpected_console_errors(report: dict[str, Any]) -> list[str]:
    return [
        message
        for message in report["consoleErrors"]
        if not any(expected in message for expected in EXPECTED_CONSOLE_ERRORS)
    ]


def test_chat_page_in_chromium(
    example_server: RunningServer, node_scripts: Path, chromium: str, artifacts: Path
) -> None:
    screenshots = [artifacts / name for name in SCREENSHOT_NAMES]
    for screenshot in screenshots:
        screenshot.unlink(missing_ok=True)
    example_server.add_user(USERNAME, PASSWORD)

    report = run_node(
        node_scripts,
        "browser.mjs",
        example_server.url,
        USERNAME,
        PASSWORD,
        str(screenshots[0]),
        env={"CHROMIUM": chromium},
    )

    _keep_report(artifacts, "example-chat-report.json", report)
    assert "error" not in report, report.get("error")
    steps = {step["step"]: step for step in report["steps"]}

    assert "/accounts/login/" in steps["redirected"]["url"]
    assert steps["logged-in"]["url"] == f"{example_server.url}/"

    answered = steps["answered"]
    assert answered["status"] == "Done"
    assert answered["stopEnabledWhileRunning"] is True
    assert answered["stopEnabledAfter"] is False
    turn = answered["turn"]
    assert turn["text"] == "I asked the calculator, and 12 * (3 + 4) = 84."
    assert turn["tools"] == [
        {"name": "calculate", "args": '{\n  "expression": "12 * (3 + 4)"\n}', "result": "84"}
    ]
    (reasoning,) = turn["reasoning"]
    assert reasoning["summary"].startswith("Thought for")
    assert "calculator" in reasoning["body"]
    assert reasoning["open"] is False, "reasoning collapses once it is done"
    assert answered["threads"] == ["What is 12 * (3 + 4)?"]
    # The thread's usage from GET usage/: the scripted model has tokens but no price.
    assert re.fullmatch(r"This conversation: [\d,]+ tokens, cost unknown", answered["usage"])

    stopped = steps["stopped"]
    assert stopped["status"] == "Stopped"
    assert stopped["lengthAtStop"] > 40
    assert stopped["lengthLater"] == stopped["lengthAtStop"], "text kept arriving after Stop"
    assert "Stopped." in stopped["turn"]["notices"]
    assert stopped["sendEnabled"] is True
    assert len(stopped["turn"]["text"]) < 400, "the long answer ran to its end"

    reloaded = steps["reloaded"]
    assert reloaded["threads"] == ["What is 12 * (3 + 4)?"]
    assert reloaded["userBubbles"] == [
        "What is 12 * (3 + 4)?",
        "Tell me a long story about streaming.",
    ]
    assert reloaded["toolNames"] == ["calculate", "server_time"]
    # Reloaded reasoning keeps its duration: the run stored it with its outcome.
    [summary] = [r["summary"] for r in reloaded["lastTurn"]["reasoning"]]
    assert re.fullmatch(r"Thought for \d+ s", summary)
    # The server saved the stopped run as far as it had streamed: what the page showed, plus at
    # most the few words that were already on their way when the connection closed.
    partial = reloaded["lastTurn"]["text"]
    assert partial.startswith(stopped["turn"]["text"])
    assert len(partial) < len(stopped["turn"]["text"]) + 200, (
        "the server ran the stopped answer to its end: it did not act on the disconnect"
    )

    attached = steps["attached"]
    assert attached["pendingChips"] == ["notes.txt37 B\u00d7"]
    assert attached["removed"]["status"] == 404, "removing the chip deleted the upload"
    assert attached["pendingAfterSend"] == 0
    assert attached["pendingHidden"] is True
    assert attached["sentChips"] == ["notes.txt37 B"]
    # The demo agent was told of the file by the server, read it, and quoted it.
    [read] = attached["answer"]["tools"]
    assert read["name"] == "read_attachment"
    assert read["result"] == NOTES
    assert attached["answer"]["text"].startswith("notes.txt (37 bytes, 3 lines) says:")
    assert "Shopping list" in attached["answer"]["text"]

    again = steps["attachment-reloaded"]
    assert again["threads"][0] == "Please keep my notes with this chat."
    assert again["chips"] == ["notes.txt37 B"]
    assert again["href"].startswith("/agent/attachments/")
    assert again["downloadAttribute"] == "notes.txt"
    download = again["download"]
    assert download["status"] == 200
    assert download["text"] == NOTES
    assert download["disposition"] == 'attachment; filename="notes.txt"'
    assert download["type"].startswith("text/plain")

    refused = steps["refused"]
    assert refused["maxBytes"] == 5 * 1024 * 1024
    assert refused["tooLarge"] == {
        "text": "“huge.txt” is too large: files can be at most 5 MB.",
        "status": "413",
    }
    assert refused["refusedType"]["status"] == "415"
    assert refused["refusedType"]["text"] == (
        "“archive.zip” is a type of file this agent does not accept (application/zip). "
        "Attach text, images, PDF or JSON files."
    )
    assert refused["pendingChips"] == 0
    assert refused["sendEnabled"] is True

    story = "Tell me a long story about streaming."
    after_stop = steps["drawer-after-stop"]
    assert after_stop["notReloaded"] is True
    assert after_stop["threads"][0] == story, "the stopped thread is missing from the drawer"
    assert after_stop["current"] == story
    assert after_stop["tooltip"] == story, "the tooltip is the full title"
    assert after_stop["preview"], "the preview is the item's second line"
    assert after_stop["cutBubbles"] == 1, "the cut-off answer is marked"
    assert "Stopped." in after_stop["notices"]

    renamed = steps["renamed"]
    assert renamed["editingFocused"] is True
    assert renamed["refusedRename"] == (
        "Could not rename: The title is 201 characters long; the limit is 200."
    )
    assert renamed["focusAfterRename"] == "Rename \u201cStreaming story\u201d"
    assert renamed["threadsAfterReload"][0] == "Streaming story"
    assert story not in renamed["threadsAfterReload"]

    deleted = steps["deleted"]
    assert deleted["dialogs"] == ["Delete \u201cStreaming story\u201d? This cannot be undone."]
    assert deleted["nativeDialogs"] == [], "the page used window.confirm()"
    assert deleted["keptAfterEscape"] is True
    assert "thread-delete" in deleted["focusAfterEscape"]
    assert "Streaming story" not in deleted["threads"]
    assert deleted["turns"] == 0, "deleting the open thread starts a new chat"
    assert deleted["emptyShown"] is True
    assert deleted["threadsAfterReload"] == deleted["threads"]
    assert deleted["threads"] == ["Please keep my notes with this chat.", "What is 12 * (3 + 4)?"]

    narrow = steps["narrow"]
    assert narrow["drawerVisible"] is False
    assert narrow["toggleVisible"] is True
    assert (narrow["expanded"], narrow["controls"]) == ("false", "threads")
    assert narrow["opened"]["expanded"] == "true"
    assert narrow["opened"]["threads"] == deleted["threads"]
    assert narrow["opened"]["focusInDrawer"] is True
    assert narrow["afterEscape"] == {"expanded": "false", "drawerVisible": False}
    assert narrow["picked"]["expanded"] == "false", "picking a thread closes the drawer"
    assert narrow["picked"]["drawerVisible"] is False
    assert narrow["picked"]["userBubbles"][0] == "What is 12 * (3 + 4)?"
    composer = narrow["composer"]
    assert composer["pageScrollWidth"] <= composer["viewport"] == 375
    assert composer["form"]["right"] <= 375
    assert composer["stop"] is None, "Stop takes Send's place only while a run streams"
    row = [composer["attach"], composer["prompt"], composer["send"]]
    assert [box["left"] for box in row] == sorted(box["left"] for box in row)
    for box in row:  # one row: every control overlaps the prompt vertically
        assert box["top"] < composer["prompt"]["bottom"]
        assert box["bottom"] > composer["prompt"]["top"]
    assert narrow["whileRunning"] == {"send": False, "stop": True}
    assert narrow["afterStop"] == {"send": True, "stop": False}

    assert report["pageErrors"] == []
    assert _unexpected_console_errors(report) == []
    for screenshot in screenshots:
        assert screenshot.stat().st_size > 10_000, screenshot


def _runs_routes_mounted(server: RunningServer, client: httpx.Client) -> bool:
    """Whether the server mounts the run routes.

    A mounted cancel route answers ``GET`` with 405, and a mounted run route answers an unknown
    run with a JSON 404; without them, Django's own (HTML) 404 page comes back for both.
    """
    cancel = client.get(f"{server.url}/agent/runs/probe-thread/probe-run/cancel/")
    run = client.get(f"{server.url}/agent/runs/probe-thread/probe-run/")
    json_answer = run.headers.get("content-type", "").startswith("application/json")
    return cancel.status_code == 405 or (run.status_code == 404 and json_answer)


@pytest.fixture(scope="module")
def memory_service_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The example under uvicorn with ``AGENT_STORE=memory-service`` (the in-project emulator)."""
    try:
        importlib.import_module("django_pydantic_agent.persistence.memory_service")
    except ImportError:
        pytest.skip("this django-pydantic-agent has no persistence.memory_service stores yet")
    with serve_example(
        tmp_path_factory.mktemp("example-memory-service"),
        AGENT_STORE="memory-service",
        DEMO_WORD_DELAY="0.03",
        AGENT_HEARTBEAT_SECONDS="0.01",
    ) as server:
        yield server


def _run_links(
    server: RunningServer, node_scripts: Path, chromium: str, artifacts: Path
) -> dict[str, Any]:
    server.add_user("chromium-links", "chromium-links-password")
    report: dict[str, Any] = run_node(
        node_scripts,
        "browser_runs.mjs",
        server.url,
        "chromium-links",
        "chromium-links-password",
        str(artifacts),
        "links",
        env={"CHROMIUM": chromium},
    )
    _keep_report(artifacts, "runs-links-report.json", report)
    return report


def test_thread_links_statuses_and_reattach_in_chromium(
    example_server: RunningServer,
    node_scripts: Path,
    chromium: str,
    artifacts: Path,
    demo_client: httpx.Client,
) -> None:
    durable = _runs_routes_mounted(example_server, demo_client)

    report = _run_links(example_server, node_scripts, chromium, artifacts)

    _assert_links(report, artifacts, durable=durable)


def test_thread_links_on_the_memory_service_in_chromium(
    memory_service_server: RunningServer, node_scripts: Path, chromium: str, artifacts: Path
) -> None:
    """The same flows with every thread on the Memory Service (the emulator, in process)."""
    with httpx.Client(base_url=memory_service_server.url, timeout=30) as client:
        login(client)
        durable = _runs_routes_mounted(memory_service_server, client)
    memory = artifacts / "memory-service"
    memory.mkdir(exist_ok=True)

    report = _run_links(memory_service_server, node_scripts, chromium, memory)

    _assert_links(report, memory, durable=durable)
    assert "Traceback" not in memory_service_server.log.read_text()


def _assert_links(report: dict[str, Any], artifacts: Path, *, durable: bool) -> None:
    assert "error" not in report, report.get("error")
    steps = {step["step"]: step for step in report["steps"]}

    history = steps["history"]
    first, second = history["first"], history["second"]
    assert history["blank"] is None, "a new chat names no thread"
    assert first
    assert second != first
    assert history["lengthAfter"] == history["lengthBefore"], "the first message adds no entry"
    assert history["afterNewChat"] is None
    assert history["opened"] == {"url": first, "bubbles": ["What is 2 + 2?"]}
    assert history["back"]["url"] == second
    assert history["back"]["bubbles"] == ["What time is it on the server?"]
    assert history["back"]["current"] == "What time is it on the server?"
    assert history["backAgain"] == {"url": first, "bubbles": ["What is 2 + 2?"]}
    assert history["forward"] == {"url": second, "bubbles": ["What time is it on the server?"]}

    linked = steps["linked"]
    assert linked["bubbles"] == ["What is 2 + 2?"]
    assert linked["answer"] == "I asked the calculator, and 2 + 2 = 4."
    assert linked["current"] == "What is 2 + 2?"
    assert linked["unknown"]["status"].startswith("Could not open the conversation:")
    assert linked["unknown"]["turns"] == 0

    stop = steps["stop"]
    assert stop["method"] == "POST"
    assert stop["path"].startswith(f"/agent/runs/{stop['thread']}/")
    assert stop["path"].endswith("/cancel/")
    assert stop["csrf"] is True
    assert stop["turn"]["badge"] == "stopped"
    assert "Stopped." in stop["turn"]["notices"]
    if not durable:
        assert stop["answer"] == 404, "today's server has no cancel route: the page aborts"

    reloaded = steps["reload-mid-run"]
    assert reloaded["remembered"]["threadId"] == first
    run_id = reloaded["remembered"]["runId"]
    assert reloaded["reattach"].startswith(f"/agent/runs/{first}/{run_id}/")
    assert reloaded["reattach"].endswith("?after=0")
    assert reloaded["urlThread"] == first
    assert reloaded["bubbles"][0] == "What is 2 + 2?"
    if not durable:
        assert reloaded["reattachStatus"] == 404
        assert reloaded["forgotten"] is None, "a run the server does not know is forgotten"
        assert reloaded["sendEnabled"] is True
        assert reloaded["stopEnabled"] is False

    assert steps["stored-statuses"]["badges"] == ["stopped", "failed", None]
    assert steps["stored-statuses"]["tool"] == {
        "failed": True,
        "badge": "failed",
        "result": "'1 / 0' divides by zero.",
    }

    failed = steps["run-error-in-tool"]["turn"]
    assert failed["badge"] == "failed"
    assert failed["notices"] == ["The tool crashed."]
    assert failed["tools"] == [
        {
            "name": "server_time",
            "args": "{}",
            "result": "failed: the run ended with an error",
            "failed": True,
            "badge": "failed",
        }
    ]

    active = steps["reattach-active-run"]
    assert active["after"] == "0"
    assert active["bubbles"] == ["Keep going"]
    assert (active["turn"]["text"], active["turn"]["bubbles"]) == ("Hello, again", 1)
    assert active["turn"]["badge"] is None

    accepted = steps["cancel-accepted"]
    assert accepted["cancels"] == 1
    assert accepted["status"] == "Done", "an accepted cancel aborted the stream"
    assert LONG_ANSWER_START in accepted["turn"]["text"], "the answer was cut off"
    assert accepted["turn"]["badge"] is None

    remembered = steps["reattach-remembered"]
    assert remembered["bubbles"] == ["Two parts"]
    assert remembered["turn"]["text"] == "Part one and part two"
    assert remembered["turn"]["badge"] == "stopped"
    assert remembered["forgotten"] is None

    assert report["pageErrors"] == []
    assert _unexpected_console_errors(report) == []
    for name in ("reloaded", "statuses", "tool-failed", "reattached"):
        assert (artifacts / f"runs-{name}.png").stat().st_size > 10_000, name


def test_durable_runs_in_chromium(
    example_server: RunningServer,
    node_scripts: Path,
    chromium: str,
    artifacts: Path,
    demo_client: httpx.Client,
) -> None:
    if not _runs_routes_mounted(example_server, demo_client):
        pytest.skip("the server does not mount runs/<thread>/<run>/cancel/ yet")
    example_server.add_user("chromium-runs", "chromium-runs-password")

    report = run_node(
        node_scripts,
        "browser_runs.mjs",
        example_server.url,
        "chromium-runs",
        "chromium-runs-password",
        str(artifacts),
        "durable",
        env={"CHROMIUM": chromium},
    )

    _keep_report(artifacts, "runs-durable-report.json", report)
    assert "error" not in report, report.get("error")
    steps = {step["step"]: step for step in report["steps"]}

    cancelled = steps["cancelled"]
    assert 200 <= cancelled["answer"] < 300
    assert cancelled["turn"]["badge"] == "stopped"
    assert len(cancelled["turn"]["text"]) < 400, "the cancelled answer ran to its end"
    assert cancelled["reloaded"]["badge"] == "stopped", "the stored answer keeps its status"
    assert cancelled["reloaded"]["text"], "the stopped answer was stored as far as it streamed"

    reattached = steps["reattached"]
    text = reattached["turn"]["text"]
    assert text.startswith(reattached["before"])
    assert len(text) > 400, "the answer did not stream on after the reload"
    assert text.count(LONG_ANSWER_START) == 1, "the reattached stream doubled the answer"
    assert reattached["turn"]["badge"] is None
    assert reattached["threads"][0] == LONG

    assert report["pageErrors"] == []
    assert _unexpected_console_errors(report) == []
