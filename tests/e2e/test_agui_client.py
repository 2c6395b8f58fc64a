"""(a) The real ``@ag-ui/client`` HttpAgent, under Node, runs two turns against ``/agent/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tests.e2e.nodejs import run_node
from tests.example_project.support import RunningServer, cookie_header

pytestmark = pytest.mark.e2e


def _types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def test_two_turns_with_the_agui_client(
    example_server: RunningServer, demo_client: httpx.Client, node_scripts: Path
) -> None:
    output = run_node(
        node_scripts,
        "agui_client.mjs",
        f"{example_server.url}/agent/",
        "What is 12 * (3 + 4)?",
        "And what time is it?",
        env={
            "AGUI_COOKIE": cookie_header(demo_client),
            "AGUI_CSRF": demo_client.cookies["csrftoken"],
        },
    )

    first, second = output["turns"]
    for turn in (first, second):
        assert turn["error"] is None
        types = _types(turn["events"])
        assert types[0] == "RUN_STARTED"
        assert types[-1] == "RUN_FINISHED"
        assert {"REASONING_MESSAGE_CONTENT", "TOOL_CALL_ARGS", "TEXT_MESSAGE_CONTENT"} <= set(types)
        # The client's own lifecycle checker accepted the stream; the validator agrees.
        assert_valid_agui(turn["events"])
        assert [m["role"] for m in turn["newMessages"]] == [
            "reasoning",
            "assistant",
            "tool",
            "assistant",
        ]

    reasoning, call, tool, answer = first["newMessages"]
    assert "calculator" in reasoning["content"]
    assert call["toolCalls"][0]["function"] == {
        "name": "calculate",
        "arguments": '{"expression":"12 * (3 + 4)"}',
    }
    assert tool["toolCallId"] == call["toolCalls"][0]["id"]
    assert tool["content"] == "84"
    assert answer["content"] == "I asked the calculator, and 12 * (3 + 4) = 84."

    call, tool, answer = second["newMessages"][1:]
    assert call["toolCalls"][0]["function"]["name"] == "server_time"
    assert answer["content"].startswith("I checked the server's clock: it is ")

    # The client kept the whole transcript: 2 user messages and 4 new messages per turn.
    assert len(output["messages"]) == 10

    # The server stored the thread as it streamed, with the ids the client saw.
    stored = demo_client.get(f"/agent/threads/{output['threadId']}/").json()["messages"]
    assert [m["id"] for m in stored] == [m["id"] for m in output["messages"]]
