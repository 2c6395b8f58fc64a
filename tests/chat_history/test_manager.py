"""StreamPersistenceManager and RunHandle: server-owned runs, sequenced logs, cancel, reattach.

Scenario names (S21…) refer to ``specs/chat-history.md`` §7; where REF and TARGET differ these
tests pin the TARGET.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import threading
import time
import types as types_module
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar
from uuid import UUID

import pytest
from ag_ui.core import (
    BaseEvent,
    EventType,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    UserMessage,
)
from ag_ui.core.types import Interrupt
from asgiref.sync import ThreadSensitiveContext, sync_to_async

from django_pydantic_agent.chat_history import (
    AGUIStorageAgent,
    Chat,
    InMemoryChatRepository,
    InMemoryMessageRepository,
    Message,
    MessageUpdate,
)
from django_pydantic_agent.chat_history import manager as manager_module
from django_pydantic_agent.chat_history.manager import (
    CANCELLED_MESSAGE,
    RunHandle,
    RunLogTruncatedError,
    RunObserver,
    SequencedEvent,
    StreamPersistenceManager,
)
from django_pydantic_agent.chat_history.storage_agent import (
    CRASH_TEXT,
    INCOMPLETE_STREAM_TEXT,
    AGUIAgent,
)
from tests.chat_history import scripted
from tests.chat_history.conftest import USER

T, R = "t1", "r1"


def make_input(
    run_id: str = R, *, thread_id: str = T, protocol_version: str | None = "1.0"
) -> RunAgentInput:
    return RunAgentInput(
        thread_id=thread_id,
        run_id=run_id,
        protocol_version=protocol_version,
        messages=[UserMessage(id="u1", role="user", content="Hello")],
    )


def rs(run_id: str = R) -> RunStartedEvent:
    return RunStartedEvent(thread_id=T, run_id=run_id)


def rf(run_id: str = R) -> RunFinishedEvent:
    return RunFinishedEvent(thread_id=T, run_id=run_id)


def tms(mid: str = "m1") -> TextMessageStartEvent:
    return TextMessageStartEvent(message_id=mid)


def tmc(delta: str, mid: str = "m1") -> TextMessageContentEvent:
    return TextMessageContentEvent(message_id=mid, delta=delta)


def tme(mid: str = "m1") -> TextMessageEndEvent:
    return TextMessageEndEvent(message_id=mid)


def plain_answer(run_id: str = R) -> list[BaseEvent]:
    return [rs(run_id), tms(), tmc("Hi"), tmc(" there"), tme(), rf(run_id)]


class ScriptedAgent:
    """An inner agent that yields a script, then blocks, raises or returns.

    Its ``finally`` stands in for the storage agent's flush and finalization: it waits for
    ``persist_gate`` (when given) and then records how the run ended in ``finalized``.
    Between script steps it waits for ``step_gate`` (when given), so a test can pace it.
    """

    def __init__(
        self,
        script: Sequence[BaseEvent],
        *,
        block: bool = False,
        raises: BaseException | None = None,
        persist_gate: asyncio.Event | None = None,
        step_gate: asyncio.Queue[None] | None = None,
    ) -> None:
        self.script = list(script)
        self.block = block
        self.raises = raises
        self.persist_gate = persist_gate
        self.step_gate = step_gate
        self.persisting = asyncio.Event()
        self.finalized: str | None = None
        self.yielded = 0

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        outcome = "complete"
        try:
            for event in self.script:
                if self.step_gate is not None:
                    await self.step_gate.get()
                self.yielded += 1
                yield event
            if self.block:
                await asyncio.Event().wait()
            if self.raises is not None:
                raise self.raises
        except asyncio.CancelledError:
            outcome = "interrupted"
            raise
        except Exception:
            outcome = "errored"
            raise
        finally:
            self.persisting.set()
            if self.persist_gate is not None:
                await self.persist_gate.wait()
            self.finalized = outcome


def manager_for(agent: ScriptedAgent, **options: Any) -> StreamPersistenceManager[[]]:
    return StreamPersistenceManager(lambda: agent, **options)


async def collect(handle: RunHandle, *, after: int = 0) -> list[BaseEvent]:
    return [event async for event in handle.events(after=after)]


def types(events: Sequence[BaseEvent]) -> list[EventType]:
    return [event.type for event in events]


async def settle(turns: int = 20) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


# -- forwarding, sequence numbers, readers ------------------------------------------------


async def test_events_are_forwarded_verbatim_with_sequence_numbers_from_one() -> None:
    script = plain_answer()
    agent = ScriptedAgent(script)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        entries = [entry async for entry in handle.sequenced_events()]
        await handle.wait()
    assert entries == [SequencedEvent(seq, event) for seq, event in enumerate(script, start=1)]
    assert all(got.event is sent for got, sent in zip(entries, script, strict=True))
    assert (handle.thread_id, handle.run_id, handle.last_seq) == (T, R, 6)
    assert handle.status == "complete"
    assert handle.terminal_event is script[-1]
    assert handle.done()
    assert agent.finalized == "complete"


async def test_the_factory_runs_inside_the_producer_task_with_the_run_arguments() -> None:
    seen: list[Any] = []

    def factory(name: str, *, user: int) -> ScriptedAgent:
        seen.append((name, user, asyncio.current_task()))
        return ScriptedAgent(plain_answer())

    async with StreamPersistenceManager(factory) as manager:
        handle = await manager.run(make_input(), "assistant", user=7)
        assert seen == []  # nothing is built in the caller's task
        await handle.wait()
    assert [(name, user) for name, user, _ in seen] == [("assistant", 7)]
    assert seen[0][2] is not asyncio.current_task()
    assert seen[0][2] is handle._task


REQUEST_SCOPED: contextvars.ContextVar[str] = contextvars.ContextVar("request_scoped")


@pytest.mark.parametrize(("context", "seen"), [(None, "request 1"), (contextvars.Context, None)])
async def test_producers_run_in_a_copy_of_the_callers_context_or_the_one_given(
    context: Any, seen: str | None
) -> None:
    values: list[str | None] = []

    def factory() -> ScriptedAgent:
        values.append(REQUEST_SCOPED.get(None))
        return ScriptedAgent(plain_answer())

    token = REQUEST_SCOPED.set("request 1")
    try:
        async with StreamPersistenceManager(factory, context=context) as manager:
            await (await manager.run(make_input())).wait()
    finally:
        REQUEST_SCOPED.reset(token)
    assert values == [seen]


def current_thread_name() -> str:
    return threading.current_thread().name


class ThreadRecordingAgent:
    """Records the thread its two thread-sensitive calls ran on, one after the request."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.request_over = asyncio.Event()

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        self.threads.append(await sync_to_async(current_thread_name)())
        yield rs()
        await self.request_over.wait()
        self.threads.append(await sync_to_async(current_thread_name)())
        yield rf()


