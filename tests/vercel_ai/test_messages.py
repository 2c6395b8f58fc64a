"""``vercel_ai.messages``: a stored thread as ``UIMessage``s."""

from __future__ import annotations

import json
from typing import Any

from django_pydantic_agent.persistence.wire import BOOKKEEPING_KEY
from django_pydantic_agent.vercel_ai.messages import (
    answer_metadata,
    last_answer,
    result_outcome,
    tool_input,
    tool_output,
    turns,
    ui_messages,
)

USAGE = [{"model": "m", "inputTokens": 3, "outputTokens": 4, "totalTokens": 7}]


def call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def attachment_url(ref: dict[str, Any]) -> str | None:
    return None if ref["id"] == "gone" else f"/agent/attachments/{ref['id']}/"


def shown(messages: list[dict[str, Any]], **kwargs: Any) -> list[dict[str, Any]]:
    return [
        m.model_dump(mode="json", by_alias=True)
        for m in ui_messages(messages, attachment_url=attachment_url, **kwargs)
    ]


THREAD: list[dict[str, Any]] = [
    {
        "id": "u1",
        "role": "user",
        "content": "Add, please",
        "attachments": [
            {"id": "f1", "name": "n.txt", "mime": "text/plain", "size": 3},
            {"id": "gone", "name": "x", "mime": "text/plain", "size": 1},
        ],
        "runId": "r1",
    },
    {"id": "rs1", "role": "reasoning", "content": "Thinking", "runId": "r1", "status": "complete"},
    {
        "id": "a1",
        "role": "assistant",
        "toolCalls": [call("c1", "add", '{"a": 1}'), call("c2", "page")],
        "runId": "r1",
        "status": "complete",
    },
    {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "2", "runId": "r1"},
    # The page's answer, stored under the call's own id.
    {"id": "c2", "role": "tool", "toolCallId": "c2", "content": '{"x": 1}', "runId": "r2"},
    {
        "id": "a2",
        "role": "assistant",
        "content": "It is 2.",
        "runId": "r2",
        "status": "complete",
        BOOKKEEPING_KEY: {"runOutcome": {"type": "success", "usage": USAGE}},
    },
    {"id": "u2", "role": "user", "content": [{"type": "text", "text": "Again"}], "runId": "r3"},
    {"id": "a3", "role": "assistant", "content": "Work", "runId": "r3", "status": "active"},
]


def test_a_thread_is_turns_whose_answers_are_one_message_each() -> None:
    user, answer, again, live = shown(THREAD, server_tools=frozenset({"add"}))

    assert user == {
        "id": "u1",
        "role": "user",
        "parts": [
            {
                "type": "file",
                "mediaType": "text/plain",
                "filename": "n.txt",
                "url": "/agent/attachments/f1/",
            },
            {"type": "text", "text": "Add, please"},
        ],
    }
    # One answer over two runs (the page's tool output continued it), named by its first
    # stored message; a step after each run of tool results.
    assert answer["id"] == "rs1"
    assert answer["metadata"] == {"runId": "r2", "status": "complete", "usage": USAGE}
    assert answer["parts"] == [
        {"type": "step-start"},
        {"type": "reasoning", "text": "Thinking", "state": "done"},
        {
            "type": "tool-add",
            "toolCallId": "c1",
            "state": "output-available",
            "input": {"a": 1},
            "output": "2",
            "providerExecuted": True,
        },
        {
            "type": "tool-page",
            "toolCallId": "c2",
            "state": "output-available",
            "input": {},
            "output": {"x": 1},
        },
        {"type": "step-start"},
        {"type": "text", "text": "It is 2.", "state": "done"},
    ]
    assert again["parts"] == [{"type": "text", "text": "Again"}]
    assert live["metadata"] == {"runId": "r3", "status": "active"}
    assert live["parts"][-1] == {"type": "text", "text": "Work", "state": "streaming"}


def test_tool_calls_show_their_outcome_and_pending_approvals() -> None:
    denied = json.dumps({"pydantic_ai": {"outcome": "denied"}})
    failed = json.dumps({"pydantic_ai": {"outcome": "failed"}})
    outcome = {
        "type": "interrupt",
        "interrupts": [
            {"id": "int-ask", "toolCallId": "ask"},
            {"id": "int-ok", "toolCallId": "ok"},
            {"id": "int-no", "toolCallId": "no"},
        ],
        "resolved": {
            "int-ok": {
                "interruptId": "int-ok",
                "status": "resolved",
                "payload": {"approved": True},
            },
            "int-no": {
                "interruptId": "int-no",
                "status": "resolved",
                "payload": {"approved": False, "reason": "No."},
            },
        },
    }
    messages = [
        {"id": "u", "role": "user", "content": "Go"},
        {
            "id": "a",
            "role": "assistant",
            "toolCalls": [
                call("ask", "email"),
                call("ok", "email"),
                call("no", "email"),
                call("den", "email"),
                call("bad", "add", "not json"),
                call("err", "add"),
                call("open", "page"),
            ],
            BOOKKEEPING_KEY: {"runOutcome": outcome},
        },
        {
            "id": "x1",
            "role": "tool",
            "toolCallId": "den",
            "content": "No.",
            "encryptedValue": denied,
        },
        {
            "id": "x2",
            "role": "tool",
            "toolCallId": "bad",
            "content": "oops",
            "encryptedValue": failed,
        },
        {"id": "x3", "role": "tool", "toolCallId": "err", "content": "", "error": "Boom."},
    ]
    [_user, answer] = shown(messages)
    states = {p["toolCallId"]: p for p in answer["parts"] if "toolCallId" in p}

    assert states["ask"]["state"] == "approval-requested"
    assert states["ask"]["approval"] == {"id": "int-ask"}
    assert states["ok"]["state"] == "approval-responded"
    assert states["ok"]["approval"] == {"id": "int-ok", "approved": True}
    assert states["no"]["approval"] == {"id": "int-no", "approved": False, "reason": "No."}
    assert states["den"]["state"] == "output-denied"
    assert states["bad"]["state"] == "output-error"
    assert states["bad"]["input"] == "not json"
    assert states["bad"]["errorText"] == "oops"
    assert states["err"]["errorText"] == "Boom."
    assert states["open"]["state"] == "input-available"
    assert "providerExecuted" not in states["open"]


