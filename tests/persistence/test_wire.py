"""Records ↔ stored wire messages: every field round-trips, foreign messages stay verbatim."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from django_pydantic_agent.chat_history import Message, Reasoning, ToolCall
from django_pydantic_agent.persistence.wire import (
    BOOKKEEPING_KEY,
    record_fingerprint,
    records_to_wire,
    wire_to_records,
)
from django_pydantic_agent.testing import sample_messages

CHAT = uuid4()
WHEN = datetime(2026, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)


def _records() -> list[Message]:
    user = Message(
        chat_uuid=CHAT,
        agui_id="u1",
        role="user",
        content="Look at this",
        content_parts=[
            {"type": "text", "text": "Look at this"},
            {"type": "image", "source": {"type": "url", "value": "https://x/i.png"}},
        ],
        in_progress=False,
        status="complete",
        timestamp=WHEN,
        encrypted_value="enc-user",
    )
    answered = ToolCall(
        agui_id="tc1",
        tool_call_id="tc1",
        name="get_weather",
        arguments='{"city":"Paris"}',
        content="18C",
        in_progress=False,
        status="complete",
        run_id="r1",
        result_message_id="res1",
        has_result=True,
        encrypted_value="enc-call",
        result_encrypted_value="enc-result",
        created_at=WHEN,
    )
    failed = ToolCall(
        agui_id="tc2",
        tool_call_id="tc2",
        name="book",
        arguments="{",
        in_progress=False,
        status="errored",
        error="the tool raised",
        run_id="r1",
        created_at=WHEN,
    )
    empty_result = ToolCall(
        agui_id=None,
        tool_call_id="tc3",
        name="noop",
        content="",
        has_result=True,
        status="complete",
        in_progress=False,
        created_at=WHEN,
        content_parts=[{"type": "text", "text": "a"}],
    )
    step = Reasoning(
        agui_id="rs1",
        content="thinking",
        status="interrupted",
        in_progress=True,
        run_id="r1",
        encrypted_value="enc-step",
        created_at=WHEN,
    )
    agent = Message(
        chat_uuid=CHAT,
        agui_id="m1",
        role="assistant",
        content="Half an ans",
        in_progress=True,
        status="interrupted",
        error="cancelled by the user",
        timestamp=WHEN,
        run_id="r1",
        step="answer",
        tool_calls=[answered, failed, empty_result],
        reasonings=[step],
        run_outcome={"run_id": "r1", "type": "cancelled", "interrupts": []},
    )
    anonymous = Message(
        chat_uuid=CHAT,
        agui_id=None,
        role="assistant",
        content="x",
        status="errored",
        in_progress=False,
        timestamp=WHEN,
    )
    activity = Message(
        chat_uuid=CHAT,
        agui_id="a1",
        role="activity",
        activity_type="PLAN",
        activity_content={"steps": [1, 2]},
        status="complete",
        in_progress=False,
        timestamp=WHEN,
    )
    return [user, agent, anonymous, activity]


def _no_nulls(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, dict):
        return all(_no_nulls(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_nulls(v) for v in value)
    return True


def test_every_record_field_round_trips() -> None:
    records = _records()
    wire = records_to_wire(records)
    assert json.loads(json.dumps(wire)) == wire
    assert _no_nulls(wire)
    back = wire_to_records(json.loads(json.dumps(wire)), chat_uuid=CHAT).messages
    assert [record_fingerprint(m) for m in back] == [record_fingerprint(m) for m in records]
    assert [m.message_uuid for m in back] == [m.message_uuid for m in records]
    assert [c.uuid for c in back[1].tool_calls] == [c.uuid for c in records[1].tool_calls]
    assert back[1].reasonings[0].uuid == records[1].reasonings[0].uuid
    assert [m.sequence_id for m in back] == [1, 2, 3, 4]


def test_the_wire_shows_ids_as_streamed_and_statuses() -> None:
    wire = records_to_wire(_records())
    ids = [(m["role"], m["id"]) for m in wire]
    anonymous = _records()[2]
    assert ids[:6] == [
        ("user", "u1"),
        ("reasoning", "rs1"),
        ("assistant", "m1"),
        ("tool", "res1"),
        ("tool", "tc3"),
        ("assistant", ids[5][1]),
    ]
    assert ids[5][1] != anonymous.agui_id
    by_id = {m["id"]: m for m in wire}
    assert by_id["m1"]["status"] == "interrupted"
    assert by_id["m1"]["runId"] == "r1"
    assert by_id["m1"]["error"] == "cancelled by the user"
    assert [c["id"] for c in by_id["m1"]["toolCalls"]] == ["tc1", "tc2", "tc3"]
    assert by_id["m1"]["toolCalls"][0]["encryptedValue"] == "enc-call"
    assert by_id["m1"][BOOKKEEPING_KEY]["toolCalls"][1]["status"] == "errored"
    result = {k: v for k, v in by_id["res1"].items() if k != BOOKKEEPING_KEY}
    assert result == {
        "id": "res1",
        "role": "tool",
        "toolCallId": "tc1",
        "content": "18C",
        "encryptedValue": "enc-result",
        "status": "complete",
        "runId": "r1",
    }
    assert by_id["u1"]["content"][1]["type"] == "image"
    assert by_id["rs1"]["status"] == "interrupted"
    assert by_id["a1"]["activityType"] == "PLAN"


def test_messages_a_client_posted_come_back_verbatim_until_a_run_changes_them() -> None:
    posted = sample_messages()
    read = wire_to_records(posted, chat_uuid=CHAT, salt="t1")
    assert [m.role for m in read.messages] == ["user", "assistant", "user"]
    [call] = read.messages[1].tool_calls
    assert (call.tool_call_id, call.content, call.result_message_id) == (
        "call-1",
        "[]",
        "msg-tool-1",
    )
    assert records_to_wire(read.messages, read.extras, read.originals) == posted
    again = wire_to_records(posted, chat_uuid=CHAT, salt="t1")
    assert [m.message_uuid for m in again.messages] == [m.message_uuid for m in read.messages]

    read.messages[0].status = "errored"
    rewritten = records_to_wire(read.messages, read.extras, read.originals)
    assert rewritten[1:] == posted[1:]
    assert rewritten[0]["status"] == "errored"
    assert rewritten[0]["attachments"] == posted[0]["attachments"]
    assert rewritten[0]["id"] == "msg-user-1"


def test_odd_entries_are_skipped_or_kept_verbatim() -> None:
    posted: list[Any] = [
        "not a message",
        {"id": "t0", "role": "tool", "toolCallId": "nowhere", "content": "orphan"},
        {"id": "u1", "role": "user", "content": "hi"},
        {"id": "t1", "role": "tool", "toolCallId": "nowhere", "content": "orphan"},
        {"id": "r1", "role": "reasoning", "content": "trailing thought"},
    ]
    read = wire_to_records(posted, chat_uuid=CHAT)
    assert [m.role for m in read.messages] == ["user", "assistant"]
    assert read.messages[1].reasonings[0].content == "trailing thought"
    assert records_to_wire(read.messages, read.extras, read.originals) == posted[2:]