@pytest.mark.parametrize(("context", "same_thread"), [(None, False), (contextvars.Context, True)])
async def test_with_a_fresh_context_a_run_keeps_its_db_thread_after_the_request_ended(
    context: Any, same_thread: bool
) -> None:
    agent = ThreadRecordingAgent()
    async with StreamPersistenceManager(lambda: agent, context=context) as manager:
        async with ThreadSensitiveContext():  # what Django's ASGI handler wraps a request in
            handle = await manager.run(make_input())
            await settle()
        agent.request_over.set()
        await handle.wait()
    assert len(agent.threads) == 2
    # The inherited context moves the run to a new thread (a new DB connection) mid-run.
    assert (agent.threads[0] == agent.threads[1]) is same_thread


async def test_the_manager_holds_the_producer_when_nobody_else_does() -> None:
    agent = ScriptedAgent(plain_answer(), persist_gate=asyncio.Event())
    manager = manager_for(agent)
    await manager.run(make_input())
    await agent.persisting.wait()
    gc.collect()
    assert agent.persist_gate is not None
    agent.persist_gate.set()
    handle = manager.get(T, R)
    assert handle is not None
    await handle.wait()
    assert agent.finalized == "complete"
    await manager.aclose()


async def test_several_readers_each_receive_every_event() -> None:
    gate: asyncio.Queue[None] = asyncio.Queue()
    script = plain_answer()
    agent = ScriptedAgent(script, step_gate=gate)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        readers = [asyncio.create_task(collect(handle)) for _ in range(3)]
        for _ in script:
            gate.put_nowait(None)
            await settle()
        results = await asyncio.gather(*readers)
    assert all(result == script for result in results)


async def test_a_reader_after_n_gets_exactly_the_later_events_then_the_live_tail() -> None:
    gate: asyncio.Queue[None] = asyncio.Queue()
    script = plain_answer()
    agent = ScriptedAgent(script, step_gate=gate)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        for _ in range(3):
            gate.put_nowait(None)
        await settle()
        assert handle.last_seq == 3
        late = asyncio.create_task(collect_sequenced(handle, after=2))
        await settle()
        for _ in range(3):
            gate.put_nowait(None)
        entries = await late
    assert [entry.seq for entry in entries] == [3, 4, 5, 6]
    assert [entry.event for entry in entries] == script[2:]


async def collect_sequenced(handle: RunHandle, *, after: int = 0) -> list[SequencedEvent]:
    return [entry async for entry in handle.sequenced_events(after=after)]


async def test_reading_a_finished_run_replays_from_after_and_stops_at_the_terminal() -> None:
    script = plain_answer()
    async with manager_for(ScriptedAgent(script)) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        assert await collect(handle) == script
        assert await collect(handle, after=4) == script[4:]
        assert await collect(handle, after=6) == []


@pytest.mark.parametrize("after", [-1, 7])
async def test_after_outside_the_log_is_a_value_error(after: int) -> None:
    async with manager_for(ScriptedAgent(plain_answer())) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        with pytest.raises(ValueError, match=rf"after={after} is outside run 'r1'"):
            await collect(handle, after=after)


async def test_an_idle_reader_gets_a_mark_per_silent_interval_and_then_the_events() -> None:
    gate: asyncio.Queue[None] = asyncio.Queue()
    agent = ScriptedAgent([rs(), tms(), rf()], step_gate=gate)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        with pytest.raises(ValueError, match="idle=0 must be positive"):
            await anext(handle.sequenced_events(idle=0))
        reader = handle.sequenced_events(idle=0.02)
        assert await anext(reader) is None  # 20 ms without an event
        assert await anext(reader) is None
        assert handle._waiters == []  # a timed-out wait leaves nothing behind
        gate.put_nowait(None)
        entry = await anext(reader)
        assert entry is not None
        assert (entry.seq, entry.event.type) == (1, EventType.RUN_STARTED)
        waiting = asyncio.ensure_future(anext(reader))
        await settle()
        waiting.cancel()  # a reader cancelled mid-wait (its client left)
        await asyncio.wait({waiting})
        assert handle._waiters == []
        await reader.aclose()
        gate.put_nowait(None)
        gate.put_nowait(None)
        await handle.wait()
    assert handle.status == "complete"


