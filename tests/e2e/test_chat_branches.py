"""contrib.chat's message operations in Chromium, on the default store and the Memory Service.

``chat_branches.mjs`` sends a message and copies the answer. Both stores keep branches: it
regenerates the answer, refused (429) and offline first, then sees ``2/2`` between the branch
arrows (an offline regenerate or edit leaves the stored thread shown), switches back and forth
(the switch survives a reload), edits the user message (Escape cancels, Save starts a new
branch), and checks the buttons fit at 360 px in dark mode. It forks from the answer and lands
on the new thread, and a tool call the tool refuses (``ModelRetry``: ``1/0``) shows as failed,
live and after a reload. Screenshots and the JSON report go to ``$E2E_ARTIFACTS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.nodejs import run_page_script
from tests.e2e.test_browser import artifacts, memory_service_server  # noqa: F401  (fixtures)
from tests.e2e.test_chat_page import server  # noqa: F401  (the example on each store)
from tests.example_project.support import RunningServer

pytestmark = pytest.mark.e2e

USERNAME = "brancher"
PASSWORD = "brancher-password"
COPY = "Copy message"
FORK = "Fork from this message"


def _check_fork_and_refusal(steps: dict[str, Any], question: str, answer: str) -> None:
    forked = steps["forked"]
    assert forked["forkedThread"] not in (None, forked["before"])
    # The new thread holds the conversation up to the answer it was forked from.
    assert [(t["kind"], t["text"]) for t in forked["forked"]] == [
        ("user", question),
        ("assistant", answer),
    ]
    assert [(t["kind"], t["text"]) for t in forked["reloaded"]] == [
        ("user", question),
        ("assistant", answer),
    ]

    refused = steps["refused"]
    for turn in (refused["live"], refused["stored"]):
        (tool,) = turn["tools"]
        assert tool["name"] == "calculate"
        assert tool["failed"] is True, "a refused tool call's card must not look successful"
        assert tool["badge"] == "refused"
        assert tool["result"] == "'1/0' divides by zero."
        assert turn["text"].startswith("The calculate tool could not help this time")
    assert refused["title"] == "The tool refused this call; the model was told why."
    # The danger colour, not the tool's green.
    assert refused["cardColour"] in {"rgb(201, 42, 42)", "rgb(255, 135, 135)"}, refused


def test_copy_regenerate_branches_edit_fork_and_a_refused_tool_in_chromium(
    server: RunningServer,  # noqa: F811
    node_scripts: Path,
    chromium: str,
    artifacts: Path,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:
    store = "memory" if "memory" in request.node.name else "default"
    server.add_user(USERNAME, PASSWORD)

    report, steps = run_page_script(
        node_scripts,
        "chat_branches.mjs",
        server.url,
        USERNAME,
        PASSWORD,
        str(artifacts),
        f"branches-{store}",
        artifacts=artifacts,
        name=f"branches-{store}",
        chromium=chromium,
    )

    sent = steps["sent"]
    user, answer = sent["turns"]
    assert user["text"] == "What is 2 + 3?"
    assert answer["text"] == "I asked the calculator, and 2 + 3 = 5."
    assert sent["copied"] == answer["text"]
    assert COPY in user["buttons"]
    assert COPY in answer["buttons"]
    assert FORK in answer["buttons"]

    assert "Edit message" in user["buttons"]
    assert "Regenerate answer" in answer["buttons"]
    assert user["branch"] is None
    assert answer["branch"] is None

    refused = steps["regenerate-refused"]
    assert refused["refusals"] == 1
    assert refused["status"] == (
        "The server refused the message: Too many requests. Try again in 30 s."
    )
    assert refused["turns"] == sent["turns"], "a refused regenerate changed the conversation"

    # Offline, neither the rerun nor the reload after it reaches the server: the page shows the
    # stored thread all the same, not the cut or edited one, and reloads it when back online.
    offline = steps["rerun-offline"]
    not_sent = "The message was not sent: You are offline: try again when the connection is back."
    for rerun in (offline["regenerate"], offline["edit"]):
        assert rerun["status"] == not_sent
        assert rerun["turns"] == sent["turns"], "an offline rerun left the page in a half-state"
    assert offline["online"]["status"] == 200
    assert offline["online"]["turns"] == sent["turns"]
    busy = steps["edit-refused"]
    assert busy["status"] == "The server refused the message: The server is busy. Try again in 5 s."
    assert busy["turns"] == sent["turns"], "a refused edit changed the conversation"

    # Regenerate: the same question answered again (another tool call), 2/2.
    regenerated = steps["regenerated"]["turns"]
    assert [t["text"] for t in regenerated] == [user["text"], answer["text"]]
    assert regenerated[1]["branch"] == "2/2"
    first_call, second_call = answer["toolCalls"][0], regenerated[1]["toolCalls"][0]
    assert first_call != second_call

    switched = steps["switched"]
    assert switched["back"][1]["branch"] == "1/2"
    assert switched["back"][1]["toolCalls"] == [first_call]
    assert switched["focused"] == "Next branch"  # Previous is disabled at 1/2
    assert switched["reloaded"][1]["branch"] == "1/2"  # the server keeps the switch
    assert switched["reloaded"][1]["toolCalls"] == [first_call]
    assert switched["forth"][1]["branch"] == "2/2"
    assert switched["forth"][1]["toolCalls"] == [second_call]

    edited = steps["edited"]
    assert edited["editing"] == {"box": True, "bubbleHidden": True}
    assert [t["text"] for t in edited["cancelled"]] == [user["text"], answer["text"]]
    assert edited["cancelFocus"] == "Edit message"
    for turns in (edited["edited"], edited["editedReloaded"]):
        new_user, new_answer = turns
        assert new_user["text"] == "What is 6 * 7?"
        assert new_user["branch"] == "2/2"
        assert new_answer["text"] == "I asked the calculator, and 6 * 7 = 42."

    narrow = steps["narrow"]
    assert narrow["scrollWidth"] <= narrow["clientWidth"], "the page scrolls sideways at 360 px"
    assert narrow["navVisible"]
    assert all(narrow["navVisible"])

    _check_fork_and_refusal(steps, "What is 6 * 7?", "I asked the calculator, and 6 * 7 = 42.")
    for path in report["screenshots"]:
        assert Path(path).stat().st_size > 10_000
