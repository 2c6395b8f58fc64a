"""The scripted inner agent and the event builders of ``testing.agui_script``."""

from __future__ import annotations

import asyncio
import time

import pytest
from ag_ui.core import EventType, UserMessage

from django_pydantic_agent.testing import agui_script as s


async def _drain(agent: s.ScriptedAgent, **fields: object) -> list[object]:
    return [event async for event in agent.run(s.run_input(**fields))]  # type: ignore[arg-type]


async def test_events_are_stamped_as_they_are_yielded_unless_already_stamped() -> None:
    before = int(time.time() * 1000)
    stamped = s.TMC("m1", "x")
    stamped.timestamp = 42
    agent = s.ScriptedAgent(s.RS(), stamped, s.RF())
    events = await _drain(agent)
    assert [e.type for e in events] == [  # type: ignore[attr-defined]
        EventType.RUN_STARTED,
        EventType.TEXT_MESSAGE_CONTENT,
        EventType.RUN_FINISHED,
    ]
    assert events[0].timestamp >= before  # type: ignore[attr-defined]
    assert events[1].timestamp == 42  # type: ignore[attr-defined]
    assert s.now_ms() >= events[2].timestamp  # type: ignore[attr-defined]


async def test_the_agent_records_each_history_and_raises_where_the_script_says() -> None:
    agent = s.ScriptedAgent(s.RS(), RuntimeError("kaput"), s.RF())
    with pytest.raises(RuntimeError, match="kaput"):
        await _drain(agent)
    with pytest.raises(RuntimeError, match="kaput"):
        await _drain(agent, run_id="r2")
    assert agent.runs == 2
    assert [[m.id for m in h] for h in agent.histories] == [["u1"], ["u1"]]
    assert [i.run_id for i in agent.inputs] == ["r1", "r2"]


async def test_block_waits_until_the_run_is_cancelled() -> None:
    agent = s.ScriptedAgent(s.RS(), s.BLOCK, s.RF())
    seen: list[object] = []

    async def consume() -> None:
        async for event in agent.run(s.run_input()):
            seen.append(event)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    assert not task.done()
    assert len(seen) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_step_that_is_no_event_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="'oops'"):
        await _drain(s.ScriptedAgent("oops"))


def test_run_input_defaults_to_the_spec_input() -> None:
    default = s.run_input()
    assert (default.thread_id, default.run_id, default.protocol_version) == ("t1", "r1", "1.0.0")
    assert [(m.id, m.content) for m in default.messages] == [("u1", "Hello")]
    posted = s.run_input(UserMessage(id="u9", content="x"), thread_id="t9", protocol_version=None)
    assert (posted.thread_id, posted.protocol_version, posted.messages[0].id) == ("t9", None, "u9")


def test_builders_fill_the_fields_the_spec_shorthand_names() -> None:
    assert s.RF(pending=["tc9"]).outcome.pending_tool_call_ids == ["tc9"]  # type: ignore[union-attr]
    assert s.RF().outcome is None
    assert s.RE("boom", code="X").model_dump(include={"message", "code"}) == {
        "message": "boom",
        "code": "X",
    }
    assert s.TCS("tc1", "f", parent="m1").parent_message_id == "m1"
    assert s.TCR("res1", "tc1", "ok").role == "tool"
    assert s.TCCh(None, None, None, "{}").delta == "{}"
    assert s.TMCh(None, "x", role="assistant").role == "assistant"
    assert s.REV("tool-call", "tc1", "v").subtype == "tool-call"
    assert s.RMS("r1").role == "reasoning"
    assert s.ADelta("a1", "progress", []).type == EventType.ACTIVITY_DELTA
    assert {
        type(e).__name__
        for e in (
            s.SS("p"),
            s.SF("p"),
            s.RSt("x"),
            s.REnd("x"),
            s.RMC("r", "d"),
            s.RME("r"),
            s.RMCh(None, None),
            s.Cust("c", 1),
            s.Raw({}),
            s.SSnap({}),
            s.SDelta([]),
            s.ASnap("a", "t", {}),
            s.MSnap([]),
            s.TMS("m"),
            s.TME("m"),
            s.TCA("t", "d"),
            s.TCE("t"),
        )
    } >= {"StepStartedEvent", "MessagesSnapshotEvent", "ActivitySnapshotEvent"}
