"""``GuardedStorageAgent``: the storage agent of one durable run, its store failures as
``RUN_ERROR``."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)

from django_pydantic_agent.agui.run import GuardedStorageAgent
from django_pydantic_agent.persistence import StoreLimitError
from tests.chat_history.scripted import ScriptedAgent


def _input() -> RunAgentInput:
    return RunAgentInput(
        thread_id="t-guard",
        run_id="r-guard",
        state={},
        messages=[],
        tools=[],
        context=[],
        forwarded_props={},
    )


class _Closing(ScriptedAgent):
    """A ``ScriptedAgent`` that records whether its stream was closed."""

    closed = False

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        try:
            async for event in super().run(input):
                yield event
        finally:
            self.closed = True


def _answer(*, ending: bool = True) -> list[BaseEvent]:
    events: list[BaseEvent] = [
        RunStartedEvent(thread_id="t-guard", run_id="r-guard"),
        TextMessageStartEvent(message_id="m1"),
        TextMessageContentEvent(message_id="m1", delta="Hi"),
        TextMessageEndEvent(message_id="m1"),
    ]
    if ending:
        events.append(RunFinishedEvent(thread_id="t-guard", run_id="r-guard"))
    return events


async def _collect(guard: GuardedStorageAgent) -> list[BaseEvent]:
    return [event async for event in guard.run(_input())]


async def test_run_started_goes_out_first_and_only_once() -> None:
    agent = _Closing(_answer())
    events = await _collect(GuardedStorageAgent(agent, expose_error_messages=False))  # type: ignore[arg-type]
    types = [event.type.value for event in events]
    assert types == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert (events[0].thread_id, events[0].run_id) == ("t-guard", "r-guard")  # type: ignore[attr-defined]
    assert agent.closed


async def test_a_store_refusal_mid_stream_ends_with_a_store_limit_run_error() -> None:
    agent = ScriptedAgent([*_answer(ending=False), StoreLimitError("This thread is full.")])
    events = await _collect(GuardedStorageAgent(agent, expose_error_messages=False))  # type: ignore[arg-type]
    assert events[-1].type.value == "RUN_ERROR"
    assert isinstance(events[-1], RunErrorEvent)
    assert events[-1].code == "STORE_LIMIT"
    assert [e.type.value for e in events].count("RUN_STARTED") == 1


@pytest.mark.parametrize("expose", [False, True])
async def test_any_other_failure_before_the_end_is_a_store_failed_run_error(expose: bool) -> None:
    agent = ScriptedAgent([*_answer(ending=False), RuntimeError("disk on fire at /var/db")])
    events = await _collect(GuardedStorageAgent(agent, expose_error_messages=expose))  # type: ignore[arg-type]
    terminal = events[-1]
    assert isinstance(terminal, RunErrorEvent)
    assert terminal.code == "STORE_FAILED"
    assert ("disk on fire" in terminal.message) is expose


async def test_a_failure_after_the_terminal_event_is_raised_not_sent_as_a_second_end() -> None:
    agent = ScriptedAgent([*_answer(), RuntimeError("the last flush failed")])
    guard = GuardedStorageAgent(agent, expose_error_messages=False)  # type: ignore[arg-type]
    seen: list[BaseEvent] = []

    async def read() -> None:
        async for event in guard.run(_input()):
            seen.append(event)

    with pytest.raises(RuntimeError, match="the last flush failed"):
        await read()
    assert [e.type.value for e in seen][-1] == "RUN_FINISHED"
    assert not any(isinstance(e, RunErrorEvent) for e in seen)