class FakeClockLoop:
    """Enough of a loop for ``_IdleClock``: a settable time and the timers it armed."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Any]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any) -> Any:
        entry = (when, callback)
        self.timers.append(entry)
        loop = self

        class Handle:
            def cancel(self) -> None:
                if entry in loop.timers:
                    loop.timers.remove(entry)

        return Handle()

    def advance(self, to: float) -> None:
        self.now = to
        for entry in sorted(self.timers, key=lambda t: t[0]):
            if entry[0] <= to and entry in self.timers:
                self.timers.remove(entry)
                entry[1]()


async def test_the_idle_clock_counts_silence_from_the_last_event_with_one_timer() -> None:
    loop = asyncio.get_running_loop()
    fake = FakeClockLoop()
    clock = manager_module._IdleClock(fake, 0.15)  # type: ignore[arg-type]
    first = loop.create_future()
    clock.wait_on(first)
    assert [when for when, _ in fake.timers] == [0.15]
    fake.advance(0.1)
    first.set_result(False)  # an event came: silence now counts from the next wait
    second = loop.create_future()
    clock.wait_on(second)
    assert len(fake.timers) == 1  # a busy stream adds no timer per event
    fake.advance(0.15)
    assert not second.done()  # only 50 ms of silence: no mark, the timer moves on
    assert [when for when, _ in fake.timers] == [pytest.approx(0.25)]
    fake.advance(0.25)
    assert second.result() is True
    third = loop.create_future()
    clock.wait_on(third)  # after a mark, the next one is an interval later
    fake.advance(0.39)
    assert not third.done()
    fake.advance(0.4)
    assert third.result() is True
    clock.stop()
    assert fake.timers == []


async def test_a_reader_waiting_on_a_silent_run_never_wakes_up() -> None:
    gate: asyncio.Queue[None] = asyncio.Queue()
    agent = ScriptedAgent([rs(), tms(), rf()], step_gate=gate)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        reader = asyncio.create_task(collect(handle))
        await settle(200)
        await asyncio.sleep(0.05)
        assert handle._wakeups == 0  # a poller would have woken up on every loop turn
        for expected in (1, 2, 3):
            gate.put_nowait(None)
            await settle()
            assert handle._wakeups == expected  # exactly one wake-up per event
        assert types(await reader) == [
            EventType.RUN_STARTED,
            EventType.TEXT_MESSAGE_START,
            EventType.RUN_FINISHED,
        ]


# -- disconnects ----------------------------------------------------------------------------


async def test_s26_a_reader_that_stops_early_leaves_the_run_to_complete() -> None:
    agent = ScriptedAgent(plain_answer())
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        events = handle.events()
        first = await anext(events)
        await events.aclose()
        await handle.wait()
    assert first.type == EventType.RUN_STARTED
    assert agent.yielded == 6
    assert agent.finalized == "complete"
    assert handle.status == "complete"


async def test_cancelling_the_reading_task_does_not_touch_the_producer() -> None:
    gate: asyncio.Queue[None] = asyncio.Queue()
    agent = ScriptedAgent(plain_answer(), step_gate=gate)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        gate.put_nowait(None)
        reader = asyncio.create_task(collect(handle))
        await settle()
        reader.cancel()  # what Django's ASGI handler does on a disconnect
        with pytest.raises(asyncio.CancelledError):
            await reader
        for _ in range(5):
            gate.put_nowait(None)
        await handle.wait()
    assert agent.finalized == "complete"
    assert handle.last_seq == 6


# -- terminal event, then persistence in the background ------------------------------------


async def test_the_stream_closes_at_the_terminal_event_while_persistence_goes_on() -> None:
    persisted = asyncio.Event()
    agent = ScriptedAgent(plain_answer(), persist_gate=persisted)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        events = await collect(handle)  # returns although persistence is blocked
        assert events[-1].type == EventType.RUN_FINISHED
        await agent.persisting.wait()
        assert handle.finalizing
        assert not handle.done()
        assert agent.finalized is None
        waiter = asyncio.create_task(handle.wait())
        await settle()
        assert not waiter.done()  # wait() covers persistence
        persisted.set()
        await waiter
    assert agent.finalized == "complete"
    assert not handle.finalizing


# -- crashes ----------------------------------------------------------------------------


async def test_s21_a_raw_crash_becomes_a_sanitised_internal_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = ScriptedAgent([rs(), tms(), tmc("par")], raises=RuntimeError("kaput: db password"))
    caplog.set_level(logging.ERROR, logger="django_pydantic_agent.chat_history.manager")
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        events = await collect(handle)
        await handle.wait()  # does not raise
    assert types(events) == [
        EventType.RUN_STARTED,
        EventType.TEXT_MESSAGE_START,
        EventType.TEXT_MESSAGE_CONTENT,
        EventType.RUN_ERROR,
    ]
    error = events[-1]
    assert isinstance(error, RunErrorEvent)
    assert (error.code, error.message) == ("INTERNAL_ERROR", CRASH_TEXT)
    assert "kaput" not in error.model_dump_json()
    assert handle.status == "errored"
    assert agent.finalized == "errored"
    logged = [record for record in caplog.records if record.exc_info]
    assert len(logged) == 1  # the detail is logged once, with its traceback
    assert "kaput: db password" in caplog.text
    assert "Traceback" in caplog.text


async def test_a_failing_factory_still_gives_run_started_then_run_error() -> None:
    def factory() -> ScriptedAgent:
        raise LookupError("repository down")

    async with StreamPersistenceManager(factory) as manager:
        handle = await manager.run(make_input())
        events = await collect(handle)
    assert types(events) == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    started = events[0]
    assert isinstance(started, RunStartedEvent)
    assert (started.thread_id, started.run_id) == (T, R)
    assert isinstance(events[1], RunErrorEvent)
    assert events[1].message == CRASH_TEXT
    assert all(event.timestamp for event in events)


async def test_s22_a_crash_after_the_terminal_event_synthesises_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script = [rs(), tms(), tme(), rf()]
    agent = ScriptedAgent(script, raises=RuntimeError("late"))
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        events = await collect(handle)
        await handle.wait()
    assert events == script
    assert handle.status == "complete"
    assert "failed after its terminal event" in caplog.text


async def test_a_stream_that_ends_without_a_terminal_event_gets_a_run_error() -> None:
    async with manager_for(ScriptedAgent([rs(), tms(), tmc("x")])) as manager:
        handle = await manager.run(make_input())
        events = await collect(handle)
    assert isinstance(events[-1], RunErrorEvent)
    assert events[-1].message == INCOMPLETE_STREAM_TEXT
    assert events[-1].code == "INTERNAL_ERROR"
    assert handle.status == "errored"


async def test_events_after_the_terminal_event_reach_persistence_but_not_readers() -> None:
    script = [rs(), rf(), tms()]
    agent = ScriptedAgent(script)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
    assert await collect(handle) == script[:2]
    assert agent.yielded == 3


async def test_an_in_band_run_error_is_a_normal_terminal_event() -> None:
    script = [rs(), RunErrorEvent(message="quota", code="RATE_LIMITED")]
    async with manager_for(ScriptedAgent(script)) as manager:
        handle = await manager.run(make_input())
        assert await collect(handle) == script
    assert handle.status == "errored"


async def test_a_cancelled_outcome_from_the_agent_is_reported_as_interrupted() -> None:
    cancelled = RunFinishedEvent(thread_id=T, run_id=R, outcome=RunFinishedCancelledOutcome())
    async with manager_for(ScriptedAgent([rs(), cancelled])) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
    assert handle.status == "interrupted"


async def test_an_interrupt_outcome_is_reported_as_interrupt() -> None:
    outcome = RunFinishedInterruptOutcome(interrupts=[Interrupt(id="i1", reason="tool_call")])
    script = [rs(), RunFinishedEvent(thread_id=T, run_id=R, outcome=outcome)]
    async with manager_for(ScriptedAgent(script)) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
    assert handle.status == "interrupt"


# -- cancel -----------------------------------------------------------------------------


async def test_s24_cancel_mid_stream_ends_the_stream_with_run_finished_cancelled() -> None:
    agent = ScriptedAgent([rs(), tms(), tmc("partial")], block=True)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        reader = handle.events()
        events = [await anext(reader) for _ in range(3)]
        assert handle.cancel() is True
        events += [event async for event in reader]
        await handle.wait()
        assert handle.cancel() is False
        assert manager.cancel(T, R) is False
    assert types(events)[:3] == [
        EventType.RUN_STARTED,
        EventType.TEXT_MESSAGE_START,
        EventType.TEXT_MESSAGE_CONTENT,
    ]
    terminal = events[-1]
    assert len(events) == 4
    assert isinstance(terminal, RunFinishedEvent)
    assert isinstance(terminal.outcome, RunFinishedCancelledOutcome)
    assert (terminal.thread_id, terminal.run_id) == (T, R)
    assert terminal.model_dump(by_alias=True, exclude_none=True)["outcome"] == {"type": "cancelled"}
    assert agent.finalized == "interrupted"
    assert handle.status == "interrupted"


async def test_cancel_sends_run_error_cancelled_to_a_client_without_protocol_version() -> None:
    agent = ScriptedAgent([rs()], block=True)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input(protocol_version=None))
        await settle()
        assert manager.cancel(T, R) is True
        events = await collect(handle)
    terminal = events[-1]
    assert isinstance(terminal, RunErrorEvent)
    assert (terminal.code, terminal.message) == ("CANCELLED", CANCELLED_MESSAGE)
    assert handle.status == "interrupted"


@pytest.mark.parametrize(
    ("option", "version", "expected"),
    [
        ("run_error", "1.0", EventType.RUN_ERROR),
        ("run_finished", None, EventType.RUN_FINISHED),
        ("auto", "0.1", EventType.RUN_ERROR),
        ("auto", "2.3", EventType.RUN_FINISHED),
    ],
)
async def test_the_cancel_event_follows_the_option_and_the_protocol_version(
    option: Any, version: str | None, expected: EventType
) -> None:
    agent = ScriptedAgent([rs()], block=True)
    async with manager_for(agent, cancel_event=option) as manager:
        handle = await manager.run(make_input(protocol_version=version))
        await settle()
        handle.cancel()
        events = await collect(handle)
    assert types(events) == [EventType.RUN_STARTED, expected]


async def test_cancel_before_the_producer_started_still_opens_and_closes_the_stream() -> None:
    built: list[ScriptedAgent] = []

    def factory() -> ScriptedAgent:
        built.append(ScriptedAgent(plain_answer()))
        return built[-1]

    observer = RecordingObserver()
    async with StreamPersistenceManager(factory, observer=observer) as manager:
        handle = await manager.run(make_input())
        assert handle.cancel() is True
        assert handle.cancel() is False
        await handle.wait()
        events = await collect(handle)
    assert types(events) == [EventType.RUN_STARTED, EventType.RUN_FINISHED]
    assert built == []
    assert handle.status == "interrupted"
    assert observer.done == [handle]  # the run's end is reported like any other


async def test_a_producer_cancelled_from_outside_before_its_start_still_closes_its_log() -> None:
    async with manager_for(ScriptedAgent(plain_answer())) as manager:
        handle = await manager.run(make_input())
        handle._task.cancel()  # e.g. the event loop shutting down
        await handle.wait()
        assert types(await collect(handle)) == [EventType.RUN_STARTED, EventType.RUN_FINISHED]
        assert manager.get(T, R) is handle


async def test_s25_a_second_cancel_cannot_abort_finalization() -> None:
    persisted = asyncio.Event()
    agent = ScriptedAgent([rs(), tms(), tmc("partial")], block=True, persist_gate=persisted)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        await settle()
        assert handle.cancel() is True
        await agent.persisting.wait()  # the agent is finalizing now
        assert handle.finalizing
        assert handle.cancel() is False
        assert manager.cancel(T, R) is False
        await settle()
        persisted.set()
        await handle.wait()
    assert agent.finalized == "interrupted"
    assert types(await collect(handle)).count(EventType.RUN_FINISHED) == 1


async def test_cancel_after_the_terminal_event_returns_false_and_persistence_finishes() -> None:
    persisted = asyncio.Event()
    agent = ScriptedAgent(plain_answer(), persist_gate=persisted)
    async with manager_for(agent) as manager:
        handle = await manager.run(make_input())
        await collect(handle)
        assert handle.cancel() is False
        assert manager.cancel(T, R) is False
        persisted.set()
        await handle.wait()
    assert agent.finalized == "complete"
    assert handle.status == "complete"


async def test_cancel_of_an_unknown_run_returns_false() -> None:
    async with manager_for(ScriptedAgent(plain_answer())) as manager:
        assert manager.cancel(T, "nope") is False
        assert manager.get(T, "nope") is None


# -- the registry -----------------------------------------------------------------------


async def test_s40_reusing_a_live_key_attaches_to_the_running_run() -> None:
    built: list[ScriptedAgent] = []

    def factory() -> ScriptedAgent:
        built.append(ScriptedAgent([rs()], block=True))
        return built[-1]

    async with StreamPersistenceManager(factory) as manager:
        first = await manager.run(make_input())
        await settle()
        second = await manager.run(make_input())
        other = await manager.run(make_input("r2"))
        await settle()
        assert second is first
        assert len(built) == 2  # r1 once, r2 once
        assert manager.cancel(T, R) is True
        await first.wait()
        assert other.status == "running"  # a run of the same thread is untouched
        assert manager.runs(T) == [first, other]
        assert manager.runs("elsewhere") == []
        assert other.cancel() is True
    assert [agent.finalized for agent in built] == ["interrupted", "interrupted"]


async def test_the_same_ids_under_another_owner_start_a_separate_run() -> None:
    built: list[ScriptedAgent] = []

    def factory() -> ScriptedAgent:
        built.append(ScriptedAgent([rs()], block=True))
        return built[-1]

    async with StreamPersistenceManager(factory) as manager:
        alice = await manager.run_as("alice", make_input())
        mallory = await manager.run_as("mallory", make_input())  # same thread and run ids
        await settle()
        assert mallory is not alice
        assert len(built) == 2
        assert manager.get(T, R) is None  # unowned lookups see neither
        assert manager.cancel(T, R) is False
        assert manager.cancel(T, R, owner="mallory") is True
        assert alice.status == "running"
        assert manager.get(T, R, owner="alice") is alice
        assert manager.runs(T, owner="alice") == [alice]
        assert alice.owner == "alice"


async def test_a_recently_finished_key_returns_the_finished_run() -> None:
    built: list[ScriptedAgent] = []

    def factory() -> ScriptedAgent:
        built.append(ScriptedAgent(plain_answer()))
        return built[-1]

    async with StreamPersistenceManager(factory) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        again = await manager.run(make_input())
        assert again is handle
        assert len(built) == 1
        assert await collect(again) == built[0].script


async def test_a_key_past_retention_starts_a_new_run_the_old_handle_cannot_disturb() -> None:
    built: list[ScriptedAgent] = []

    def factory() -> ScriptedAgent:
        built.append(ScriptedAgent([rs()], block=True))
        return built[-1]

    async with StreamPersistenceManager(factory, max_finished_runs=0) as manager:
        old = await manager.run(make_input())
        await settle()
        old.cancel()
        await old.wait()
        assert manager.get(T, R) is None
        new = await manager.run(make_input())
        await settle()
        assert new is not old
        assert old.cancel() is False
        await old.wait()
        assert manager.get(T, R) is new
        assert manager.cancel(T, R) is True
        await new.wait()
    assert [agent.finalized for agent in built] == ["interrupted", "interrupted"]


async def test_finished_runs_are_forgotten_after_the_retention_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The manager's own clock, so a loaded machine cannot stretch the window (the event loop
    # keeps the real one).
    now = [1000.0]
    clock = types_module.SimpleNamespace(monotonic=lambda: now[0], time=time.time)
    monkeypatch.setattr(manager_module, "time", clock)
    async with manager_for(ScriptedAgent(plain_answer()), finished_run_retention=0.5) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        now[0] += 0.49
        assert manager.get(T, R) is handle
        now[0] += 0.02
        assert manager.get(T, R) is None


async def test_finished_runs_are_capped_in_number_oldest_first() -> None:
    async with StreamPersistenceManager(
        lambda run_id: ScriptedAgent(plain_answer(run_id)), max_finished_runs=2
    ) as manager:
        for run_id in ("a", "b", "c"):
            await (await manager.run(make_input(run_id), run_id)).wait()
        assert [handle.run_id for handle in manager.runs()] == ["b", "c"]


# -- the bounded log ----------------------------------------------------------------------


async def test_the_log_keeps_only_the_newest_events() -> None:
    script = plain_answer()
    async with manager_for(ScriptedAgent(script), max_log_events=3) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
    assert (handle.first_seq, handle.last_seq) == (4, 6)
    assert await collect(handle, after=3) == script[3:]
    with pytest.raises(RunLogTruncatedError, match="keeps the last 3 events") as caught:
        await collect(handle, after=1)
    assert (caught.value.wanted_seq, caught.value.first_seq) == (2, 4)
    # What is logged so far, without waiting: the same rules.
    assert handle.logged_since(3) == [(seq, script[seq - 1]) for seq in (4, 5, 6)]
    assert handle.logged_since(5) == [(6, script[5])]
    assert handle.logged_since(6) == []
    with pytest.raises(RunLogTruncatedError, match="keeps the last 3 events"):
        handle.logged_since(2)
    with pytest.raises(ValueError, match="after=7 is outside"):
        handle.logged_since(7)


# -- a long run's log ----------------------------------------------------------------------


class LongAnswer:
    """An inner agent streaming ``deltas`` text deltas, each built as it is yielded (the
    test keeps none of them, as pydantic-ai's adapter keeps none)."""

    def __init__(self, deltas: int) -> None:
        self.deltas = deltas

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        yield rs()
        yield tms()
        for i in range(self.deltas):
            yield TextMessageContentEvent(message_id="m1", delta=f"w{i} ", timestamp=1_000 + i)
        yield tme()
        yield rf()


def odd_deltas() -> list[BaseEvent]:
    """Deltas a compact log must keep exactly: each sets something besides id, text and
    timestamp, or sets its timestamp to None on purpose."""
    return [
        TextMessageContentEvent(message_id="m1", delta="extra", mood="calm"),  # type: ignore[call-arg]
        TextMessageContentEvent(message_id="m1", delta="raw", raw_event={"chunk": 1}),
        TextMessageContentEvent(message_id="m1", delta="unstamped", timestamp=None),
        TextMessageContentEvent(message_id="m1", delta="plain"),
        TextMessageContentEvent(message_id="m1", delta="meta", metadata={"k": "v"}),
    ]


def delta_models() -> int:
    return sum(isinstance(o, TextMessageContentEvent) for o in gc.get_objects())


async def test_a_long_run_holds_about_a_hundred_delta_models_not_one_per_delta() -> None:
    before = delta_models()
    async with StreamPersistenceManager(lambda: LongAnswer(3000)) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
        assert handle.last_seq == 3004
        held = delta_models() - before
        # The log holds the deltas it no longer keeps as models as tuples of atoms, which the
        # collector stops tracking: a long answer no longer fills its oldest generation.
        assert held <= 150  # of 3,000
        replayed = await collect(handle)
    assert len(replayed) == 3004
    text = "".join(e.delta for e in replayed if isinstance(e, TextMessageContentEvent))
    assert text == "".join(f"w{i} " for i in range(3000))
    assert [e.timestamp for e in replayed[2:-2]] == [1_000 + i for i in range(3000)]


async def test_a_compacted_log_gives_back_every_event_as_it_was_yielded() -> None:
    filler = [tmc(f"f{i}") for i in range(600)]
    stamped = [
        TextMessageContentEvent(message_id="m1", delta=f"s{i}", timestamp=7 + i) for i in range(5)
    ]
    script = [rs(), tms(), *odd_deltas(), *stamped, *filler, tme(), rf()]
    async with manager_for(ScriptedAgent(script)) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
    replayed = await collect(handle)
    assert replayed == script
    for got, sent in zip(replayed, script, strict=True):
        assert type(got) is type(sent)
        assert got.model_dump(exclude_unset=True) == sent.model_dump(exclude_unset=True)
        assert got.__pydantic_extra__ == sent.__pydantic_extra__
    assert handle.logged_since(2)[:10] == list(enumerate(script[2:12], 3))
    # What a relay serialises rebuilds the same wire form.
    for seq, kind, values in handle.logged_values_since(0):
        rebuilt = kind.model_construct(**values)
        sent = script[seq - 1]
        assert rebuilt.model_dump_json(by_alias=True, exclude_none=True) == sent.model_dump_json(
            by_alias=True, exclude_none=True
        )


async def test_a_reader_that_falls_behind_the_bounded_log_is_told() -> None:
    gate: asyncio.Queue[None] = asyncio.Queue()
    agent = ScriptedAgent(plain_answer(), step_gate=gate)
    async with manager_for(agent, max_log_events=2) as manager:
        handle = await manager.run(make_input())
        gate.put_nowait(None)
        await settle()
        reader = handle.events()
        assert (await anext(reader)).type == EventType.RUN_STARTED
        for _ in range(5):
            gate.put_nowait(None)
        await handle.wait()
        with pytest.raises(RunLogTruncatedError):
            await anext(reader)
        await reader.aclose()


# -- shutdown -----------------------------------------------------------------------------


async def test_aclose_cancels_live_runs_and_lets_finishing_ones_persist() -> None:
    blocked = ScriptedAgent([rs()], block=True)
    persisted = asyncio.Event()
    finishing = ScriptedAgent(plain_answer("r2"), persist_gate=persisted)
    agents = {R: blocked, "r2": finishing}
    manager = StreamPersistenceManager(lambda run_id: agents[run_id])
    live = await manager.run(make_input(), R)
    done = await manager.run(make_input("r2"), "r2")
    await finishing.persisting.wait()
    closing = asyncio.create_task(manager.aclose())
    await settle()
    assert not closing.done()  # waits for the run that is still persisting
    persisted.set()
    await closing
    assert blocked.finalized == "interrupted"
    assert finishing.finalized == "complete"
    assert live.done()
    assert done.done()
    assert live.status == "interrupted"
    with pytest.raises(RuntimeError, match="closed"):
        await manager.run(make_input("r3"), "r3")


async def test_aclose_cuts_finalization_short_after_the_grace_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = ScriptedAgent([rs()], block=True, persist_gate=asyncio.Event())
    manager = manager_for(agent)
    handle = await manager.run(make_input())
    await settle()
    await manager.aclose(grace=0.01)
    assert handle.done()
    assert agent.finalized is None  # its finalization was cut short, and that was logged
    assert "still finalizing after 0.01 s at shutdown" in caplog.text


async def test_aclose_without_runs_returns_at_once() -> None:
    manager = manager_for(ScriptedAgent(plain_answer()))
    await manager.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await manager.run(make_input())


# -- observer hooks -----------------------------------------------------------------------


class RecordingObserver(RunObserver):
    def __init__(self, *, cancel_after: int | None = None) -> None:
        self.events: list[tuple[int, EventType]] = []
        self.heartbeats = 0
        self.done: list[RunHandle] = []
        self.cancel_after = cancel_after

    async def on_event(self, handle: RunHandle, seq: int, event: BaseEvent) -> None:
        self.events.append((seq, event.type))

    async def cancel_requested(self, handle: RunHandle) -> bool:
        return self.cancel_after is not None and handle.last_seq >= self.cancel_after

    async def on_heartbeat(self, handle: RunHandle) -> None:
        self.heartbeats += 1

    async def on_done(self, handle: RunHandle) -> None:
        self.done.append(handle)


async def test_the_observer_sees_every_logged_event_in_order_and_the_end() -> None:
    observer = RecordingObserver()
    async with manager_for(ScriptedAgent(plain_answer()), observer=observer) as manager:
        handle = await manager.run(make_input())
        await handle.wait()
    assert observer.events == [(seq, e.type) for seq, e in enumerate(plain_answer(), start=1)]
    assert observer.done == [handle]


async def test_an_observer_sees_only_the_event_types_it_names_and_polls_at_its_pace() -> None:
    class Sparse(RecordingObserver):
        observed_event_types: ClassVar[frozenset[str] | None] = frozenset({EventType.RUN_FINISHED})
        cancel_poll_seconds = 3600.0

        def __init__(self) -> None:
            super().__init__()
            self.asked = 0

        async def cancel_requested(self, handle: RunHandle) -> bool:
            self.asked += 1
            return False

    class Every(Sparse):
        observed_event_types = None
        cancel_poll_seconds = 0.0

    sparse, every = Sparse(), Every()
    for observer in (sparse, every):
        async with manager_for(ScriptedAgent(plain_answer()), observer=observer) as manager:
            handle = await manager.run(make_input())
            await handle.wait()
    logged = len(plain_answer())
    assert sparse.events == [(logged, EventType.RUN_FINISHED)]
    assert sparse.asked == 0  # an hour between polls: no event asked
    assert [seq for seq, _ in every.events] == list(range(1, logged + 1))
    assert every.asked == logged - 1  # after each event but the terminal one
    assert sparse.done
    assert every.done


async def test_an_observer_can_cancel_a_run_on_an_event() -> None:
    observer = RecordingObserver(cancel_after=2)
    agent = ScriptedAgent([rs(), tms(), tmc("a"), tmc("b")], block=True)
    async with manager_for(agent, observer=observer) as manager:
        handle = await manager.run(make_input())
        events = await collect(handle)
        await handle.wait()
    assert types(events) == [
        EventType.RUN_STARTED,
        EventType.TEXT_MESSAGE_START,
        EventType.RUN_FINISHED,
    ]
    assert agent.yielded == 2
    assert agent.finalized == "interrupted"  # finalization ran in the agent, not abandoned


async def test_an_observer_can_cancel_a_silent_run_on_the_heartbeat() -> None:
    observer = RecordingObserver()
    agent = ScriptedAgent([rs()], block=True)
    async with manager_for(agent, observer=observer, heartbeat_interval=0.005) as manager:
        handle = await manager.run(make_input())
        await settle()
        assert handle.last_seq == 1
        observer.cancel_after = 1  # the cancel intent shows up while the run is silent
        events = await collect(handle)
        await handle.wait()
    assert observer.heartbeats >= 1
    assert types(events) == [EventType.RUN_STARTED, EventType.RUN_FINISHED]
    assert agent.finalized == "interrupted"


async def test_a_cancel_while_an_observer_hook_runs_still_finalizes_in_the_agent() -> None:
    hook_entered = asyncio.Event()

    class Slow(RunObserver):
        async def on_event(self, handle: RunHandle, seq: int, event: BaseEvent) -> None:
            if seq == 2:
                hook_entered.set()
                await asyncio.Event().wait()  # e.g. a cache write that hangs

    agent = ScriptedAgent([rs(), tms(), tmc("never")])
    async with manager_for(agent, observer=Slow()) as manager:
        handle = await manager.run(make_input())
        await hook_entered.wait()
        assert handle.cancel() is True
        await handle.wait()
    assert agent.yielded == 2
    assert agent.finalized == "interrupted"
    assert handle.status == "interrupted"


class AbsorbingAgent:
    """An agent that swallows a cancellation and returns quietly."""

    def __init__(self) -> None:
        self.absorbed = False

    async def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        try:
            yield rs()
            yield tms()
        except asyncio.CancelledError:
            self.absorbed = True


class IteratorAgent:
    """An agent whose stream is a plain async iterator, not a generator."""

    def __init__(self) -> None:
        self.script = [rs(), tms(), tmc("x")]

    def run(self, input: RunAgentInput) -> AsyncIterator[BaseEvent]:
        return self

    def __aiter__(self) -> IteratorAgent:
        return self

    async def __anext__(self) -> BaseEvent:
        if not self.script:
            raise StopAsyncIteration
        return self.script.pop(0)


@pytest.mark.parametrize("make_agent", [AbsorbingAgent, IteratorAgent])
async def test_a_cancel_from_an_observer_works_with_any_kind_of_stream(make_agent: Any) -> None:
    agent = make_agent()
    observer = RecordingObserver(cancel_after=1)
    async with StreamPersistenceManager(lambda: agent, observer=observer) as manager:
        handle = await manager.run(make_input())
        events = await collect(handle)
        await handle.wait()
    assert types(events) == [EventType.RUN_STARTED, EventType.RUN_FINISHED]
    assert getattr(agent, "absorbed", True)
    assert observer.done == [handle]


async def test_a_failing_observer_is_logged_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(RunObserver):
        async def on_event(self, handle: RunHandle, seq: int, event: BaseEvent) -> None:
            raise RuntimeError("observer bug")

    agent = ScriptedAgent(plain_answer())
    async with manager_for(agent, observer=Broken()) as manager:
        handle = await manager.run(make_input())
        assert await collect(handle) == agent.script
        await handle.wait()
    assert agent.finalized == "complete"
    assert "RunObserver.on_event failed for run 'r1'" in caplog.text


async def test_the_default_observer_does_nothing() -> None:
    agent = ScriptedAgent(plain_answer())
    async with manager_for(agent, observer=RunObserver()) as manager:
        handle = await manager.run(make_input())
        assert await collect(handle) == agent.script


# -- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cancel_event": "loud"}, "cancel_event='loud' is not one of"),
        ({"max_log_events": 0}, "max_log_events=0 must be at least 1"),
        ({"finished_run_retention": -1.0}, "must not be negative"),
        ({"max_finished_runs": -1}, "must not be negative"),
        ({"heartbeat_interval": 0}, "heartbeat_interval=0 must be positive"),
    ],
)
def test_bad_options_fail_at_construction(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StreamPersistenceManager(lambda: ScriptedAgent([]), **options)


async def test_a_handle_describes_itself() -> None:
    async with manager_for(ScriptedAgent([rs()], block=True)) as manager:
        handle = await manager.run(make_input())
        assert repr(handle) == "<RunHandle thread_id='t1' run_id='r1' running>"
        assert handle.terminal_event is None
        handle.cancel()


# -- with the real AGUIStorageAgent over the in-memory repositories ---------------------------


class GatedRepository(InMemoryMessageRepository):
    """Message writes wait for ``gate`` once ``armed`` (a store that stalls); ``delay`` slows
    every write down."""

    def __init__(self, chats: InMemoryChatRepository) -> None:
        super().__init__(chats)
        self.armed = False
        self.gate = asyncio.Event()
        self.blocked = asyncio.Event()
        self.delay = 0.0

    async def _stall(self) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.armed:
            self.blocked.set()
            await self.gate.wait()

    async def create_message(self, message_data: Any) -> Message:
        await self._stall()
        return await super().create_message(message_data)

    async def update_message(self, message_uuid: Any, update: MessageUpdate) -> Message | None:
        await self._stall()
        return await super().update_message(message_uuid, update)


class StoredRuns:
    """A storage agent per run over one in-memory store, run through a manager."""

    def __init__(self, **agent_options: Any) -> None:
        self.chats = InMemoryChatRepository()
        self.messages = GatedRepository(self.chats)
        self.agent_options = {"flush_interval": 30.0, **agent_options}
        self.built = 0

    def factory(self, inner: AGUIAgent) -> AGUIStorageAgent:
        self.built += 1
        return AGUIStorageAgent(
            "assistant", USER, self.chats, self.messages, inner, **self.agent_options
        )

    def manager(self, **options: Any) -> StreamPersistenceManager[[AGUIAgent]]:
        return StreamPersistenceManager(self.factory, **options)

    async def history(self) -> list[tuple[Any, ...]]:
        chat = await self.chats.get_chat_by_thread_id(USER, T)
        assert chat is not None
        return scripted.summary(await self.messages.get_chat_messages(chat.chat_uuid))


def blocking(*events: BaseEvent) -> scripted.ScriptedAgent:
    return scripted.ScriptedAgent([*events, lambda: asyncio.Event().wait()])


PARTIAL = [scripted.rs(), scripted.tms("m1"), scripted.tmc("m1", "partial")]


async def test_stored_s1_a_plain_run_ends_complete() -> None:
    runs = StoredRuns()
    script = [scripted.rs(), *scripted.text("m1", "Hi", " there"), scripted.rf()]
    async with runs.manager() as manager:
        handle = await manager.run(scripted.run_input(), scripted.ScriptedAgent(script))
        assert await collect(handle) == script
        await handle.wait()
    assert await runs.history() == [
        ("user", "u1", "Hello", "complete", False),
        ("assistant", "m1", "Hi there", "complete", False),
    ]


async def test_stored_the_stream_closes_while_the_store_still_writes() -> None:
    runs = StoredRuns()
    script = [scripted.rs(), *scripted.text("m1", "Hi"), scripted.rf()]
    async with runs.manager() as manager:
        handle = await manager.run(scripted.run_input(), scripted.ScriptedAgent(script))
        reader = handle.events()
        assert (await anext(reader)).type == EventType.RUN_STARTED  # u1 is stored by now
        runs.messages.armed = True  # from here on, the store stalls every write
        rest = [event async for event in reader]
        assert rest[-1].type == EventType.RUN_FINISHED  # the client's stream is closed...
        await runs.messages.blocked.wait()
        assert handle.finalizing  # ...while the answer is still being written
        assert await runs.history() == [("user", "u1", "Hello", "complete", False)]
        runs.messages.gate.set()
        await handle.wait()
    assert await runs.history() == [
        ("user", "u1", "Hello", "complete", False),
        ("assistant", "m1", "Hi", "complete", False),
    ]


async def test_stored_s21_a_raw_crash_ends_errored_with_a_sanitised_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = StoredRuns()
    inner = scripted.ScriptedAgent([*PARTIAL, RuntimeError("kaput: secret")])
    async with runs.manager() as manager:
        handle = await manager.run(scripted.run_input(), inner)
        events = await collect(handle)
        await handle.wait()
    assert types(events)[-1] == EventType.RUN_ERROR
    assert isinstance(events[-1], RunErrorEvent)
    assert (events[-1].code, events[-1].message) == ("INTERNAL_ERROR", CRASH_TEXT)
    assert "secret" not in "".join(event.model_dump_json() for event in events)
    stored = await runs.history()
    assert stored[1] == ("assistant", "m1", "partial", "errored", False)
    # One ERROR record for the crash, the manager's, with the traceback: the storage agent
    # only re-raises it.
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert record.name == "django_pydantic_agent.chat_history.manager"
    assert record.getMessage() == "Agent run 'r1' on thread 't1' failed."
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "kaput: secret"
    assert "Traceback" in caplog.text


async def test_stored_s22_a_crash_after_the_terminal_event_keeps_the_records() -> None:
    runs = StoredRuns()
    script: list[Any] = [scripted.rs(), *scripted.text("m1", "ok"), scripted.rf()]
    script.append(RuntimeError("late"))
    async with runs.manager() as manager:
        handle = await manager.run(scripted.run_input(), scripted.ScriptedAgent(script))
        events = await collect(handle)
        await handle.wait()
    assert events == script[:-1]
    assert (await runs.history())[1] == ("assistant", "m1", "ok", "complete", False)


async def test_stored_s23_a_store_down_before_the_stream_gives_run_started_and_run_error() -> None:
    class Down(InMemoryChatRepository):
        async def get_chat_by_thread_id(self, user_uuid: UUID, thread_id: str) -> Chat | None:
            raise ConnectionError("store at 10.0.0.5 refused")

    runs = StoredRuns()
    runs.chats = Down()
    async with runs.manager() as manager:
        handle = await manager.run(scripted.run_input(), scripted.ScriptedAgent([]))
        events = await collect(handle)
    assert types(events) == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    assert "10.0.0.5" not in events[1].model_dump_json()


async def test_stored_s24_cancel_ends_interrupted_with_run_finished_cancelled() -> None:
    runs = StoredRuns()
    async with runs.manager() as manager:
        handle = await manager.run(scripted.run_input(protocol_version="1.0"), blocking(*PARTIAL))
        reader = handle.events()
        seen = [await anext(reader) for _ in range(3)]
        assert manager.cancel(T, R) is True
        seen += [event async for event in reader]
        await handle.wait()
        assert handle.cancel() is False
    assert seen[:3] == PARTIAL
    assert isinstance(seen[3], RunFinishedEvent)
    assert isinstance(seen[3].outcome, RunFinishedCancelledOutcome)
    assert len(seen) == 4
    assert (await runs.history())[1] == ("assistant", "m1", "partial", "interrupted", False)


async def test_stored_s25_a_second_cancel_during_finalization_still_ends_interrupted() -> None:
    runs = StoredRuns()
    async with runs.manager() as manager:
        handle = await manager.run(scripted.run_input(), blocking(*PARTIAL))
        reader = handle.events()
        for _ in range(3):
            await anext(reader)
        runs.messages.armed = True
        assert handle.cancel() is True
        await runs.messages.blocked.wait()  # finalization is writing now
        assert handle.cancel() is False
        assert manager.cancel(T, R) is False
        runs.messages.gate.set()
        await handle.wait()
        await reader.aclose()
    assert (await runs.history())[1] == ("assistant", "m1", "partial", "interrupted", False)


async def test_stored_s26_a_disconnected_client_leaves_the_run_to_complete() -> None:
    runs = StoredRuns()
    script = [scripted.rs(), *scripted.text("m1", "Hi", " there"), scripted.rf()]
    async with runs.manager() as manager:
        handle = await manager.run(scripted.run_input(), scripted.ScriptedAgent(script))
        reader = handle.events()
        await anext(reader)
        await reader.aclose()
        await handle.wait()
    assert (await runs.history())[1] == ("assistant", "m1", "Hi there", "complete", False)


async def test_stored_s36_a_backlog_overflow_forwards_everything_and_errors_the_records() -> None:
    runs = StoredRuns(max_queue_size=2, minimal_chunk_to_persist=1)
    script = [scripted.inbound_stored(runs.chats, runs.messages), scripted.rs()]
    script += [scripted.tms("m1"), *(scripted.tmc("m1", "x") for _ in range(30))]
    script.append(scripted.rf())
    async with runs.manager() as manager:
        handle = await manager.run(scripted.run_input(), scripted.ScriptedAgent(script))
        reader = handle.events()
        await anext(reader)
        runs.messages.armed = True  # the store stalls, so the persistence backlog fills up
        rest = [event async for event in reader]
        runs.messages.gate.set()
        await handle.wait()
    assert len(rest) == 32  # the forwarded stream is complete
    assert (await runs.history())[1][3] == "errored"


async def test_stored_s40_a_retried_post_attaches_and_stores_the_user_message_once() -> None:
    runs = StoredRuns()
    async with runs.manager() as manager:
        first = await manager.run(scripted.run_input(), blocking(*PARTIAL))
        await settle()
        second = await manager.run(scripted.run_input(), blocking(*PARTIAL))
        assert second is first
        first.cancel()
        await first.wait()
    assert runs.built == 1
    assert [row[:2] for row in await runs.history()] == [("user", "u1"), ("assistant", "m1")]


async def test_stored_an_observer_cancel_ends_the_records_interrupted() -> None:
    runs = StoredRuns()
    observer = RecordingObserver(cancel_after=3)
    async with runs.manager(observer=observer) as manager:
        agui_1 = scripted.run_input(protocol_version="1.0")
        handle = await manager.run(agui_1, blocking(*PARTIAL))
        events = await collect(handle)
        await handle.wait()
    assert types(events)[-1] == EventType.RUN_FINISHED
    assert (await runs.history())[1] == ("assistant", "m1", "partial", "interrupted", False)


async def test_a_batch_holds_what_was_logged_meanwhile_but_never_the_terminal_event() -> None:
    gate: asyncio.Queue[None] = asyncio.Queue()
    script = plain_answer()
    async with manager_for(ScriptedAgent(script, step_gate=gate)) as manager:
        handle = await manager.run(make_input())
        gate.put_nowait(None)
        await settle()
        reader = handle.sequenced_batches(coalesce=60.0)
        assert [entry.seq for entry in await anext(reader)] == [1]  # the first batch: at once
        following = asyncio.create_task(anext(reader))
        for _ in range(3):  # events 2, 3 and 4, each in a turn of its own
            gate.put_nowait(None)
            await settle()
        assert not following.done()  # held back for a minute, gathering them
        gate.put_nowait(None)
        gate.put_nowait(None)  # event 5, then the terminal event ends the hold
        batch = await asyncio.wait_for(following, timeout=5)
        assert [entry.seq for entry in batch] == [2, 3, 4, 5, 6]
        # The reader held from its first batch on: no event woke it before the hold.
        assert handle._wakeups == 0
        assert [entry.event for entry in batch] == script[1:]
        with pytest.raises(StopAsyncIteration):
            await anext(reader)
        assert handle._holders == []
        assert handle._waiters == []
        # A reader that is behind gets the log in batches of at most max_batch.
        sizes = [[entry.seq for entry in b] async for b in handle.sequenced_batches(max_batch=4)]
        assert sizes == [[1, 2, 3, 4], [5, 6]]
        with pytest.raises(ValueError, match="max_batch=0 must be at least 1"):
            await anext(handle.sequenced_batches(max_batch=0))
        with pytest.raises(ValueError, match="coalesce=-1 must be 0"):
            await anext(handle.sequenced_batches(coalesce=-1))


async def test_a_hand_over_during_a_hold_ends_the_reading_at_once() -> None:
    """A drain hands a run over while a coalescing reader holds for its next batch: the
    reading ends there, so its client reattaches elsewhere now. (It used to go on to wait for
    an event that never came, until its idle mark: a deploy's streams hung for the SSE
    heartbeat, 15 s, before their clients reattached.)"""
    gate: asyncio.Queue[None] = asyncio.Queue()
    async with manager_for(ScriptedAgent(plain_answer(), step_gate=gate)) as manager:
        handle = await manager.run(make_input())
        gate.put_nowait(None)
        await settle()
        reader = handle.sequenced_batches(coalesce=60.0, idle=600.0)
        assert [entry.seq for entry in await anext(reader)] == [1]
        following = asyncio.create_task(anext(reader))
        await settle()
        assert not following.done()  # holding for a minute
        assert handle.hand_over()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(following, timeout=5)
        assert handle._waiters == []
        await handle.wait()


async def test_a_full_batch_ends_a_hold() -> None:
    gate: asyncio.Queue[None] = asyncio.Queue()
    async with manager_for(ScriptedAgent(plain_answer(), step_gate=gate)) as manager:
        handle = await manager.run(make_input())
        gate.put_nowait(None)
        await settle()
        reader = handle.sequenced_batches(coalesce=60.0, max_batch=3)
        assert [entry.seq for entry in await anext(reader)] == [1]
        following = asyncio.create_task(anext(reader))
        for _ in range(2):  # events 2 and 3: the batch is not full yet
            gate.put_nowait(None)
            await settle()
        assert not following.done()
        gate.put_nowait(None)  # event 4 fills it: out at once, though the run goes on
        batch = await asyncio.wait_for(following, timeout=5)
        assert [entry.seq for entry in batch] == [2, 3, 4]
        assert handle.terminal_event is None
        gate.put_nowait(None)
        gate.put_nowait(None)
        rest = await asyncio.wait_for(anext(reader), timeout=5)
        assert [entry.seq for entry in rest] == [5, 6]
        await reader.aclose()
