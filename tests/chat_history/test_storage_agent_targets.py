"""Regression tests for the reference's weak points (spec §8), one per target."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunStartedEvent,
    TextMessageChunkEvent,
    UserMessage,
)
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIAdapter

from django_pydantic_agent.chat_history import (
    AGUIStorageAgent,
    InMemoryChatRepository,
    InMemoryMessageRepository,
    Message,
    MessageUpdate,
    StaleDeltaError,
)
from django_pydantic_agent.chat_history.storage_agent import AGUIAgent
from tests.chat_history.conftest import USER
from tests.chat_history.scripted import (
    ScriptedAgent,
    Store,
    inbound_stored,
    paced,
    rf,
    rs,
    run_input,
    summary,
    text,
    tmc,
    tme,
    tms,
)


class Gated(AGUIAgent):
    """Yields ``before``, waits for ``gate``, then yields ``after``."""

    name = "gated"

    def __init__(self, before: list[BaseEvent], after: list[BaseEvent]) -> None:
        self.before, self.after = before, after
        self.gate = asyncio.Event()
        self.reached = asyncio.Event()

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        for event in self.before:
            yield event
        self.reached.set()
        await self.gate.wait()
        for event in self.after:
            yield event


async def _eventually(check: Any, within: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await check():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def _collect(agent: AGUIStorageAgent, given: RunAgentInput) -> list[BaseEvent]:
    return [e async for e in agent.run(given)]


class FlakyRepository(InMemoryMessageRepository):
    """Fails the next ``failures`` message updates; optionally after applying them."""

    failures = 0
    apply_then_fail = False
    transactional = True

    async def update_message(self, message_uuid: Any, update: MessageUpdate) -> Message | None:
        if self.failures:
            self.failures -= 1
            if self.apply_then_fail:
                await super().update_message(message_uuid, update)
            raise ConnectionError("the answer was lost")
        return await super().update_message(message_uuid, update)

    def transaction(self) -> Any:
        if self.transactional:
            return super().transaction()
        return contextlib.nullcontext()  # a store without transactions (the Memory Service)


@pytest.mark.parametrize("transactional", [True, False])
@pytest.mark.parametrize("apply_then_fail", [True, False])
async def test_s83_1_a_failed_flush_never_duplicates_text(
    transactional: bool, apply_then_fail: bool
) -> None:
    chats = InMemoryChatRepository()
    messages = FlakyRepository(chats)
    messages.transactional = transactional
    messages.apply_then_fail = apply_then_fail

    script: list[Any] = [inbound_stored(chats, messages), rs(), tms("m1"), tmc("m1", "aaaaa")]
    script.append(lambda: setattr(messages, "failures", 1))  # the next update fails
    script += [tmc("m1", "bbbbb"), tmc("m1", "ccccc"), tme("m1"), rf()]
    agent = AGUIStorageAgent(
        "assistant",
        USER,
        chats,
        messages,
        ScriptedAgent(script),
        minimal_chunk_to_persist=5,
    )
    await _collect(agent, run_input())
    chat = await chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    stored = (await messages.get_chat_messages(chat.chat_uuid))[1]
    assert messages.failures == 0  # the failure did happen
    assert (stored.content, stored.status) == ("aaaaabbbbbccccc", "complete")


class _Unavailable(Exception):
    """A backend error with an HTTP status, like the Memory Service client's."""

    def __init__(self, status_code: int | None) -> None:
        super().__init__(f"status {status_code}")
        self.status_code = status_code


@pytest.mark.parametrize(
    ("error", "traceback"),
    [
        (ConnectionError("the answer was lost"), False),
        (TimeoutError("no answer in time"), False),
        (_Unavailable(503), False),
        (_Unavailable(429), False),
        (_Unavailable(None), False),
        (_Unavailable(400), True),
        (StaleDeltaError("the store holds less than the run wrote"), False),
        (RuntimeError("a bug in the repository"), True),
    ],
)
async def test_a_transient_flush_failure_logs_one_line_and_a_bug_its_traceback(
    caplog: pytest.LogCaptureFixture, error: Exception, traceback: bool
) -> None:
    chats = InMemoryChatRepository()
    messages = FlakyRepository(chats)
    original = messages.update_message
    failures = [error]

    async def update(message_uuid: Any, update: MessageUpdate) -> Message | None:
        if failures:
            raise failures.pop()
        return await original(message_uuid, update)

    messages.update_message = update  # type: ignore[method-assign]
    script = paced([rs(), tms("m1"), tmc("m1", "aaaaa"), tmc("m1", "bbbbb"), tme("m1"), rf()])
    agent = AGUIStorageAgent(
        "assistant", USER, chats, messages, ScriptedAgent(script), minimal_chunk_to_persist=5
    )
    with caplog.at_level(logging.WARNING, logger="django_pydantic_agent.chat_history"):
        await _collect(agent, run_input())
    chat = await chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    stored = (await messages.get_chat_messages(chat.chat_uuid))[1]
    assert (stored.content, stored.status) == ("aaaaabbbbb", "complete"), "nothing is lost"
    [record] = [r for r in caplog.records if "kept and retried" in r.getMessage()]
    assert bool(record.exc_info) is traceback
    if not traceback:
        assert type(error).__name__ in record.getMessage(), "the line names the error"


