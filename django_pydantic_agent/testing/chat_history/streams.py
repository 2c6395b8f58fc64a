"""Scenarios S1-S18: how text, tool calls and reasoning of a stream are stored and replayed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import ag_ui.core
import pytest
from ag_ui.core import (
    AssistantMessage,
    ImageInputContent,
    InputContentUrlSource,
    RunErrorEvent,
    TextInputContent,
    UserMessage,
)

from django_pydantic_agent.chat_history import (
    chat_deduplication_key,
    participant_id,
)
from django_pydantic_agent.testing.agui_script import (
    REV,
    RF,
    RMC,
    RME,
    RMS,
    RS,
    TCA,
    TCE,
    TCR,
    TCS,
    TMC,
    TME,
    TMS,
    REnd,
    RMCh,
    RSt,
    TCCh,
    TMCh,
    run_input,
)
from django_pydantic_agent.testing.chat_history._harness import (
    COMPLETE,
    ERRORED,
    USER,
    ChatHistoryHarness,
    OpenRepositories,
    at,
    call_shape,
    dumps,
    replayed,
    shape,
    step_shape,
)

__all__ = ["StreamScenarios"]


class StreamScenarios(ChatHistoryHarness):
    """S1-S18: text messages, tool calls and reasoning, stored and replayed."""

    # -- S1-S8: text --------------------------------------------------------------------------

    async def test_s01_plain_text_on_a_new_thread(
        self, open_repositories: OpenRepositories
    ) -> None:
        script = [RS(), TMS("m1"), TMC("m1", "Hi"), TMC("m1", " there"), TME("m1"), RF()]
        played = await self.play(open_repositories, *script)

        chat, messages = await self.stored(open_repositories)
        assert chat is not None
        assert (chat.thread_id, chat.name, chat.user_uuid) == ("t1", "Hello", USER)
        assert chat.dedup_key == chat_deduplication_key(USER, "t1")
        assert list(chat.participants) == [participant_id(USER)]
        assert [shape(m) for m in messages] == [
            ("user", "u1", "Hello", COMPLETE, False),
            ("assistant", "m1", "Hi there", COMPLETE, False),
        ]
        user, answer = messages
        assert (user.name, user.emitter_type, user.emitter_id) == ("", "user", participant_id(USER))
        assert (answer.name, answer.step, answer.emitter_type) == ("assistant", None, "agent")
        assert abs(answer.timestamp - at(script[1].timestamp)) < timedelta(milliseconds=1)
        assert dumps(played.events) == dumps(script)
        assert [[replayed(m) for m in h] for h in played.agent.histories] == [
            [("UserMessage", "u1", "Hello")]
        ]

    @pytest.mark.parametrize(
        ("content", "name"),
        [
            ("word " * 150, " ".join(["word"] * 20)),
            ("   ", "New Chat"),
            (
                [
                    TextInputContent(text="Look "),
                    ImageInputContent(source=InputContentUrlSource(value="https://x/i.png")),
                ],
                "Look [image]",
            ),
        ],
        ids=["word-boundary-cut", "blank", "content-parts"],
    )
    async def test_s02_the_chat_is_named_after_the_first_message(
        self, open_repositories: OpenRepositories, content: Any, name: str
    ) -> None:
        await self.play(
            open_repositories,
            RS(),
            RF(),
            input=run_input(UserMessage(id="u1", content=content)),
        )
        chat, messages = await self.stored(open_repositories)
        assert chat is not None
        assert chat.name == name
        assert len(name) <= 100
        if isinstance(content, list):
            assert messages[0].content == "Look [image]"

    async def test_s02d_a_second_run_does_not_rename_the_chat(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(open_repositories, RS(), RF())
        await self.play(
            open_repositories,
            RS("r2"),
            RF("r2"),
            input=run_input(UserMessage(id="u2", content="Another topic"), run_id="r2"),
        )
        chat, _ = await self.stored(open_repositories)
        assert chat is not None
        assert chat.name == "Hello"

    async def test_s03_second_turn_with_the_client_echoing_its_history(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(open_repositories, RS(), TMS("m1"), TMC("m1", "Hi"), TME("m1"), RF())
        echoed = run_input(
            UserMessage(id="u1", content="Hello"),
            AssistantMessage(id="m1", content="Hi"),
            UserMessage(id="u2", content="More"),
            run_id="r2",
        )
        played = await self.play(open_repositories, RS("r2"), RF("r2"), input=echoed)

        assert played.terminal.type == "RUN_FINISHED"
        assert [shape(m) for m in await self.messages(open_repositories)] == [
            ("user", "u1", "Hello", COMPLETE, False),
            ("assistant", "m1", "Hi", COMPLETE, False),
            ("user", "u2", "More", COMPLETE, False),
        ]
        history = played.agent.histories[0]
        assert [replayed(m) for m in history] == [
            ("UserMessage", "u1", "Hello"),
            ("AssistantMessage", "m1", "Hi"),
            ("UserMessage", "u2", "More"),
        ]
        assert not history[1].tool_calls

    async def test_s04_an_edited_echo_is_never_ignored_silently(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(open_repositories, RS(), RF())
        edited = run_input(
            UserMessage(id="u1", content="EDITED"),
            UserMessage(id="u2", content="More"),
            run_id="r2",
        )
        played = await self.play(open_repositories, RS("r2"), RF("r2"), input=edited)
        messages = await self.messages(open_repositories)
        terminal = played.terminal
        if isinstance(terminal, RunErrorEvent):
            # Policy "reject": INVALID_INPUT, and nothing of the run is written.
            assert terminal.code == "INVALID_INPUT"
            assert played.agent.runs == 0
            assert [m.agui_id for m in messages] == ["u1"]
        else:
            # Policy "version": the stored history (and so the replay) follows the edit.
            assert "EDITED" in [m.content for m in messages if m.role == "user"]
            assert "EDITED" in [getattr(m, "content", None) for m in played.agent.histories[0]]

    async def test_s05_text_chunks_are_folded_into_one_message(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(
            open_repositories, RS(), TMCh("m1", "Hel", role="assistant"), TMCh(None, "lo"), RF()
        )
        assert [shape(m) for m in await self.messages(open_repositories)][1:] == [
            ("assistant", "m1", "Hello", COMPLETE, False)
        ]

    async def test_s06_several_messages_in_one_run_keep_their_order(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(
            open_repositories,
            RS(),
            TMS("m1"),
            TMC("m1", "A"),
            TME("m1"),
            TMS("m2"),
            TMC("m2", "B"),
            TME("m2"),
            RF(),
        )
        assert [shape(m) for m in await self.messages(open_repositories)][1:] == [
            ("assistant", "m1", "A", COMPLETE, False),
            ("assistant", "m2", "B", COMPLETE, False),
        ]

    async def test_s07_a_new_message_closes_the_previous_one(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(
            open_repositories, RS(), TMS("m1"), TMC("m1", "a"), TMS("m2"), TMC("m2", "b"), RF()
        )
        assert [shape(m) for m in await self.messages(open_repositories)][1:] == [
            ("assistant", "m1", "a", COMPLETE, False),
            ("assistant", "m2", "b", COMPLETE, False),
        ]

    async def test_s08_content_without_a_start_event_creates_the_message(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(open_repositories, RS(), TMC("m1", "x"), TME("m1"), RF())
        assert [shape(m) for m in await self.messages(open_repositories)][1:] == [
            ("assistant", "m1", "x", COMPLETE, False)
        ]

    # -- S9-S13: tool calls -------------------------------------------------------------------

    async def test_s09_backend_tool_call_with_result(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.weather_turn(open_repositories)
        messages = await self.messages(open_repositories)
        assert [shape(m) for m in messages][1:] == [
            ("assistant", "m1", "Let me check", COMPLETE, False),
            ("assistant", "m2", "It is 18C", COMPLETE, False),
        ]
        (call,) = messages[1].tool_calls
        assert call_shape(call) == (
            "tc1",
            "get_weather",
            '{"city":"Paris"}',
            "18C",
            COMPLETE,
            False,
        )
        assert call.agui_id == "tc1"
        assert messages[2].tool_calls == []

        history = await self.replay(open_repositories)
        assert [type(m).__name__ for m in history] == [
            "UserMessage",
            "AssistantMessage",
            "ToolMessage",
            "AssistantMessage",
        ]
        assistant, result = history[1], history[2]
        assert [(c.id, c.function.name, c.function.arguments) for c in assistant.tool_calls] == [
            ("tc1", "get_weather", '{"city":"Paris"}')
        ]
        # The result replays under the TOOL_CALL_RESULT's message id, the id clients echo.
        assert (result.id, result.tool_call_id, result.content) == ("res1", "tc1", "18C")
        assert [m.id for m in history] == ["u1", "m1", "res1", "m2"]

    async def test_s10_a_tool_call_before_any_text_joins_the_message_that_follows(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(
            open_repositories,
            RS(),
            TCS("tc1", "search"),
            TCA("tc1", "{}"),
            TCE("tc1"),
            TCR("r1", "tc1", "ok"),
            TMS("m1"),
            TMC("m1", "done"),
            TME("m1"),
            RF(),
        )
        messages = await self.messages(open_repositories)
        assert [shape(m) for m in messages][1:] == [("assistant", "m1", "done", COMPLETE, False)]
        assert [call_shape(c) for c in messages[1].tool_calls] == [
            ("tc1", "search", "{}", "ok", COMPLETE, False)
        ]

    async def test_s11_parallel_interleaved_tool_calls(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(
            open_repositories,
            RS(),
            TMS("m1"),
            TME("m1"),
            TCS("a", "f", parent="m1"),
            TCS("b", "g", parent="m1"),
            TCA("a", '{"x":1}'),
            TCA("b", '{"y":2}'),
            TCE("a"),
            TCE("b"),
            TCR("ra", "a", "A"),
            TCR("rb", "b", "B"),
            RF(),
        )
        messages = await self.messages(open_repositories)
        assert sorted(call_shape(c) for c in messages[1].tool_calls) == [
            ("a", "f", '{"x":1}', "A", COMPLETE, False),
            ("b", "g", '{"y":2}', "B", COMPLETE, False),
        ]

    async def test_s11_a_crash_between_parallel_tool_calls_errors_both(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(
            open_repositories,
            RS(),
            TMS("m1"),
            TME("m1"),
            TCS("a", "f", parent="m1"),
            TCS("b", "g", parent="m1"),
            TCA("a", '{"x":1}'),
            TCA("b", '{"y":2}'),
            RuntimeError("tool runner died"),
        )
        messages = await self.messages(open_repositories)
        assert messages[1].status == COMPLETE
        calls = sorted(messages[1].tool_calls, key=lambda c: c.tool_call_id or "")
        assert [(c.tool_call_id, c.arguments, c.status, c.in_progress) for c in calls] == [
            ("a", '{"x":1}', ERRORED, False),
            ("b", '{"y":2}', ERRORED, False),
        ]

    async def test_s12_long_tool_arguments_are_stored_whole(
        self, open_repositories: OpenRepositories
    ) -> None:
        deltas = [f"{i:03d}" + "x" * 97 for i in range(120)]
        await self.play(
            open_repositories,
            RS(),
            TCS("tc1", "bulk"),
            *[TCA("tc1", delta) for delta in deltas],
            TCE("tc1"),
            RF(),
        )
        (call,) = (await self.messages(open_repositories))[1].tool_calls
        assert call.arguments == "".join(deltas)
        assert len(call.arguments) == 12_000

    async def test_s13_tool_call_chunks(self, open_repositories: OpenRepositories) -> None:
        await self.play(
            open_repositories,
            RS(),
            TCCh("tc1", "f", "m1", '{"a"'),
            TCCh(None, None, None, ":1}"),
            RF(),
        )
        messages = await self.messages(open_repositories)
        assert [shape(m) for m in messages][1:] == [("assistant", "m1", "", COMPLETE, False)]
        assert [call_shape(c) for c in messages[1].tool_calls] == [
            ("tc1", "f", '{"a":1}', "", COMPLETE, False)
        ]

    # -- S14-S18: reasoning -------------------------------------------------------------------

    async def test_s14_reasoning_then_an_answer_replays_in_live_order(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(
            open_repositories,
            RS(),
            RSt("s1"),
            RMS("r1"),
            RMC("r1", "think"),
            RME("r1"),
            REnd("s1"),
            TMS("m1"),
            TMC("m1", "answer"),
            TME("m1"),
            RF(),
        )
        messages = await self.messages(open_repositories)
        assert [shape(m) for m in messages][1:] == [("assistant", "m1", "answer", COMPLETE, False)]
        assert [step_shape(r) for r in messages[1].reasonings] == [
            ("r1", "", "think", COMPLETE, False)
        ]
        assert [replayed(m) for m in await self.replay(open_repositories)] == [
            ("UserMessage", "u1", "Hello"),
            ("ReasoningMessage", "r1", "think"),
            ("AssistantMessage", "m1", "answer"),
        ]

    async def test_s15_thinking_events_on_ag_ui_before_1_0(
        self, open_repositories: OpenRepositories
    ) -> None:
        names = (
            "ThinkingStartEvent",
            "ThinkingTextMessageStartEvent",
            "ThinkingTextMessageContentEvent",
            "ThinkingTextMessageEndEvent",
            "ThinkingEndEvent",
        )
        classes: list[Any] = [getattr(ag_ui.core, name, None) for name in names]
        if not all(isinstance(c, type) for c in classes):
            pytest.skip("The installed ag-ui (1.0 or later) has no Thinking* events.")
        start, message_start, content, message_end, end = classes  # pragma: no cover
        await self.play(  # pragma: no cover
            open_repositories,
            RS(),
            start(title="Plan"),
            message_start(),
            content(delta="a"),
            content(delta="b"),
            message_end(),
            end(),
            TMS("m1"),
            TMC("m1", "x"),
            TME("m1"),
            RF(),
        )
        message = (await self.messages(open_repositories))[1]  # pragma: no cover
        assert [step_shape(r) for r in message.reasonings] == [  # pragma: no cover
            (None, "Plan", "ab", COMPLETE, False)
        ]

    async def test_s16_reasoning_chunks_complete_at_run_end(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(
            open_repositories, RS(), RMCh("r1", "x"), RMCh(None, "y"), TMS("m1"), TME("m1"), RF()
        )
        messages = await self.messages(open_repositories)
        assert [shape(m) for m in messages][1:] == [("assistant", "m1", "", COMPLETE, False)]
        assert [step_shape(r) for r in messages[1].reasonings] == [
            ("r1", "", "xy", COMPLETE, False)
        ]

    async def test_s17_two_reasoning_messages_in_one_span(
        self, open_repositories: OpenRepositories
    ) -> None:
        await self.play(
            open_repositories,
            RSt("s"),
            RMS("r1"),
            RMC("r1", "a"),
            RMS("r2"),
            RMC("r2", "b"),
            RME("r2"),
            REnd("s"),
            RF(),
        )
        messages = await self.messages(open_repositories)
        assert len(messages) == 2
        holder = messages[1]
        assert (holder.role, holder.content, holder.status, holder.in_progress) == (
            "assistant",
            "",
            COMPLETE,
            False,
        )
        assert [step_shape(r) for r in holder.reasonings] == [
            ("r1", "", "a", COMPLETE, False),
            ("r2", "", "b", COMPLETE, False),
        ]

    async def test_s18_encrypted_reasoning_is_stored_and_replayed(
        self, open_repositories: OpenRepositories
    ) -> None:
        script = [
            RS(),
            TMS("m1"),
            REV("message", "m1", "opaque=="),
            TMC("m1", "x"),
            TME("m1"),
            TCS("tc1", "f", parent="m1"),
            TCE("tc1"),
            REV("tool-call", "tc1", "sealed=="),
            TCR("res1", "tc1", "done"),
            RF(),
        ]
        played = await self.play(open_repositories, *script)
        assert dumps(played.events) == dumps(script)
        message = (await self.messages(open_repositories))[1]
        assert (message.agui_id, message.encrypted_value) == ("m1", "opaque==")
        assert [c.encrypted_value for c in message.tool_calls] == ["sealed=="]
        history = await self.replay(open_repositories)
        (assistant,) = [m for m in history if m.id == "m1"]
        assert assistant.encrypted_value == "opaque=="
        assert [c.encrypted_value for c in assistant.tool_calls] == ["sealed=="]
