"""Scripted AG-UI streams for tests: a tiny event vocabulary and an inner agent that plays it.

The builders are named after the shorthand of the chat-history spec (``RS``, ``TMS``,
``TCA``...), so a scenario reads like the spec's own line::

    agent = ScriptedAgent(RS(), TMS("m1"), TMC("m1", "Hi"), TME("m1"), RF())

``ScriptedAgent`` stamps each event with the current time in milliseconds as it yields it
(unless the event already carries a timestamp), records the history it was given, and can
raise or block where the script says so. Needs ``ag-ui-protocol`` only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Final

from ag_ui.core import (
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    BaseEvent,
    CustomEvent,
    MessagesSnapshotEvent,
    RawEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.core import Interrupt as AGUIInterrupt

from django_pydantic_agent.chat_history import AGUIAgent

__all__ = [
    "BLOCK",
    "RE",
    "REV",
    "RF",
    "RMC",
    "RME",
    "RMS",
    "RS",
    "SF",
    "SS",
    "TCA",
    "TCE",
    "TCR",
    "TCS",
    "TMC",
    "TME",
    "TMS",
    "ADelta",
    "ASnap",
    "Cust",
    "MSnap",
    "REnd",
    "RMCh",
    "RSt",
    "Raw",
    "SDelta",
    "SSnap",
    "ScriptedAgent",
    "TCCh",
    "TMCh",
    "now_ms",
    "run_input",
]

#: A script step meaning "wait here until cancelled" (an inner agent that hangs).
BLOCK: Final = object()

THREAD_ID: Final = "t1"
RUN_ID: Final = "r1"


def now_ms() -> int:
    """The current time in milliseconds since the epoch, as AG-UI timestamps are."""
    return int(time.time() * 1000)


def run_input(
    *messages: Any,
    thread_id: str = THREAD_ID,
    run_id: str = RUN_ID,
    protocol_version: str | None = "1.0.0",
    **fields: Any,
) -> RunAgentInput:
    """A ``RunAgentInput`` for ``thread_id``/``run_id``; default messages: ``u1 "Hello"``."""
    posted = list(messages) or [UserMessage(id="u1", content="Hello")]
    return RunAgentInput(
        thread_id=thread_id,
        run_id=run_id,
        protocol_version=protocol_version,
        messages=posted,
        tools=[],
        context=[],
        state={},
        forwarded_props={},
        **fields,
    )


class ScriptedAgent(AGUIAgent):
    """An inner AG-UI agent that yields ``script`` in order.

    A step is an event (yielded, stamped with :func:`now_ms` when it has no timestamp), an
    exception instance (raised there) or :data:`BLOCK` (wait until cancelled). ``histories``
    records, per run, the ``input.messages`` the agent was given.
    """

    def __init__(self, *script: object, name: str = "scripted") -> None:
        self.name = name
        self.script: Sequence[object] = script
        self.histories: list[list[Any]] = []
        self.inputs: list[RunAgentInput] = []

    @property
    def runs(self) -> int:
        """How many times ``run`` was started."""
        return len(self.histories)

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        """Yield the script (see the class docstring)."""
        self.inputs.append(input)
        self.histories.append(list(input.messages))
        for step in self.script:
            if step is BLOCK:
                await asyncio.Event().wait()
            elif isinstance(step, BaseException):
                raise step
            elif isinstance(step, BaseEvent):
                if not step.timestamp:
                    step.timestamp = now_ms()
                yield step
            else:
                raise TypeError(f"Script step {step!r} is not an event, an exception or BLOCK.")


# -- builders, in the spec's shorthand ------------------------------------------------------


def RS(run_id: str = RUN_ID, thread_id: str = THREAD_ID) -> RunStartedEvent:
    """``RUN_STARTED``."""
    return RunStartedEvent(thread_id=thread_id, run_id=run_id)


def RF(
    run_id: str = RUN_ID,
    thread_id: str = THREAD_ID,
    *,
    pending: list[str] | None = None,
    interrupts: list[AGUIInterrupt] | None = None,
    **fields: Any,
) -> RunFinishedEvent:
    """``RUN_FINISHED``: success (with ``pending`` tool call ids), or ``interrupt``."""
    outcome: Any = None
    if interrupts is not None:
        outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
    elif pending is not None:
        outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=pending)
    return RunFinishedEvent(thread_id=thread_id, run_id=run_id, outcome=outcome, **fields)


def RE(message: str, code: str | None = None) -> RunErrorEvent:
    """``RUN_ERROR``."""
    return RunErrorEvent(message=message, code=code)


def SS(name: str) -> StepStartedEvent:
    """``STEP_STARTED``."""
    return StepStartedEvent(step_name=name)


def SF(name: str) -> StepFinishedEvent:
    """``STEP_FINISHED``."""
    return StepFinishedEvent(step_name=name)


def TMS(message_id: str, role: str = "assistant") -> TextMessageStartEvent:
    """``TEXT_MESSAGE_START``."""
    return TextMessageStartEvent(message_id=message_id, role=role)


def TMC(message_id: str, delta: str) -> TextMessageContentEvent:
    """``TEXT_MESSAGE_CONTENT``."""
    return TextMessageContentEvent(message_id=message_id, delta=delta)


def TME(message_id: str) -> TextMessageEndEvent:
    """``TEXT_MESSAGE_END``."""
    return TextMessageEndEvent(message_id=message_id)


def TMCh(
    message_id: str | None, delta: str | None, role: str | None = None
) -> TextMessageChunkEvent:
    """``TEXT_MESSAGE_CHUNK``."""
    return TextMessageChunkEvent(message_id=message_id, delta=delta, role=role)


def TCS(tool_call_id: str, name: str, parent: str | None = None) -> ToolCallStartEvent:
    """``TOOL_CALL_START``."""
    return ToolCallStartEvent(
        tool_call_id=tool_call_id, tool_call_name=name, parent_message_id=parent
    )


def TCA(tool_call_id: str, delta: str) -> ToolCallArgsEvent:
    """``TOOL_CALL_ARGS``."""
    return ToolCallArgsEvent(tool_call_id=tool_call_id, delta=delta)


def TCE(tool_call_id: str) -> ToolCallEndEvent:
    """``TOOL_CALL_END``."""
    return ToolCallEndEvent(tool_call_id=tool_call_id)


def TCR(message_id: str, tool_call_id: str, content: Any) -> ToolCallResultEvent:
    """``TOOL_CALL_RESULT`` (``content`` may be a string or a list of content parts)."""
    return ToolCallResultEvent(
        message_id=message_id, tool_call_id=tool_call_id, content=content, role="tool"
    )


def TCCh(
    tool_call_id: str | None,
    name: str | None,
    parent: str | None,
    delta: str | None,
) -> ToolCallChunkEvent:
    """``TOOL_CALL_CHUNK``."""
    return ToolCallChunkEvent(
        tool_call_id=tool_call_id, tool_call_name=name, parent_message_id=parent, delta=delta
    )


def RSt(message_id: str) -> ReasoningStartEvent:
    """``REASONING_START``."""
    return ReasoningStartEvent(message_id=message_id)


def RMS(message_id: str) -> ReasoningMessageStartEvent:
    """``REASONING_MESSAGE_START``."""
    return ReasoningMessageStartEvent(message_id=message_id, role="reasoning")


def RMC(message_id: str, delta: str) -> ReasoningMessageContentEvent:
    """``REASONING_MESSAGE_CONTENT``."""
    return ReasoningMessageContentEvent(message_id=message_id, delta=delta)


def RME(message_id: str) -> ReasoningMessageEndEvent:
    """``REASONING_MESSAGE_END``."""
    return ReasoningMessageEndEvent(message_id=message_id)


def RMCh(message_id: str | None, delta: str | None) -> ReasoningMessageChunkEvent:
    """``REASONING_MESSAGE_CHUNK``."""
    return ReasoningMessageChunkEvent(message_id=message_id, delta=delta)


def REnd(message_id: str) -> ReasoningEndEvent:
    """``REASONING_END``."""
    return ReasoningEndEvent(message_id=message_id)


def REV(subtype: str, entity_id: str, value: str) -> ReasoningEncryptedValueEvent:
    """``REASONING_ENCRYPTED_VALUE`` (subtype ``message`` or ``tool-call``)."""
    return ReasoningEncryptedValueEvent(
        subtype=subtype,
        entity_id=entity_id,
        encrypted_value=value,
    )


def Cust(name: str, value: Any) -> CustomEvent:
    """``CUSTOM``."""
    return CustomEvent(name=name, value=value)


def Raw(event: Any) -> RawEvent:
    """``RAW``."""
    return RawEvent(event=event)


def SSnap(snapshot: Any) -> StateSnapshotEvent:
    """``STATE_SNAPSHOT``."""
    return StateSnapshotEvent(snapshot=snapshot)


def SDelta(delta: list[Any]) -> StateDeltaEvent:
    """``STATE_DELTA`` (a JSON Patch)."""
    return StateDeltaEvent(delta=delta)


def ASnap(message_id: str, activity_type: str, content: Any) -> ActivitySnapshotEvent:
    """``ACTIVITY_SNAPSHOT``."""
    return ActivitySnapshotEvent(
        message_id=message_id, activity_type=activity_type, content=content
    )


def ADelta(message_id: str, activity_type: str, patch: list[Any]) -> ActivityDeltaEvent:
    """``ACTIVITY_DELTA``."""
    return ActivityDeltaEvent(message_id=message_id, activity_type=activity_type, patch=patch)


def MSnap(messages: list[Any]) -> MessagesSnapshotEvent:
    """``MESSAGES_SNAPSHOT``."""
    return MessagesSnapshotEvent(messages=messages)