async def test_s83_1_a_failed_create_is_retried_without_a_duplicate_record() -> None:
    chats = InMemoryChatRepository()

    class FailCreate(InMemoryMessageRepository):
        failures = 0

        async def create_message(self, message_data: Any) -> Message:
            created = await super().create_message(message_data)
            if self.failures and message_data.role == "assistant":
                self.failures -= 1
                raise TimeoutError("no answer")  # the write landed, the answer did not
            return created

        def transaction(self) -> Any:
            return contextlib.nullcontext()

    messages = FailCreate(chats)
    messages.failures = 1
    script = [rs(), tms("m1"), tmc("m1", "x" * 10), tmc("m1", "y"), tme("m1"), rf()]
    agent = AGUIStorageAgent(
        "assistant", USER, chats, messages, ScriptedAgent(script), minimal_chunk_to_persist=5
    )
    await _collect(agent, run_input())
    chat = await chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    stored = await messages.get_chat_messages(chat.chat_uuid)
    assert messages.failures == 0
    assert summary(stored)[1:] == [("assistant", "m1", "x" * 10 + "y", "complete", False)]


async def test_s83_2_a_store_that_stays_down_does_not_hang_the_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chats = InMemoryChatRepository()
    messages = InMemoryMessageRepository(chats)
    script = [rs(), tms("m1"), tmc("m1", "x"), tme("m1"), rf()]
    original = messages.create_message

    async def create(data: Any) -> Message:
        if data.role == "assistant":
            raise ConnectionError("down")
        return await original(data)

    messages.create_message = create  # type: ignore[method-assign]
    agent = AGUIStorageAgent(
        "assistant",
        USER,
        chats,
        messages,
        ScriptedAgent(script),
        flush_interval=0.01,
        finalize_timeout=2.0,  # an outage is retried until 1 s before it
    )
    events = await asyncio.wait_for(_collect(agent, run_input()), 5)
    assert events[-1].type == "RUN_FINISHED"
    assert "final flush of run 'r1' failed" in caplog.text


async def test_s83_4_buffered_text_is_flushed_by_time_while_the_agent_is_silent() -> None:
    store = Store()
    inner = Gated([rs(), tms("m1"), tmc("m1", "partial")], [tme("m1"), rf()])
    agent = store.agent(inner, flush_interval=0.05)
    task = asyncio.create_task(_collect(agent, run_input()))
    await inner.reached.wait()

    async def persisted() -> bool:
        stored = await store.history()
        return len(stored) == 2 and stored[1].content == "partial"

    await _eventually(persisted)
    assert (await store.history())[1].status == "active"  # the run is still going
    inner.gate.set()
    await task
    assert summary(await store.history())[1] == ("assistant", "m1", "partial", "complete", False)


async def test_s83_5_run_started_mid_stream_keeps_buffers() -> None:
    store = Store()
    await store.run(
        [
            rs(),
            tms("m1"),
            tmc("m1", "kept"),
            RunStartedEvent(thread_id="t1", run_id="r1"),
            tme("m1"),
            rf(),
        ]
    )
    assert (await store.history())[1].content == "kept"


async def test_s83_10_chunks_and_content_keep_their_order() -> None:
    store = Store()
    await store.run(
        [rs(), tmc("m1", "Hello"), TextMessageChunkEvent(message_id="m1", delta=" world"), rf()]
    )
    assert (await store.history())[1].content == "Hello world"


