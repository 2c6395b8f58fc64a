"""``vercel_ai.stream``: a run's AG-UI events as the AI SDK's UI message stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from ag_ui.core import (
    BaseEvent,
    MessagesSnapshotEvent,
    ReasoningEncryptedValueEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.core.events import (
    RunFinishedCancelledOutcome,
    RunFinishedInterruptOutcome,
)

from django_pydantic_agent.agui.relay import RunStream
from django_pydantic_agent.agui.sse import SSE_HEARTBEAT
from django_pydantic_agent.vercel_ai import UIMessageStreamEncoder, ui_message_response
from django_pydantic_agent.vercel_ai.stream import DONE, STOPPED, ui_message_frames
from tests.vercel_ai.conftest import chunks, fold

STARTED = RunStartedEvent(thread_id="t", run_id="r")
DENIED = json.dumps({"pydantic_ai": {"outcome": "denied"}})
FAILED = json.dumps({"pydantic_ai": {"outcome": "failed"}})


def encode(events: list[BaseEvent], **kwargs: Any) -> list[dict[str, Any]]:
    encoder = UIMessageStreamEncoder(**kwargs)
    found = []
    for event in events:
        found += encoder.feed(event)
    found += encoder.flush()
    return [json.loads(chunk.encode(6)) for chunk in found]


def types(found: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in found]


def text(message_id: str, *deltas: str) -> list[BaseEvent]:
    return [
        TextMessageStartEvent(message_id=message_id),
        *(TextMessageContentEvent(message_id=message_id, delta=d) for d in deltas),
        TextMessageEndEvent(message_id=message_id),
    ]


def call(call_id: str, name: str, *args: str, parent: str | None = "m1") -> list[BaseEvent]:
    return [
        ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name, parent_message_id=parent),
        *(ToolCallArgsEvent(tool_call_id=call_id, delta=a) for a in args),
        ToolCallEndEvent(tool_call_id=call_id),
    ]


def finished(**kwargs: Any) -> RunFinishedEvent:
    return RunFinishedEvent(thread_id="t", run_id="r", **kwargs)


def test_a_turn_is_a_message_with_steps() -> None:
    events = [
        STARTED,
        ReasoningStartEvent(message_id="rs"),
        ReasoningMessageStartEvent(message_id="rs", role="reasoning"),
        ReasoningMessageContentEvent(message_id="rs", delta="Hm."),
        ReasoningMessageEndEvent(message_id="rs"),
        *text("m1"),  # the empty message that parents the tool call: no part
        *call("c1", "add", '{"a": ', "1}"),
        ToolCallResultEvent(message_id="x", tool_call_id="c1", content="1"),
        *text("m2", "One", "."),
        finished(usage=[{"model": "m", "inputTokens": 1, "outputTokens": 2, "totalTokens": 3}]),
    ]
    found = encode(events, server_tools=frozenset({"add"}))

    assert types(found) == [
        "start",
        "start-step",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-delta",
        "tool-input-available",
        "tool-output-available",
        "finish-step",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    # The message is named by the run's first message, as the stored thread names it.
    assert found[0] == {"type": "start", "messageId": "rs", "messageMetadata": {"runId": "r"}}
    assert found[8] == {
        "type": "tool-input-available",
        "toolCallId": "c1",
        "toolName": "add",
        "input": {"a": 1},
        "providerExecuted": True,
    }
    assert found[-1] == {
        "type": "finish",
        "finishReason": "stop",
        "messageMetadata": {
            "runId": "r",
            "status": "complete",
            "usage": [{"model": "m", "inputTokens": 1, "outputTokens": 2, "totalTokens": 3}],
        },
    }
    message = fold(found)
    assert [p["type"] for p in message["parts"]] == [
        "step-start",
        "reasoning",
        "tool-add",
        "step-start",
        "text",
    ]


def test_a_continued_answer_starts_at_once_with_its_id() -> None:
    found = encode(
        [STARTED, ToolCallResultEvent(message_id="x", tool_call_id="c1", content="{}")],
        message_id="a-1",
    )

    assert found[0] == {"type": "start", "messageId": "a-1", "messageMetadata": {"runId": "r"}}
    assert found[1]["type"] == "tool-output-available"
    assert found[1]["output"] == {}


def test_a_page_tool_call_ends_the_message_waiting_for_it() -> None:
    found = encode([STARTED, *text("m1"), *call("c1", "page", "{}"), finished()])

    assert found[-1]["finishReason"] == "tool-calls"
    assert "providerExecuted" not in found[-3]
    assert found[-3]["type"] == "tool-input-available"


def test_tool_results_denied_or_failed() -> None:
    found = encode(
        [
            STARTED,
            *call("c1", "email", "{}"),
            *call("c2", "add", "not json"),
            ToolCallResultEvent(message_id="x1", tool_call_id="c1", content="No."),
            ReasoningEncryptedValueEvent(subtype="message", entity_id="x1", encrypted_value=DENIED),
            ToolCallResultEvent(message_id="x2", tool_call_id="c2", content="Bad args."),
            ReasoningEncryptedValueEvent(subtype="message", entity_id="x2", encrypted_value=FAILED),
            ToolCallResultEvent(message_id="x3", tool_call_id="c3", content="junk {"),
            ReasoningEncryptedValueEvent(subtype="message", entity_id="zz", encrypted_value="junk"),
        ]
    )

    assert found[7] == {
        "type": "tool-input-available",
        "toolCallId": "c2",
        "toolName": "add",
        "input": "not json",
    }
    assert found[-3] == {"type": "tool-output-denied", "toolCallId": "c1"}
    assert found[-2] == {
        "type": "tool-output-error",
        "toolCallId": "c2",
        "errorText": "Bad args.",
        "providerExecuted": True,
    }
    assert found[-1]["output"] == "junk {"


def test_an_approval_the_run_waits_for() -> None:
    interrupt = RunFinishedInterruptOutcome(
        interrupts=[{"id": "int-1", "toolCallId": "c1", "reason": "tool_call"}]
    )
    found = encode([STARTED, *text("m1"), *call("c1", "email", "{}"), finished(outcome=interrupt)])

    assert types(found)[-3:] == ["tool-approval-request", "finish-step", "finish"]
    assert found[-3] == {"type": "tool-approval-request", "approvalId": "int-1", "toolCallId": "c1"}
    assert found[-1]["finishReason"] == "tool-calls"
    assert fold(found)["parts"][-1]["state"] == "approval-requested"


def test_a_stopped_run_closes_its_parts_and_aborts() -> None:
    found = encode(
        [
            STARTED,
            TextMessageStartEvent(message_id="m1"),
            TextMessageContentEvent(message_id="m1", delta="Par"),
            ReasoningMessageStartEvent(message_id="rs", role="reasoning"),
            ReasoningMessageContentEvent(message_id="rs", delta="Hm"),
            finished(outcome=RunFinishedCancelledOutcome()),
        ]
    )

    assert types(found)[-5:] == ["text-end", "reasoning-end", "finish-step", "abort", "finish"]
    assert found[-2] == {"type": "abort", "reason": STOPPED}
    assert found[-1] == {
        "type": "finish",
        "messageMetadata": {"runId": "r", "status": "interrupted"},
    }


def test_a_failed_run_ends_with_error_and_its_code() -> None:
    found = encode(
        [STARTED, *text("m1", "Hi"), RunErrorEvent(message="Nope.", code="INVALID_INPUT")]
    )

    assert types(found)[-3:] == ["finish-step", "error", "finish"]
    assert found[-2] == {"type": "error", "errorText": "Nope."}
    assert found[-1]["finishReason"] == "error"
    assert found[-1]["messageMetadata"] == {
        "runId": "r",
        "status": "errored",
        "errorCode": "INVALID_INPUT",
    }
    # Refused before any message: a message-less start.
    assert encode([STARTED, RunErrorEvent(message="No.")])[0] == {
        "type": "start",
        "messageMetadata": {"runId": "r"},
    }


SNAPSHOT = [
    {"id": "u", "role": "user", "content": "Go"},
    {"id": "rs", "role": "reasoning", "content": "Hm.", "status": "interrupted", "runId": "r"},
    {
        "id": "a",
        "role": "assistant",
        "content": "Half",
        "toolCalls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
        ],
        "runId": "r",
    },
    {"id": "x", "role": "tool", "toolCallId": "c1", "content": "2", "runId": "r"},
]


def test_a_snapshot_at_the_start_replays_the_answer() -> None:
    events = [
        STARTED,
        MessagesSnapshotEvent(messages=SNAPSHOT),
        *text("m2", "Whole."),
        finished(),
    ]
    found = encode(events, server_tools=frozenset({"add"}))
    message = fold(found)

    assert message["id"] == "rs"
    assert [(p["type"], p.get("text"), p.get("state")) for p in message["parts"]] == [
        ("step-start", None, None),
        ("reasoning", "Hm.", "done"),
        ("text", "Half", "done"),
        ("tool-add", None, "output-available"),
        ("step-start", None, None),
        ("text", "Whole.", "done"),
    ]


def test_a_snapshot_midway_adds_only_what_the_stream_lacked() -> None:
    events = [
        STARTED,
        ReasoningMessageStartEvent(message_id="rs", role="reasoning"),
        ReasoningMessageContentEvent(message_id="rs", delta="Hm."),
        ReasoningMessageEndEvent(message_id="rs"),
        MessagesSnapshotEvent(messages=SNAPSHOT),
        finished(),
    ]
    found = encode(events)

    assert types(found).count("reasoning-start") == 1
    assert [p["type"] for p in fold(found)["parts"]] == [
        "step-start",
        "reasoning",
        "text",
        "tool-add",
    ]
    # A snapshot of a thread whose answer has not begun adds nothing.
    assert encode([MessagesSnapshotEvent(messages=SNAPSHOT[:1])]) == []


def test_events_sent_again_by_a_reattach_are_not_sent_twice() -> None:
    found = encode([STARTED, *call("c1", "add", "{}"), *call("c1", "add", "{}"), finished()])

    assert types(found).count("tool-input-start") == 1
    assert types(found).count("tool-input-available") == 1


async def batches(*items: Any) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def test_frames_end_with_done_after_finish() -> None:
    encoder = UIMessageStreamEncoder()
    events = [STARTED, *text("m1", "Hi"), finished()]
    frames = [
        frame
        async for frame in ui_message_frames(
            batches(None, [(1, e) for e in events], [(9, STARTED)]), encoder
        )
    ]

    assert frames[0] == SSE_HEARTBEAT
    assert frames[-1].endswith(DONE)
    assert types(chunks("".join(frames)))[-1] == "finish"


async def test_a_stream_without_the_end_has_no_done_and_flushes_what_it_held() -> None:
    encoder = UIMessageStreamEncoder()
    result = ToolCallResultEvent(message_id="x", tool_call_id="c1", content="1")
    frames = [
        frame
        async for frame in ui_message_frames(
            batches([(1, STARTED)], [(2, result)], None, [(3, result)]), encoder
        )
    ]
    body = "".join(frames)

    assert DONE not in body
    assert types(chunks(body)) == ["start", "tool-output-available"]


async def test_the_response_carries_the_stream_header() -> None:
    stream = RunStream(batches([(1, STARTED)], [(2, finished())]), paced=False)
    response = ui_message_response(
        stream, UIMessageStreamEncoder(), heartbeat_seconds=None, coalesce_seconds=0
    )
    body = b"".join([part async for part in response])  # type: ignore[attr-defined]

    assert response["x-vercel-ai-ui-message-stream"] == "v1"
    assert response["Content-Type"] == "text/event-stream"
    assert response["Content-Encoding"] == "identity"
    assert body.endswith(DONE.encode())


def test_a_replay_sends_each_stored_outcome_once() -> None:
    denied = json.dumps({"pydantic_ai": {"outcome": "denied"}})
    outcome = {"type": "interrupt", "interrupts": [{"id": "int-ask", "toolCallId": "ask"}]}
    group = [
        {
            "id": "a",
            "role": "assistant",
            "toolCalls": [
                {"id": c, "type": "function", "function": {"name": "email", "arguments": "{}"}}
                for c in ("ask", "no", "err")
            ],
            "chatHistory": {"runOutcome": outcome},
        },
        {
            "id": "x1",
            "role": "tool",
            "toolCallId": "no",
            "content": "No.",
            "encryptedValue": denied,
        },
        {"id": "x2", "role": "tool", "toolCallId": "err", "content": "", "error": "Boom."},
    ]
    encoder = UIMessageStreamEncoder()
    found = [json.loads(c.encode(6)) for c in encoder.replay(group)]
    again = encoder.replay(group)

    assert [c["type"] for c in found] == [
        "start",
        "start-step",
        "tool-input-available",
        "tool-approval-request",
        "tool-input-available",
        "tool-output-denied",
        "tool-input-available",
        "tool-output-error",
    ]
    # Stored under an id of its own: the server's result, so the server ran the tool.
    assert found[-1] == {
        "type": "tool-output-error",
        "toolCallId": "err",
        "errorText": "Boom.",
        "providerExecuted": True,
    }
    assert again == []
    assert encoder.replay([]) == []


async def test_a_result_held_at_the_end_of_the_log_is_sent() -> None:
    result = ToolCallResultEvent(message_id="x", tool_call_id="c1", content="1")
    frames = [
        frame
        async for frame in ui_message_frames(
            batches([(1, STARTED), (2, result)]), UIMessageStreamEncoder()
        )
    ]

    assert types(chunks("".join(frames))) == ["start", "tool-output-available"]
