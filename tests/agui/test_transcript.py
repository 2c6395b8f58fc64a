"""``Transcript``: AG-UI events folded into the wire messages a client holds after the stream."""

from __future__ import annotations

import random
from typing import Any

from ag_ui.core import (
    ActivitySnapshotEvent,
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    FunctionCall,
    Message,
    MessagesSnapshotEvent,
    RawEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessage,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextInputContent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from django.http import HttpRequest
from pydantic import TypeAdapter
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.messages import ModelMessage
from pydantic_ai.ui.ag_ui import AGUIAdapter

from django_pydantic_agent.agui import AgentDeps
from django_pydantic_agent.agui.transcript import Transcript
from tests.agui.agents import scripted_agent

MESSAGE = TypeAdapter(Message)


def fold(*events: BaseEvent, include_reasoning: bool = True) -> list[dict[str, Any]]:
    transcript = Transcript(include_reasoning=include_reasoning)
    for event in events:
        transcript.fold(event)
    return transcript.messages()


def text(message_id: str, *deltas: str, end: bool = True) -> list[BaseEvent]:
    events: list[BaseEvent] = [TextMessageStartEvent(message_id=message_id)]
    events += [TextMessageContentEvent(message_id=message_id, delta=d) for d in deltas]
    if end:
        events.append(TextMessageEndEvent(message_id=message_id))
    return events


def call(
    call_id: str, *fragments: str, parent: str | None = "m-1", name: str = "add", end: bool = True
) -> list[BaseEvent]:
    events: list[BaseEvent] = [
        ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name, parent_message_id=parent)
    ]
    events += [ToolCallArgsEvent(tool_call_id=call_id, delta=f) for f in fragments]
    if end:
        events.append(ToolCallEndEvent(tool_call_id=call_id))
    return events


def result(message_id: str, call_id: str, content: Any = "5") -> ToolCallResultEvent:
    return ToolCallResultEvent(message_id=message_id, tool_call_id=call_id, content=content)


def reasoning(message_id: str, *deltas: str, end: bool = True) -> list[BaseEvent]:
    events: list[BaseEvent] = [
        ReasoningStartEvent(message_id=message_id),
        ReasoningMessageStartEvent(message_id=message_id, role="reasoning"),
    ]
    events += [ReasoningMessageContentEvent(message_id=message_id, delta=d) for d in deltas]
    if end:
        events += [
            ReasoningMessageEndEvent(message_id=message_id),
            ReasoningEndEvent(message_id=message_id),
        ]
    return events