async def test_s82_1_finalizers_touch_only_the_records_of_their_run() -> None:
    store = Store()
    run_a = Gated([rs("ra"), tms("ma"), tmc("ma", "A")], [tme("ma"), rf("ra")])
    run_b = Gated([rs("rb"), tms("mb"), tmc("mb", "B")], [tme("mb"), rf("rb")])
    task_a = asyncio.create_task(
        _collect(store.agent(run_a, flush_interval=0.01), run_input(run="ra"))
    )
    await run_a.reached.wait()
    task_b = asyncio.create_task(
        _collect(
            store.agent(run_b, flush_interval=0.01),
            run_input(
                UserMessage(id="u1", content="Hello"), UserMessage(id="u2", content="B?"), run="rb"
            ),
        )
    )
    await run_b.reached.wait()

    async def both_stored() -> bool:
        return {m.agui_id for m in await store.history()} >= {"ma", "mb"}

    await _eventually(both_stored)
    task_a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task_a
    by_id = {m.agui_id: m for m in await store.history()}
    assert by_id["ma"].status == "interrupted"
    assert by_id["mb"].status == "active"  # run B is untouched
    run_b.gate.set()
    await task_b
    by_id = {m.agui_id: m for m in await store.history()}
    assert (by_id["ma"].status, by_id["mb"].status) == ("interrupted", "complete")


async def test_s81_9_a_slow_store_never_stalls_the_outgoing_stream() -> None:
    chats = InMemoryChatRepository()
    gate = asyncio.Event()

    class Stuck(InMemoryMessageRepository):
        async def create_message(self, message_data: Any) -> Message:
            if message_data.role == "assistant":
                await gate.wait()
            return await super().create_message(message_data)

    messages = Stuck(chats)
    script = [rs(), *text("m1", *["x"] * 20), rf()]
    agent = AGUIStorageAgent(
        "assistant", USER, chats, messages, ScriptedAgent(script), minimal_chunk_to_persist=1
    )
    stream = agent.run(run_input())
    received = [await asyncio.wait_for(stream.__anext__(), 1) for _ in range(len(script))]
    assert received == script  # every event arrived while the store was blocked
    gate.set()
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    chat = await chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    assert (await messages.get_chat_messages(chat.chat_uuid))[1].content == "x" * 20


async def test_s81_1_a_short_turn_costs_one_write_per_record() -> None:
    store = Store()
    await store.run([rs(), *text("m1", *["w "] * 50), rf()])
    assert [op for op, _ in store.messages.writes] == ["create_message", "create_message"]


# A real pydantic-ai agent through its AG-UI adapter ---------------------------------------------


class PydanticAIInner(AGUIAgent):
    """The inner agent the server uses: pydantic-ai's AG-UI adapter over an Agent."""

    name = "pydantic-ai"

    def __init__(self, agent: Agent[None, str]) -> None:
        self.agent = agent

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        async for event in AGUIAdapter(agent=self.agent, run_input=input).run_stream():
            yield event


def _weather_agent(seen: list[list[ModelMessage]]) -> Agent[None, str]:
    async def model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        seen.append(list(messages))
        last = messages[-1]
        if isinstance(last, ModelRequest) and isinstance(last.parts[-1], UserPromptPart):
            yield {0: DeltaToolCall(name="get_weather", json_args='{"city": "Paris"}')}
        else:
            yield "It is 18C"

    agent: Agent[None, str] = Agent(FunctionModel(stream_function=model))

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return f"18C in {city}"

    return agent


async def test_pydantic_ai_round_trip_stores_and_replays_the_whole_turn() -> None:
    store = Store()
    seen: list[list[ModelMessage]] = []
    inner = PydanticAIInner(_weather_agent(seen))
    events = await _collect(store.agent(inner), run_input(UserMessage(id="u1", content="Weather?")))
    assert events[-1].type == "RUN_FINISHED"
    stored = await store.history()
    calls = [c for m in stored for c in m.tool_calls]
    assert [(c.name, c.content, c.has_result) for c in calls] == [
        ("get_weather", "18C in Paris", True)
    ]
    assert stored[-1].content == "It is 18C"
    assert all(m.status == "complete" for m in stored)

    # Turn 2: the client echoes everything it was streamed (result id included) plus a question.
    replay = store.agent(inner).translate(stored)
    question = UserMessage(id="u2", content="And tomorrow?")
    events = await _collect(store.agent(inner), run_input(*replay, question, run="r2"))
    assert events[-1].type == "RUN_FINISHED"
    history = seen[-2]  # the model call that answered the second question
    kinds = [type(p).__name__ for m in history for p in m.parts]
    assert kinds.count("UserPromptPart") == 2
    assert "ToolCallPart" in kinds
    assert "ToolReturnPart" in kinds
    returns = [p for m in history for p in m.parts if isinstance(p, ToolReturnPart)]
    assert returns[0].content == "18C in Paris"


