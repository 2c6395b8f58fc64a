"""The example project's demo agent: the safe calculator and the scripted model."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    RunAgentInput,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ag_ui_validate.pytest_plugin import assert_valid_agui
from chat.agent import (
    INSTRUCTIONS,
    REMINDERS,
    build_agent,
    calculate,
    extract_expression,
    server_time,
)
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ModelRetry, ToolDenied
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ThinkingPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.ui.ag_ui import AGUIAdapter


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("6 * 7", "42"),
        ("(2 + 3) ^ 2", "25"),
        ("2 ** 10", "1024"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("1 / 3", "0.3333333333"),
        ("3 \u00d7 4 \u00f7 2", "6"),
        ("0.1 + 0.2", "0.3"),
    ],
)
async def test_calculate(expression: str, expected: str) -> None:
    assert await calculate(expression) == expected


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os').system('true')", "not allowed"),
        ("x + 1", "not allowed"),
        ("'a' * 3", "not allowed"),
        ("2 ** 1000", "exponent"),
        ("10 ** 40", "too large"),
        ("1 / 0", "divides by zero"),
        ("1 +", "not arithmetic"),
        ("", "at most"),
        ("1+" * 150 + "1", "at most"),
    ],
)
async def test_calculate_refuses(expression: str, reason: str) -> None:
    with pytest.raises(ModelRetry, match=reason):
        await calculate(expression)


async def test_server_time_is_now_in_utc() -> None:
    moment = datetime.fromisoformat(await server_time())
    assert moment.tzinfo is not None
    assert abs(moment - datetime.now(UTC)) < timedelta(seconds=5)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What is 12 * (3 + 4)?", "12 * (3 + 4)"),
        ("compute 2^8 please", "2^8"),
        ("what time is it?", None),
        ("I was born in 1990", None),
        ("first 1 + 1, then 20 * 30 + 4", "20 * 30 + 4"),
    ],
)
def test_extract_expression(text: str, expected: str | None) -> None:
    assert extract_expression(text) == expected


def _run_input(prompt: str) -> RunAgentInput:
    return RunAgentInput(
        thread_id="thread-1",
        run_id="run-1",
        messages=[UserMessage(id="user-1", content=prompt)],
        state=None,
        tools=[],
        context=[],
        forwarded_props=None,
    )


async def _events(prompt: str) -> list[dict[str, Any]]:
    agent = build_agent(word_delay=0)
    adapter = AGUIAdapter(agent=agent, run_input=_run_input(prompt))
    return [
        event.model_dump(mode="json", by_alias=True, exclude_none=True)
        async for event in adapter.run_stream()
    ]


def _collapse(types: list[str]) -> list[str]:
    """The event types with runs of the same type squeezed to one."""
    return [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]


async def test_scripted_stream_is_reasoning_then_tool_then_words() -> None:
    events = await _events("What is 12 * (3 + 4)?")

    assert_valid_agui(events)
    assert _collapse([e["type"] for e in events]) == [
        "RUN_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    (start,) = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "calculate"
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert args == '{"expression":"12 * (3 + 4)"}'
    (result,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == "84"
    words = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(words) > 5, "the answer streams word by word"
    assert "".join(words) == "I asked the calculator, and 12 * (3 + 4) = 84."
    reasoning = "".join(e["delta"] for e in events if e["type"] == "REASONING_MESSAGE_CONTENT")
    assert "calculator" in reasoning


async def test_without_arithmetic_the_script_reads_the_clock() -> None:
    events = await _events("Hello there")

    assert_valid_agui(events)
    (start,) = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "server_time"
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert re.match(r"I checked the server's clock: it is \d\d:\d\d:\d\d UTC on ", text)


async def test_a_refused_expression_is_explained() -> None:
    events = await _events("What is 1 / 0?")

    assert_valid_agui(events)
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "The calculate tool could not help this time: '1 / 0' divides by zero."


async def test_a_long_answer_is_long() -> None:
    events = await _events("Tell me a long story")

    assert_valid_agui(events)
    assert sum(e["type"] == "TEXT_MESSAGE_CONTENT" for e in events) > 150


async def test_the_script_answers_without_streaming_too() -> None:
    result = await build_agent(word_delay=0).run("What is 2 + 2?")

    assert result.output == "I asked the calculator, and 2 + 2 = 4."
    first, second = [m for m in result.all_messages() if isinstance(m, ModelResponse)]
    assert isinstance(first.parts[0], ThinkingPart)
    assert isinstance(first.parts[1], ToolCallPart)
    assert isinstance(second.parts[0], TextPart)


def test_build_agent_defaults_to_the_script_and_accepts_a_model_name() -> None:
    scripted = build_agent()
    assert isinstance(scripted.model, FunctionModel)
    assert scripted.name == "demo"
    assert isinstance(build_agent("test").model, TestModel)


async def test_the_model_sees_the_instructions_and_the_tools() -> None:
    seen: dict[str, Any] = {}

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen["instructions"] = info.instructions
        seen["tools"] = sorted(tool.name for tool in info.function_tools)
        return ModelResponse(parts=[TextPart("ok")])

    agent = build_agent()
    with agent.override(model=FunctionModel(respond)):
        await agent.run("hi")

    assert seen == {
        "instructions": INSTRUCTIONS,
        "tools": ["calculate", "read_attachment", "server_time", "set_reminder"],
    }


async def test_a_reminder_waits_for_approval_then_is_set_or_declined() -> None:
    REMINDERS.clear()
    agent = build_agent(word_delay=0)
    asked = await agent.run("Please remind me to water the plants.")
    assert isinstance(asked.output, DeferredToolRequests)
    [call] = asked.output.approvals
    assert (call.tool_name, call.args) == ("set_reminder", {"text": "water the plants"})
    assert REMINDERS == []

    approved = await agent.run(
        message_history=asked.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: True}),
    )
    assert approved.output == "Done. Reminder set: water the plants."
    assert REMINDERS == ["water the plants"]

    denied = await agent.run(
        message_history=asked.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: ToolDenied()}),
    )
    assert denied.output == "All right: no reminder, as you said."
    assert REMINDERS == ["water the plants"]


async def test_the_page_is_asked_about_the_browser_when_it_declares_a_tool() -> None:
    run_input = _run_input("What does my browser say?").model_copy(
        update={"tools": [Tool(name="browser_info", description="The browser.", parameters={})]}
    )
    adapter = AGUIAdapter(agent=build_agent(word_delay=0), run_input=run_input)
    events = [e.model_dump(by_alias=True) async for e in adapter.run_stream()]
    (start,) = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "browser_info"
    assert not any(e["type"] == "TOOL_CALL_RESULT" for e in events)  # the page answers it

    # Without a page tool, the browser question is an ordinary one.
    plain = await _events("What does my browser say?")
    (start,) = [e for e in plain if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "server_time"


async def test_the_pages_answer_is_quoted() -> None:
    call = ToolCall(id="c1", function=FunctionCall(name="browser_info", arguments="{}"))
    run_input = _run_input("What does my browser say?")
    run_input = run_input.model_copy(
        update={
            "tools": [Tool(name="browser_info", description="The browser.", parameters={})],
            "messages": [
                *run_input.messages,
                AssistantMessage(id="a1", tool_calls=[call]),
                ToolMessage(id="t1", tool_call_id="c1", content='{"agent": "x"}'),
            ],
        }
    )
    adapter = AGUIAdapter(agent=build_agent(word_delay=0), run_input=run_input)
    events = [e.model_dump(by_alias=True) async for e in adapter.run_stream()]
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == 'Your browser says: {"agent":"x"}'


def _fenced(prompt: str, *refs: dict[str, Any]) -> RunAgentInput:
    """A run input whose user message carries the fence the server adds for ``refs``."""
    from ag_ui.core import TextInputContent

    from django_pydantic_agent.agui.attachment_fence import attachment_fence

    fence = attachment_fence(list(refs))
    assert fence is not None
    content = [TextInputContent(text=prompt), TextInputContent(text=fence)]
    return _run_input(prompt).model_copy(
        update={"messages": [UserMessage(id="user-1", content=content)]}
    )


async def _fenced_events(prompt: str, *refs: dict[str, Any]) -> list[dict[str, Any]]:
    adapter = AGUIAdapter(agent=build_agent(word_delay=0), run_input=_fenced(prompt, *refs))
    return [
        event.model_dump(mode="json", by_alias=True, exclude_none=True)
        async for event in adapter.run_stream()
    ]


async def test_a_binary_attachment_is_declined_plainly_without_reading_it() -> None:
    picture = {"id": "a1", "name": "2024-05-01.png", "mime": "image/png", "size": 48}

    events = await _fenced_events("What is in this picture?", picture)

    assert_valid_agui(events)
    # No tool reads it, and the date in its name is not taken for arithmetic.
    assert not [e for e in events if e["type"] == "TOOL_CALL_START"]
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.startswith("I can't read **2024-05-01.png**: its type is image/png, and this demo")


async def test_arithmetic_beside_an_attachment_still_goes_to_the_calculator() -> None:
    notes = {"id": "a1", "name": "notes.txt", "mime": "text/plain", "size": 4}

    events = await _fenced_events("What is 6 * 7?", notes)

    (start,) = [e for e in events if e["type"] == "TOOL_CALL_START"]
    assert start["toolCallName"] == "calculate"


def test_a_text_file_is_summarised_by_its_size_and_first_lines() -> None:
    from chat.agent import _file_summary

    ref = {"id": "a1", "name": "notes.txt"}
    five = "one\n\nthree\nfour\nfive\n"
    assert _file_summary(ref, five) == (
        "**notes.txt** (21 bytes, 5 lines) says:\n\n> one\n>\n> three\n\n\u2026and 2 more lines."
    )
    assert _file_summary(ref, "") == "**notes.txt** is empty (0 bytes)."
    long = _file_summary(ref, "x" * 300)
    assert "(300 bytes, 1 line)" in long
    assert long.endswith("x" * 200 + "\u2026")