def add_call(arguments: str = '{"a": 2, "b": 3}', call_id: str = "c-1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "add", "arguments": arguments}}


# Text messages.


def test_a_text_message_is_an_assistant_message_with_the_streamed_id() -> None:
    assert fold(*text("m-1", "Hello ", "there.")) == [
        {"id": "m-1", "role": "assistant", "content": "Hello there."}
    ]


def test_a_cut_off_text_message_keeps_what_was_received() -> None:
    assert fold(*text("m-1", "Hello ", "the", end=False)) == [
        {"id": "m-1", "role": "assistant", "content": "Hello the"}
    ]


def test_a_text_message_without_text_is_left_out() -> None:
    # The adapter's empty START/END pair before a tool call, with the call never started.
    assert fold(*text("m-1"), *text("m-2", "")) == []


def test_content_without_a_start_still_counts_and_roles_and_names_are_kept() -> None:
    events = [
        TextMessageContentEvent(message_id="m-1", delta="Hi"),
        TextMessageStartEvent(message_id="m-2", role="assistant", name="helper"),
        TextMessageContentEvent(message_id="m-2", delta="Named"),
        TextMessageStartEvent(message_id="u-1", role="user", name="alice"),
        TextMessageContentEvent(message_id="u-1", delta="Question"),
        TextMessageStartEvent(message_id="s-1", role="system"),
        TextMessageContentEvent(message_id="s-1", delta="Be brief."),
        TextMessageStartEvent(message_id="d-1", role="developer"),
        TextMessageContentEvent(message_id="d-1", delta="Debug."),
        TextMessageStartEvent(message_id="u-2", role="user"),
    ]
    assert fold(*events) == [
        {"id": "m-1", "role": "assistant", "content": "Hi"},
        {"id": "m-2", "role": "assistant", "name": "helper", "content": "Named"},
        {"id": "u-1", "role": "user", "name": "alice", "content": "Question"},
        {"id": "s-1", "role": "system", "content": "Be brief."},
        {"id": "d-1", "role": "developer", "content": "Debug."},
    ]


def test_text_chunks_continue_the_current_message_until_another_event() -> None:
    events = [
        TextMessageChunkEvent(message_id="m-1", delta="Hel"),
        TextMessageChunkEvent(delta="lo"),
        TextMessageChunkEvent(message_id="m-2", role="assistant", delta="Second"),
        TextMessageChunkEvent(delta=" one"),
        StepStartedEvent(step_name="x"),
        # The sequence ended: a chunk without an id has nothing to continue.
        TextMessageChunkEvent(delta="lost"),
        TextMessageChunkEvent(message_id="m-1", delta="!"),
    ]
    assert fold(*events) == [
        {"id": "m-1", "role": "assistant", "content": "Hello!"},
        {"id": "m-2", "role": "assistant", "content": "Second one"},
    ]


# Tool calls and results.


def test_a_tool_call_joins_its_parent_message_with_its_streamed_arguments() -> None:
    events = [*text("m-1"), *call("c-1", '{"a": 2, ', '"b": 3}'), result("t-1", "c-1")]
    assert fold(*events) == [
        {"id": "m-1", "role": "assistant", "toolCalls": [add_call()]},
        {"id": "t-1", "role": "tool", "content": "5", "toolCallId": "c-1"},
    ]


def test_a_tool_call_after_text_shares_the_message() -> None:
    events = [*text("m-1", "Let me add."), *call("c-1", "{}")]
    assert fold(*events) == [
        {"id": "m-1", "role": "assistant", "content": "Let me add.", "toolCalls": [add_call("{}")]}
    ]


def test_a_tool_call_without_arguments_is_saved_with_an_empty_object() -> None:
    assert fold(*call("c-1", parent="m-1")) == [
        {"id": "m-1", "role": "assistant", "toolCalls": [add_call("{}")]}
    ]


def test_a_tool_call_without_a_parent_gets_a_message_named_after_it() -> None:
    assert fold(*call("c-1", "{}", parent=None)) == [
        {"id": "c-1", "role": "assistant", "toolCalls": [add_call("{}")]}
    ]


def test_an_unfinished_tool_call_is_dropped_with_its_empty_parent() -> None:
    events = [*text("m-1"), *call("c-1", '{"a": 2, "b": 3}', end=False)]
    assert fold(*events) == []


def test_an_ended_call_with_arguments_that_are_not_json_is_dropped() -> None:
    # pydantic-ai closes an open call before RUN_ERROR, with the fragment it had.
    events = [*text("m-1", "Adding."), *call("c-1", '{"a": 2, '), RunErrorEvent(message="boom")]
    assert fold(*events) == [{"id": "m-1", "role": "assistant", "content": "Adding."}]


def test_a_result_for_a_dropped_call_is_dropped_but_one_for_an_earlier_run_is_kept() -> None:
    events = [
        *call("c-1", "{oops"),
        result("t-1", "c-1"),
        result("t-2", "from-an-earlier-run", "resumed"),
    ]
    assert fold(*events) == [
        {"id": "t-2", "role": "tool", "content": "resumed", "toolCallId": "from-an-earlier-run"}
    ]


def test_arguments_after_the_end_and_repeated_starts_change_nothing() -> None:
    events = [
        *call("c-1", "{}"),
        ToolCallArgsEvent(tool_call_id="c-1", delta="garbage"),
        ToolCallStartEvent(tool_call_id="c-1", tool_call_name="other", parent_message_id="m-2"),
        ToolCallArgsEvent(tool_call_id="never-started", delta="{}"),
        ToolCallEndEvent(tool_call_id="never-started"),
    ]
    assert fold(*events) == [{"id": "m-1", "role": "assistant", "toolCalls": [add_call("{}")]}]


def test_interleaved_parallel_calls_keep_their_own_arguments_and_start_order() -> None:
    events = [
        *text("m-1"),
        ToolCallStartEvent(tool_call_id="c-1", tool_call_name="add", parent_message_id="m-1"),
        ToolCallStartEvent(tool_call_id="c-2", tool_call_name="add", parent_message_id="m-1"),
        ToolCallArgsEvent(tool_call_id="c-2", delta='{"a": 1, '),
        ToolCallArgsEvent(tool_call_id="c-1", delta='{"a": 2, '),
        ToolCallArgsEvent(tool_call_id="c-2", delta='"b": 1}'),
        ToolCallEndEvent(tool_call_id="c-2"),
        ToolCallArgsEvent(tool_call_id="c-1", delta='"b": 3}'),
        ToolCallEndEvent(tool_call_id="c-1"),
        result("t-2", "c-2", "2"),
        result("t-1", "c-1", "5"),
    ]
    assert fold(*events) == [
        {
            "id": "m-1",
            "role": "assistant",
            "toolCalls": [add_call(), add_call('{"a": 1, "b": 1}', "c-2")],
        },
        {"id": "t-2", "role": "tool", "content": "2", "toolCallId": "c-2"},
        {"id": "t-1", "role": "tool", "content": "5", "toolCallId": "c-1"},
    ]


def test_tool_call_chunks_end_when_another_event_arrives() -> None:
    events = [
        ToolCallChunkEvent(
            tool_call_id="c-1", tool_call_name="add", parent_message_id="m-1", delta='{"a": 2, '
        ),
        ToolCallChunkEvent(delta='"b": 3}'),
        ToolCallChunkEvent(tool_call_id="c-1", delta=""),
        # A chunk naming another call ends the first one and starts the second.
        ToolCallChunkEvent(tool_call_id="c-2", tool_call_name="add", parent_message_id="m-1"),
        result("t-1", "c-1"),
        # Still open when the stream stopped: dropped.
        ToolCallChunkEvent(
            tool_call_id="c-3", tool_call_name="add", parent_message_id="m-1", delta="{}"
        ),
    ]
    assert fold(*events) == [
        {"id": "m-1", "role": "assistant", "toolCalls": [add_call(), add_call("{}", "c-2")]},
        {"id": "t-1", "role": "tool", "content": "5", "toolCallId": "c-1"},
    ]


def test_a_tool_call_chunk_that_cannot_start_a_call_is_ignored() -> None:
    events = [
        ToolCallChunkEvent(delta="{}"),
        ToolCallChunkEvent(tool_call_id="c-1", delta="{}"),
        *reasoning("r-1", "Hmm."),
        ToolCallChunkEvent(tool_call_id="c-2", tool_call_name="add", parent_message_id="r-1"),
        ToolCallChunkEvent(delta="{}"),
        RunFinishedEvent(thread_id="t", run_id="r"),
    ]
    assert fold(*events) == [{"id": "r-1", "role": "reasoning", "content": "Hmm."}]


def test_a_tool_result_with_parts_keeps_them() -> None:
    content = [TextInputContent(text="five")]
    assert fold(result("t-1", "c-9", content)) == [
        {
            "id": "t-1",
            "role": "tool",
            "content": [{"type": "text", "text": "five"}],
            "toolCallId": "c-9",
        }
    ]


# Reasoning and encrypted values.


def test_reasoning_is_a_reasoning_message_and_cut_off_reasoning_keeps_its_text() -> None:
    events = [*reasoning("r-1", "First, ", "add."), *reasoning("r-2", "Then", end=False)]
    assert fold(*events) == [
        {"id": "r-1", "role": "reasoning", "content": "First, add."},
        {"id": "r-2", "role": "reasoning", "content": "Then"},
    ]


def test_empty_reasoning_is_left_out() -> None:
    assert fold(*reasoning("r-1")) == []


def test_reasoning_chunks_build_a_reasoning_message() -> None:
    events = [
        ReasoningMessageChunkEvent(message_id="r-1", delta="Think"),
        ReasoningMessageChunkEvent(delta="ing"),
        TextMessageStartEvent(message_id="m-1"),
        ReasoningMessageChunkEvent(delta="lost"),
    ]
    assert fold(*events) == [{"id": "r-1", "role": "reasoning", "content": "Thinking"}]


def test_without_reasoning_nothing_of_it_is_recorded() -> None:
    events = [
        *reasoning("r-1", "Secret plan."),
        ReasoningMessageChunkEvent(message_id="r-2", delta="More secrets."),
        ReasoningEncryptedValueEvent(subtype="message", entity_id="r-1", encrypted_value="sig"),
        *text("m-1", "Answer."),
    ]
    assert fold(*events, include_reasoning=False) == [
        {"id": "m-1", "role": "assistant", "content": "Answer."}
    ]


def test_encrypted_values_attach_to_the_call_or_message_they_name() -> None:
    events = [
        *reasoning("r-1", "Hmm."),
        ReasoningEncryptedValueEvent(subtype="message", entity_id="r-1", encrypted_value="sig"),
        *call("c-1", "{}"),
        ReasoningEncryptedValueEvent(subtype="tool-call", entity_id="c-1", encrypted_value="kind"),
        result("t-1", "c-1"),
        ReasoningEncryptedValueEvent(subtype="message", entity_id="t-1", encrypted_value="out"),
        ReasoningEncryptedValueEvent(subtype="message", entity_id="nobody", encrypted_value="x"),
        ReasoningEncryptedValueEvent(subtype="tool-call", entity_id="nobody", encrypted_value="x"),
    ]
    assert fold(*events) == [
        {"id": "r-1", "role": "reasoning", "content": "Hmm.", "encryptedValue": "sig"},
        {
            "id": "m-1",
            "role": "assistant",
            "toolCalls": [{**add_call("{}"), "encryptedValue": "kind"}],
        },
        {"id": "t-1", "role": "tool", "content": "5", "toolCallId": "c-1", "encryptedValue": "out"},
    ]


# Interleavings, unknown and inconsistent events.


def test_messages_come_out_in_the_order_first_announced() -> None:
    events = [
        TextMessageStartEvent(message_id="m-1"),
        ReasoningMessageStartEvent(message_id="r-1", role="reasoning"),
        TextMessageContentEvent(message_id="m-1", delta="Answer"),
        ReasoningMessageContentEvent(message_id="r-1", delta="Thought"),
        TextMessageContentEvent(message_id="m-1", delta=" continues."),
    ]
    assert fold(*events) == [
        {"id": "m-1", "role": "assistant", "content": "Answer continues."},
        {"id": "r-1", "role": "reasoning", "content": "Thought"},
    ]


def test_unknown_events_change_nothing() -> None:
    noise: list[BaseEvent] = [
        RunStartedEvent(thread_id="t", run_id="r"),
        StateSnapshotEvent(snapshot={"a": 1}),
        StateDeltaEvent(delta=[]),
        StepStartedEvent(step_name="s"),
        StepFinishedEvent(step_name="s"),
        CustomEvent(name="n", value=1),
        RawEvent(event={"x": 1}),
        ActivitySnapshotEvent(message_id="a-1", activity_type="t", content={}),
        MessagesSnapshotEvent(messages=[UserMessage(id="u-9", content="replaced?")]),
        RunFinishedEvent(thread_id="t", run_id="r"),
    ]
    interleaved = [noise[0], *text("m-1", "Hi"), *noise[1:]]
    assert fold(*interleaved) == [{"id": "m-1", "role": "assistant", "content": "Hi"}]
    assert fold(*noise) == []


def test_events_naming_an_id_of_another_kind_are_ignored() -> None:
    events = [
        *reasoning("r-1", "Thought."),
        *text("m-1", "Answer."),
        TextMessageContentEvent(message_id="r-1", delta=" text into reasoning"),
        ReasoningMessageContentEvent(message_id="m-1", delta=" reasoning into text"),
        *call("c-1", "{}", parent="r-1"),
        result("m-1", "c-2"),
        result("t-1", "c-3", "first"),
        result("t-1", "c-4", "second"),
    ]
    assert fold(*events) == [
        {"id": "r-1", "role": "reasoning", "content": "Thought."},
        {"id": "m-1", "role": "assistant", "content": "Answer."},
        {"id": "t-1", "role": "tool", "content": "first", "toolCallId": "c-3"},
    ]


async def real_run() -> tuple[list[BaseEvent], list[ModelMessage]]:
    """The scripted agent's events and new messages, straight from pydantic-ai's adapter."""
    run_input = RunAgentInput(
        thread_id="t",
        run_id="r",
        messages=[UserMessage(id="u-1", content="What is 2 + 3?")],
        state=None,
        tools=[],
        context=[],
        forwarded_props=None,
    )
    results: list[AgentRunResult[Any]] = []
    adapter = AGUIAdapter(agent=scripted_agent(), run_input=run_input)
    deps = AgentDeps(user="alice", request=HttpRequest())
    stream = adapter.run_stream(deps=deps, on_complete=results.append)
    events = [event async for event in stream]
    return events, results[0].new_messages()


async def test_any_order_or_cut_of_a_real_stream_folds_to_valid_messages() -> None:
    events, _ = await real_run()
    shuffler = random.Random(20261130)
    for _ in range(200):
        sample = events[: shuffler.randrange(len(events) + 1)]
        if shuffler.random() < 0.5:
            shuffler.shuffle(sample)
        for message in fold(*sample):
            assert MESSAGE.validate_python(message).id == message["id"]
            assert None not in message.values()


async def test_align_rekeys_a_completed_runs_messages_to_the_streamed_ids() -> None:
    events, new_messages = await real_run()
    transcript = Transcript()
    for event in events:
        transcript.fold(event)
    aligned = transcript.align(AGUIAdapter.dump_messages(new_messages))
    folded = transcript.messages()
    assert [m["id"] for m in aligned] == [m["id"] for m in folded]
    assert [m["role"] for m in aligned] == ["reasoning", "assistant", "tool", "assistant"]
    # The result's arguments are re-serialised; the stream's are as the model sent them.
    assert aligned[1]["toolCalls"][0]["function"]["arguments"] == '{"a":2,"b":3}'
    assert folded[1]["toolCalls"][0]["function"]["arguments"] == '{"a": 2, "b": 3}'
    assert [m.get("content") for m in aligned] == [m.get("content") for m in folded]

    quiet = Transcript(include_reasoning=False)
    for event in events:
        quiet.fold(event)
    assert [m["role"] for m in quiet.align(AGUIAdapter.dump_messages(new_messages))] == [
        "assistant",
        "tool",
        "assistant",
    ]


def test_align_keeps_the_ids_of_messages_the_stream_never_announced() -> None:
    transcript = Transcript()
    for event in text("m-1", "Streamed."):
        transcript.fold(event)
    dumped: list[Message] = [
        AssistantMessage(id="x-1", content="Streamed."),
        AssistantMessage(id="x-2", content="Never streamed."),
        AssistantMessage(
            id="x-3",
            tool_calls=[ToolCall(id="c-9", function=FunctionCall(name="add", arguments="{}"))],
        ),
        ToolMessage(id="x-4", tool_call_id="c-9", content="5"),
        ReasoningMessage(id="x-5", content="Unseen thought."),
        UserMessage(id="x-6", content="Enqueued."),
    ]
    assert [m["id"] for m in transcript.align(dumped)] == ["m-1", "x-2", "x-3", "x-4", "x-5", "x-6"]