class FailNthWrite(InMemoryMessageRepository):
    """Fails write number ``fail_at`` (1-based, counted from ``armed``); optionally applied."""

    def __init__(self, chats: InMemoryChatRepository, *, fail_at: int, applied: bool, tx: bool):
        super().__init__(chats)
        self.fail_at, self.applied, self.tx = fail_at, applied, tx
        self.count = 0
        self.armed = False
        self.failed = False

    async def _write(self, name: str, *args: Any) -> Any:
        method = getattr(InMemoryMessageRepository, name)
        if self.armed:
            self.count += 1
            if self.count == self.fail_at:
                self.failed = True
                if self.applied:
                    await method(self, *args)
                raise ConnectionError(f"{name} lost")
        return await method(self, *args)

    async def create_message(self, data: Any) -> Any:
        return await self._write("create_message", data)

    async def update_message(self, uuid: Any, update: Any) -> Any:
        return await self._write("update_message", uuid, update)

    async def create_message_tool_call(self, data: Any) -> Any:
        return await self._write("create_message_tool_call", data)

    async def update_message_tool_call(self, uuid: Any, update: Any) -> Any:
        return await self._write("update_message_tool_call", uuid, update)

    async def create_message_reasoning(self, data: Any) -> Any:
        return await self._write("create_message_reasoning", data)

    async def update_message_reasoning(self, uuid: Any, update: Any) -> Any:
        return await self._write("update_message_reasoning", uuid, update)

    def transaction(self) -> Any:
        return super().transaction() if self.tx else contextlib.nullcontext()


def _busy_script(repo: FailNthWrite) -> list[Any]:
    from ag_ui.core import (
        ReasoningMessageContentEvent,
        ReasoningMessageEndEvent,
        ReasoningMessageStartEvent,
    )

    from tests.chat_history.scripted import tca, tce, tcr, tcs

    return [
        inbound_stored(repo.chats, repo),
        rs(),
        lambda: setattr(repo, "armed", True),
        ReasoningMessageStartEvent(message_id="r1"),
        *(ReasoningMessageContentEvent(message_id="r1", delta=d) for d in ("abc", "def", "ghi")),
        ReasoningMessageEndEvent(message_id="r1"),
        tms("m1"),
        *(tmc("m1", d) for d in ("Hel", "lo ", "you")),
        tcs("tc1", "f", "m1"),
        *(tca("tc1", d) for d in ('{"a"', ":", "1}")),
        tce("tc1"),
        tcr("res1", "tc1", "ok"),
        tme("m1"),
        rf(),
    ]


def _shape(messages: list[Message]) -> list[Any]:
    return [
        (
            m.agui_id,
            m.content,
            m.status,
            [(c.tool_call_id, c.arguments, c.content, c.status) for c in m.tool_calls],
            [(r.agui_id, r.content, r.status) for r in m.reasonings],
        )
        for m in messages
    ]


EXPECTED_BUSY = [
    ("u1", "Hello", "complete", [], []),
    (
        "m1",
        "Hello you",
        "complete",
        [("tc1", '{"a":1}', "ok", "complete")],
        [("r1", "abcdefghi", "complete")],
    ),
]


@pytest.mark.parametrize("tx", [True, False], ids=["transactional", "no-transactions"])
@pytest.mark.parametrize("applied", [True, False], ids=["write-landed", "write-lost"])
@pytest.mark.parametrize("fail_at", range(1, 9))
async def test_s83_1_any_failed_write_is_recovered_exactly(
    fail_at: int, applied: bool, tx: bool
) -> None:
    chats = InMemoryChatRepository()
    repo = FailNthWrite(chats, fail_at=fail_at, applied=applied, tx=tx)
    agent = AGUIStorageAgent(
        "assistant",
        USER,
        chats,
        repo,
        ScriptedAgent(_busy_script(repo)),
        minimal_chunk_to_persist=3,
    )
    await _collect(agent, run_input())
    chat = await chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    stored = list(await repo.get_chat_messages(chat.chat_uuid))
    assert _shape(stored) == EXPECTED_BUSY
    assert repo.failed or fail_at > repo.count