def test_content_parts_become_file_parts() -> None:
    content = [
        {"type": "text", "text": "See"},
        {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}},
        {"type": "document", "source": {"type": "url", "value": "https://x/y.pdf"}},
        {"type": "document", "source": {"type": "url"}},
        {"type": "unknown"},
        "junk",
    ]
    [user] = shown([{"id": "u", "role": "user", "content": content}])

    assert user["parts"] == [
        {"type": "text", "text": "See"},
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAAA"},
        {"type": "file", "mediaType": "application", "url": "https://x/y.pdf"},
    ]


def test_system_messages_stay_and_developer_messages_go() -> None:
    messages = [
        {"id": "s", "role": "system", "content": "Be brief."},
        {"id": "d", "role": "developer", "content": "Hidden."},
        {"id": "a", "role": "assistant", "content": "Hello."},
    ]

    assert [(m["id"], m["role"]) for m in shown(messages)] == [("s", "system"), ("a", "assistant")]


def test_an_answer_with_nothing_to_show_is_left_out() -> None:
    messages = [
        {"id": "u", "role": "user", "content": "Hi"},
        {"id": "a", "role": "assistant", "content": ""},
    ]

    assert [m["id"] for m in shown(messages)] == ["u"]


def test_last_answer_and_turns() -> None:
    assert [m["id"] for m in last_answer(THREAD)] == ["a3"]
    assert last_answer(THREAD[:1]) == []
    assert [m["id"] for m in last_answer(THREAD[1:3])] == ["rs1", "a1"]
    assert [(role, [m["id"] for m in group]) for role, group in turns(THREAD[:4])] == [
        ("user", ["u1"]),
        ("assistant", ["rs1", "a1", "t1"]),
    ]
    assert answer_metadata([]) == {}


def test_tool_output_parses_objects_and_arrays_only() -> None:
    assert tool_output('{"a": 1}') == {"a": 1}
    assert tool_output("[1]") == [1]
    assert tool_output("5") == "5"
    assert tool_output("{broken") == "{broken"
    assert tool_output(None) is None


def test_tool_input_and_result_outcome_read_what_they_can() -> None:
    assert tool_input('{"a": 1}') == {"a": 1}
    assert tool_input("  ") == {}
    assert tool_input(None) == {}
    assert tool_input({"a": 1}) == {"a": 1}
    assert tool_input("not json") == "not json"
    assert result_outcome(json.dumps({"pydantic_ai": {"outcome": "denied"}})) == "denied"
    assert result_outcome("pydantic_ai but not json") is None
    assert result_outcome(json.dumps(["pydantic_ai"])) is None
    assert result_outcome(json.dumps({"pydantic_ai": "x"})) is None
    assert result_outcome(None) is None


def test_odd_stored_shapes_show_what_they_can() -> None:
    messages = [
        {
            "id": "u",
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "data", "value": "AA", "mimeType": "image/png"},
                    "metadata": {"filename": "a.png"},
                }
            ],
            "metadata": {"attachments": [{"id": "f2", "name": 7}, "junk"]},
        },
        {
            "id": "a",
            "role": "assistant",
            "content": {"odd": True},
            "toolCalls": ["junk", call("c", "add")],
        },
        {
            "id": "t",
            "role": "tool",
            "toolCallId": "c",
            "content": "",
            "encryptedValue": json.dumps({"pydantic_ai": {"outcome": "failed"}}),
        },
        {"id": "x", "role": "activity", "content": "ignored"},
    ]
    user, answer = shown(messages)

    assert user["parts"] == [
        {"type": "file", "mediaType": "application/octet-stream", "url": "/agent/attachments/f2/"},
        {
            "type": "file",
            "mediaType": "image/png",
            "filename": "a.png",
            "url": "data:image/png;base64,AA",
        },
    ]
    [_step, tool] = answer["parts"]
    assert (tool["state"], tool["errorText"]) == ("output-error", "The tool call failed.")
