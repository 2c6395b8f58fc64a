"""translate_messages: concrete ag-ui 1.0 classes, live order, exact ids, nothing fabricated."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from ag_ui.core import (
    ActivityMessage,
    AssistantMessage,
    DeveloperMessage,
    ReasoningMessage,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter

from django_pydantic_agent.chat_history import Message, Reasoning, ToolCall, translate_messages
from django_pydantic_agent.chat_history.agui_messages import records_to_wire
from django_pydantic_agent.chat_history.translate import (
    BOOKKEEPING_KEY,
    replayed_ids,
)
from tests.chat_history.scripted import run_input


def _message(seq: int, **fields: Any) -> Message:
    message = Message(**fields)
    message._sequence_id = seq
    return message


def _weather_history() -> list[Message]:
    call = ToolCall(
        agui_id="tc1",
        tool_call_id="tc1",
        name="get_weather",
        arguments='{"city":"Paris"}',
        content="18C",
        has_result=True,
        result_message_id="res1",
        status="complete",
        in_progress=False,
    )
    return [
        _message(1, role="user", agui_id="u1", content="Weather?", status="complete"),
        _message(
            2,
            role="assistant",
            agui_id="m1",
            content="Let me check",
            tool_calls=[call],
            reasonings=[Reasoning(agui_id="r1", content="think", encrypted_value='{"id":"x"}')],
            status="complete",
        ),
        _message(3, role="assistant", agui_id="m2", content="It is 18C", status="complete"),
    ]


def test_s9_replays_concrete_classes_in_live_order_with_echoed_ids() -> None:
    replayed = translate_messages(_weather_history())
    assert [type(m) for m in replayed] == [
        UserMessage,
        ReasoningMessage,
        AssistantMessage,
        ToolMessage,
        AssistantMessage,
    ]
    assert [m.id for m in replayed] == ["u1", "r1", "m1", "res1", "m2"]
    assistant = replayed[2]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.tool_calls is not None
    assert assistant.tool_calls[0].id == "tc1"
    assert assistant.tool_calls[0].function.arguments == '{"city":"Paris"}'
    result = replayed[3]
    assert isinstance(result, ToolMessage)
    assert (result.tool_call_id, result.content, result.error) == ("tc1", "18C", None)
    reasoning = replayed[1]
    assert isinstance(reasoning, ReasoningMessage)
    assert reasoning.encrypted_value == '{"id":"x"}'


def test_s84_4_unanswered_call_replays_as_no_result_not_a_fabricated_success() -> None:
    call = ToolCall(tool_call_id="tc9", agui_id="tc9", name="confirm", status="interrupted")
    replayed = translate_messages([_message(1, role="assistant", tool_calls=[call])])
    result = replayed[-1]
    assert isinstance(result, ToolMessage)
    assert result.id == "tc9"
    assert "Completed" not in str(result.content)
    assert result.error is not None
    assert "No result was recorded" in result.error
    assert "interrupted" in result.error


def test_s84_6_replay_order_is_the_stored_sequence_not_the_clock() -> None:
    late = _message(2, role="assistant", agui_id="m1", content="answer")
    late.timestamp = datetime(1970, 1, 20, tzinfo=UTC)  # seconds read as milliseconds
    early = _message(1, role="user", agui_id="u1", content="question")
    assert [m.id for m in translate_messages([late, early])] == ["u1", "m1"]


def test_content_parts_and_encrypted_values_replay_losslessly() -> None:
    parts = [
        {"type": "text", "text": "Look "},
        {"type": "image", "source": {"type": "url", "value": "https://example.com/cat.png"}},
    ]
    call = ToolCall(
        tool_call_id="tc1",
        name="render",
        content="chart[image]",
        content_parts=[{"type": "text", "text": "chart"}],
        has_result=True,
        encrypted_value="call-secret",
        result_encrypted_value="result-secret",
    )
    replayed = translate_messages(
        [
            _message(1, role="user", agui_id="u1", content="Look [image]", content_parts=parts),
            _message(2, role="assistant", agui_id="m1", encrypted_value="msg", tool_calls=[call]),
        ]
    )
    user = replayed[0]
    assert isinstance(user, UserMessage)
    assert [p.model_dump(by_alias=True, exclude_none=True) for p in user.content] == parts  # type: ignore[union-attr]
    assistant, result = replayed[1], replayed[2]
    assert isinstance(assistant, AssistantMessage)
    assert isinstance(result, ToolMessage)
    assert assistant.encrypted_value == "msg"
    assert assistant.content is None
    assert assistant.tool_calls is not None
    assert assistant.tool_calls[0].encrypted_value == "call-secret"
    assert result.encrypted_value == "result-secret"
    assert [p.model_dump(exclude_none=True) for p in result.content] == [  # type: ignore[union-attr]
        {"type": "text", "text": "chart"}
    ]


def test_invalid_stored_parts_fall_back_to_the_flattened_text() -> None:
    replayed = translate_messages(
        [_message(1, role="user", agui_id="u1", content="x", content_parts=[{"type": "nope"}])]
    )
    assert replayed[0].content == "x"  # type: ignore[union-attr]


def test_empty_records_are_left_out_and_uuid_ids_fill_gaps() -> None:
    anonymous = _message(
        1,
        role="assistant",
        content="hi",
        reasonings=[Reasoning(content=""), Reasoning(content="t")],
    )
    empty = _message(2, role="assistant", content="")
    replayed = translate_messages([anonymous, empty])
    assert [type(m) for m in replayed] == [ReasoningMessage, AssistantMessage]
    assert replayed[0].id == str(anonymous.reasonings[1].uuid)
    assert replayed[1].id == str(anonymous.message_uuid)
    assert replayed_ids([anonymous, empty]) >= {
        str(anonymous.message_uuid),
        str(anonymous.reasonings[1].uuid),
        str(empty.message_uuid),
    }


def test_other_roles_and_bookkeeping_metadata() -> None:
    stored = [
        _message(1, role="system", agui_id="s1", content="be brief"),
        _message(2, role="developer", agui_id="d1", content="dev"),
        _message(
            3,
            role="activity",
            agui_id="a1",
            activity_type="progress",
            activity_content={"pct": 50},
        ),
        _message(4, role="assistant", agui_id="m1", content="x", status="errored", error="[E] x"),
    ]
    stored[3].run_id = "r1"
    replayed = translate_messages(stored)
    assert [type(m) for m in replayed] == [
        SystemMessage,
        DeveloperMessage,
        ActivityMessage,
        AssistantMessage,
    ]
    activity = replayed[2]
    assert isinstance(activity, ActivityMessage)
    assert (activity.activity_type, activity.content) == ("progress", {"pct": 50})
    meta = replayed[3].metadata
    assert meta is not None
    assert meta[BOOKKEEPING_KEY] == {
        "uuid": str(stored[3].message_uuid),
        "status": "errored",
        "error": "[E] x",
        "run_id": "r1",
    }


def test_the_model_gets_the_ids_and_bookkeeping_clients_get_renamed_at_one_place() -> None:
    stored = _weather_history()
    stored[1].run_id = "r1"
    stored[1].run_outcome = {"type": "success"}
    sent = {m["id"]: m for m in records_to_wire(stored)}
    replayed = translate_messages(stored)
    assert [m.id for m in replayed] == list(sent)
    for message in replayed:
        assert message.metadata is not None
        book, wire = message.metadata[BOOKKEEPING_KEY], sent[message.id]
        renamed = {"runId": "run_id", "runOutcome": "run_outcome"}
        expected = {
            renamed.get(key, key): value
            for key, value in {**wire, **wire["chatHistory"]}.items()
            if key in ("uuid", "status", "error", "runId", "runOutcome")
        }
        assert book == expected


def test_unsequenced_input_keeps_its_order() -> None:
    first, second = Message(role="user", agui_id="a"), Message(role="user", agui_id="b")
    assert [m.id for m in translate_messages([first, second])] == ["a", "b"]


async def test_s84_1_pydantic_ai_sees_the_whole_replayed_history() -> None:
    seen: list[list[ModelMessage]] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        seen.append(messages)
        yield "ok"

    history = translate_messages(_weather_history())
    agent = Agent(FunctionModel(stream_function=model))
    adapter = AGUIAdapter(
        agent=agent,
        run_input=run_input(*history, UserMessage(id="u2", content="And tomorrow?")),
    )
    events = [e async for e in adapter.run_stream()]
    assert events[-1].type == "RUN_FINISHED"
    parts = [(type(p).__name__) for m in seen[0] for p in m.parts]
    assert parts == [
        "UserPromptPart",
        "ThinkingPart",
        "TextPart",
        "ToolCallPart",
        "ToolReturnPart",
        "TextPart",
        "UserPromptPart",
    ]
    requests = [m for m in seen[0] if isinstance(m, ModelRequest)]
    responses = [m for m in seen[0] if isinstance(m, ModelResponse)]
    assert isinstance(requests[0].parts[0], UserPromptPart)
    assert requests[0].parts[0].content == "Weather?"
    assert isinstance(responses[0].parts[0], ThinkingPart)
    assert responses[0].parts[0].id == "x"  # the encrypted metadata came back
    call = responses[0].parts[2]
    assert isinstance(call, ToolCallPart)
    assert call.tool_call_id == "tc1"
    ret = requests[1].parts[0]
    assert isinstance(ret, ToolReturnPart)
    assert ret.content == "18C"


async def test_pydantic_ai_accepts_an_unanswered_call_as_a_failed_return() -> None:
    seen: list[list[ModelMessage]] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        seen.append(messages)
        yield "ok"

    call = ToolCall(tool_call_id="tc9", name="confirm", status="complete")
    history = translate_messages(
        [
            _message(1, role="user", agui_id="u1", content="Do it"),
            _message(2, role="assistant", agui_id="m1", tool_calls=[call]),
        ]
    )
    adapter = AGUIAdapter(
        agent=Agent(FunctionModel(stream_function=model)),
        run_input=run_input(*history, UserMessage(id="u2", content="never mind")),
    )
    [e async for e in adapter.run_stream()]
    returns = [p for m in seen[0] for p in m.parts if isinstance(p, ToolReturnPart)]
    assert len(returns) == 1
    assert returns[0].outcome == "failed"
    assert "No result was recorded" in str(returns[0].content)


def test_calls_held_by_an_open_interrupt_stay_without_a_result() -> None:
    held = ToolCall(tool_call_id="tc1", name="delete")
    stale = ToolCall(tool_call_id="tc0", name="old", status="interrupted")
    outcome = {
        "type": "interrupt",
        "interrupts": [{"id": "i1", "reason": "tool_call", "toolCallId": "tc1"}],
    }
    stored = [
        _message(1, role="assistant", agui_id="m0", tool_calls=[stale]),
        _message(2, role="assistant", agui_id="m1", tool_calls=[held], run_outcome=outcome),
    ]
    assert [m.id for m in translate_messages(stored)] == ["m0", "tc0", "m1"]
    stored.append(_message(3, role="assistant", content="x", run_outcome={"type": "success"}))
    assert [m.id for m in translate_messages(stored)] == [
        "m0",
        "tc0",
        "m1",
        "tc1",
        str(stored[2].message_uuid),
    ]


def test_replayed_ids_hold_every_id_a_replay_shows_without_translating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client may echo any replayed id back, so the inbound check must know each one; it
    derives them from the records (the run path no longer translates its history twice)."""
    from django_pydantic_agent.chat_history import translate as module

    anonymous_call = ToolCall(name="lookup", arguments="{}", content="r", has_result=True)
    unanswered = ToolCall(tool_call_id="tc9", name="confirm", status="interrupted")
    histories = [
        _weather_history(),
        [
            _message(1, role="system", content="be brief"),
            _message(2, role="user", content="q", content_parts=[{"type": "text", "text": "q"}]),
            _message(
                3,
                role="assistant",
                content="a",
                reasonings=[Reasoning(content="t"), Reasoning(agui_id="r1", content="u")],
                tool_calls=[anonymous_call, unanswered],
            ),
            _message(4, role="activity", activity_type="progress", activity_content={"p": 1}),
            _message(5, role="developer", agui_id="d1", content="dev"),
        ],
    ]
    expected = [{m.id for m in translate_messages(history)} for history in histories]
    translations: list[int] = []
    real = module.translate_messages
    monkeypatch.setattr(
        module, "translate_messages", lambda m: translations.append(len(m)) or real(m)
    )
    for history, replayed in zip(histories, expected, strict=True):
        assert replayed <= replayed_ids(history)
    assert translations == []