async def test_a_late_result_for_an_earlier_runs_call_is_recorded_on_it() -> None:
    from ag_ui.core import Interrupt, ResumeEntry, RunFinishedInterruptOutcome

    from tests.chat_history.scripted import tca, tce, tcr, tcs

    store = Store()
    interrupt = Interrupt(id="i1", reason="approval", tool_call_id="tc9")
    await store.run(
        [
            rs(),
            tcs("tc9", "delete", "m1"),
            tca("tc9", "{}"),
            tce("tc9"),
            rf(outcome=RunFinishedInterruptOutcome(interrupts=[interrupt])),
        ]
    )
    resume = run_input(resume=[ResumeEntry(interrupt_id="i1", status="resolved")], run="r2")
    await store.run(
        [rs("r2"), tcr("res9", "tc9", "deleted"), *text("m2", "Done"), rf("r2")], resume
    )
    stored = await store.history()
    call = stored[1].tool_calls[0]
    assert (call.content, call.result_message_id, call.run_id) == ("deleted", "res9", "r1")
    assert [m.agui_id for m in stored] == ["u1", "m1", "m2"]


async def test_records_of_a_deleted_chat_are_dropped_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Store()
    inner = Gated([rs(), tms("m1"), tmc("m1", "x")], [tmc("m1", "y"), tme("m1"), rf()])
    task = asyncio.create_task(_collect(store.agent(inner, flush_interval=0.01), run_input()))
    await inner.reached.wait()

    async def created() -> bool:
        return len(await store.history()) == 2

    await _eventually(created)
    chat = await store.chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    await store.chats.delete_chat(chat.chat_uuid)
    inner.gate.set()
    caplog.set_level(logging.INFO, logger="django_pydantic_agent")
    events = await task
    assert events[-1].type == "RUN_FINISHED"
    # The records went with their chat: one INFO line, no warning per record, no retry.
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "INFO",
            "Thread 't1' was deleted while run 'r1' wrote to it; the run goes on, and the rest "
            "of it is not stored.",
        )
    ]
    assert await store.history() == []


class ForgetfulRepository(InMemoryMessageRepository):
    """A record vanishes (an operator deleted that one message); its chat is still there."""

    vanished: set[Any]

    async def update_message(self, message_uuid: Any, update: MessageUpdate) -> Message | None:
        if message_uuid in self.vanished:
            return None
        return await super().update_message(message_uuid, update)


class BrokenLookup(InMemoryChatRepository):
    """The chat lookup fails once the run is under way (the store is down)."""

    broken = False

    async def get_chat_by_thread_id(self, user_uuid: Any, thread_id: str) -> Any:
        if self.broken:
            raise ConnectionError("the store is down")
        return await super().get_chat_by_thread_id(user_uuid, thread_id)


@pytest.mark.parametrize("lookup_fails", [False, True])
async def test_a_record_gone_from_a_live_chat_is_still_a_warning(
    caplog: pytest.LogCaptureFixture, lookup_fails: bool
) -> None:
    chats = BrokenLookup()
    messages = ForgetfulRepository(chats)
    messages.vanished = set()
    inner = Gated([rs(), tms("m1"), tmc("m1", "x")], [tmc("m1", "y"), tme("m1"), rf()])
    agent = AGUIStorageAgent("assistant", USER, chats, messages, inner, flush_interval=0.01)
    task = asyncio.create_task(_collect(agent, run_input()))
    await inner.reached.wait()

    async def created() -> bool:
        chat = await chats.get_chat_by_thread_id(USER, "t1")
        assert chat is not None
        return len(await messages.get_chat_messages(chat.chat_uuid)) == 2

    await _eventually(created)
    chat = await chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    [_, answer] = await messages.get_chat_messages(chat.chat_uuid)
    messages.vanished.add(answer.message_uuid)
    chats.broken = lookup_fails
    caplog.set_level(logging.INFO, logger="django_pydantic_agent")
    inner.gate.set()
    events = await task
    assert events[-1].type == "RUN_FINISHED"
    # Not a deleted thread (or one the store cannot tell): the lost record is a warning,
    # as before, and the run's thread is kept.
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "WARNING",
            f"A record of this run ({answer.message_uuid}) is no longer in the store; its "
            "later changes are dropped.",
        )
    ]
    chats.broken = False
    assert await chats.get_chat_by_thread_id(USER, "t1") is not None


async def test_inbound_helpers() -> None:
    from django_pydantic_agent.chat_history._inbound import (
        _expired,
        derive_chat_name,
        dump_parts,
        flatten_content,
    )

    assert flatten_content(None) == ""
    assert flatten_content([{"text": "untyped"}, {"type": "text", "text": "a"}]) == "a"
    assert flatten_content({"kind": "activity"}) == "{'kind': 'activity'}"
    assert dump_parts([{"type": "text", "text": "a"}]) == [{"type": "text", "text": "a"}]
    assert dump_parts("text") is None
    assert derive_chat_name("x" * 150) == "x" * 100
    assert derive_chat_name("word " * 30) == ("word " * 20).strip()
    assert _expired({"expiresAt": "not a date"}, datetime.now(UTC)) is False
    assert _expired({"expiresAt": "2000-01-01T00:00:00"}, datetime.now(UTC)) is True


async def test_s81_2_flushes_send_deltas_not_the_whole_text() -> None:
    chats = InMemoryChatRepository()

    class Recording(InMemoryMessageRepository):
        updates: list[MessageUpdate] = []

        async def update_message(self, message_uuid: Any, update: MessageUpdate) -> Message | None:
            self.updates.append(update)
            return await super().update_message(message_uuid, update)

    messages = Recording(chats)
    messages.updates = []
    deltas = ["x" * 10 for _ in range(5)]
    script = paced([rs(), tms("m1"), *(tmc("m1", d) for d in deltas), tme("m1"), rf()])
    agent = AGUIStorageAgent(
        "assistant", USER, chats, messages, ScriptedAgent(script), minimal_chunk_to_persist=10
    )
    await _collect(agent, run_input())
    assert messages.updates
    assert all(u.content is None for u in messages.updates)
    assert [(u.content_offset, len(u.content_delta or "")) for u in messages.updates] == [
        (10, 10),
        (20, 10),
        (30, 10),
        (40, 10),
        (None, 0),  # TEXT_MESSAGE_END: the status alone
    ]
    assert messages.updates[-1].status == "complete"


async def test_pydantic_ai_approval_interrupt_and_resume_round_trip() -> None:
    from ag_ui.core import ResumeEntry
    from pydantic_ai import DeferredToolRequests

    store = Store()
    deleted: list[str] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        last = messages[-1]
        if isinstance(last, ModelRequest) and isinstance(last.parts[-1], UserPromptPart):
            yield {0: DeltaToolCall(name="delete_file", json_args='{"path": "a.txt"}')}
        else:
            yield "Deleted."

    agent: Agent[None, Any] = Agent(
        FunctionModel(stream_function=model), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        deleted.append(path)
        return f"{path} deleted"

    inner = PydanticAIInner(agent)
    events = await _collect(store.agent(inner), run_input(UserMessage(id="u1", content="rm a")))
    finished = events[-1]
    assert finished.type == "RUN_FINISHED"
    interrupt = finished.outcome.interrupts[0]  # type: ignore[attr-defined]
    stored = await store.history()
    carrier = next(m for m in stored if m.run_outcome)
    assert carrier.run_outcome is not None
    assert carrier.run_outcome["type"] == "interrupt"
    assert carrier.run_outcome["pending_tool_call_ids"] == [interrupt.tool_call_id]

    # A run that ignores the interrupt is refused; the resume approves and the tool runs.
    refused = await _collect(
        store.agent(inner), run_input(UserMessage(id="u2", content="?"), run="r2")
    )
    assert [e.type.value for e in refused] == ["RUN_STARTED", "RUN_ERROR"]
    resume = [ResumeEntry(interrupt_id=interrupt.id, status="resolved", payload={"approved": True})]
    echo = UserMessage(id="u1", content="rm a")
    events = await _collect(store.agent(inner), run_input(echo, resume=resume, run="r2"))
    assert events[-1].type == "RUN_FINISHED", events[-1]
    assert deleted == ["a.txt"]
    calls = [c for m in await store.history() for c in m.tool_calls]
    assert [(c.name, c.content, c.has_result) for c in calls] == [
        ("delete_file", "a.txt deleted", True)
    ]
    assert (await store.history())[-1].content == "Deleted."


async def test_a_burst_from_an_agent_that_never_awaits_does_not_overflow_the_queue() -> None:
    store = Store()
    script = [rs(), tms("m1"), *(tmc("m1", "w") for _ in range(3000)), tme("m1"), rf()]
    events, _ = await store.run(script, max_queue_size=200)
    assert len(events) == len(script)
    stored = (await store.history())[1]
    assert (len(stored.content), stored.status) == (3000, "complete")
