"""Scripted pydantic-ai agents for the AG-UI tests: no network, deterministic streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Literal

from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel

from django_pydantic_agent.agui import AgentDeps

#: What the failing agent raises; it must never reach the client unless exposed.
SECRET_ERROR = "database password is hunter2"

#: Filled by ``whoami`` with the user each run's deps carried.
SEEN_USERS: list[str] = []


def _after_tool(messages: list[ModelMessage]) -> bool:
    last = messages[-1]
    return isinstance(last, ModelRequest) and any(
        isinstance(part, ToolReturnPart) for part in last.parts
    )


async def _scripted(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | dict[int, DeltaToolCall] | dict[int, DeltaThinkingPart]]:
    """Think, call ``add(2, 3)``, then answer word by word."""
    if _after_tool(messages):
        for word in ["The ", "sum ", "is ", "5."]:
            yield word
        return
    yield {0: DeltaThinkingPart(content="Adding two numbers.")}
    yield {1: DeltaToolCall(name="add", json_args='{"a": 2, ', tool_call_id="call-add")}
    yield {1: DeltaToolCall(json_args='"b": 3}')}


def scripted_agent() -> Agent[AgentDeps, str]:
    """Reasoning, one tool call and a streamed answer."""
    agent: Agent[AgentDeps, str] = Agent(
        FunctionModel(stream_function=_scripted), deps_type=AgentDeps
    )

    @agent.tool
    def add(ctx: RunContext[AgentDeps], a: int, b: int) -> int:
        """Add two integers."""
        SEEN_USERS.append(str(ctx.deps.user))
        return a + b

    return agent


async def _text(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    for word in ["Hello ", "there."]:
        yield word


def text_agent() -> Agent[None, str]:
    """Just a two-word answer."""
    return Agent(FunctionModel(stream_function=_text))


#: How many deltas ``burst_agent`` streams.
BURST_DELTAS = 300


async def _burst(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    for i in range(BURST_DELTAS):
        yield f"w{i} "


def burst_agent() -> Agent[None, str]:
    """Streams ``BURST_DELTAS`` deltas as fast as it can."""
    return Agent(FunctionModel(stream_function=_burst))


async def _slow(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    yield "Thinking "
    await asyncio.sleep(0.35)
    yield "hard."


def slow_agent() -> Agent[None, str]:
    """A pause long enough for several heartbeats between two deltas."""
    return Agent(FunctionModel(stream_function=_slow))


#: What ``hanging_agent``'s model went through: "started", then "cancelled" on a disconnect.
HANG_LOG: list[str] = []


async def _hanging(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    HANG_LOG.append("started")
    try:
        yield "Working "
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            HANG_LOG.append("cancelled")
            raise
        HANG_LOG.append("went on")  # pragma: no cover - the client is gone by now
        yield "never."  # pragma: no cover
    finally:
        HANG_LOG.append("stopped")


def hanging_agent() -> Agent[None, str]:
    """Streams one word, then waits until the run is cancelled."""
    return Agent(FunctionModel(stream_function=_hanging))


class Departure:
    """What ``departing_agent``'s model shares with a disconnect test. ``reset()`` before each
    run (``gone`` binds to the loop that first waits on it: the test's, or uvicorn's).

    ``gone`` is set by the test's ASGI app once the server told it the client left
    (``http.disconnect``); ``flood_bytes`` is how much the model streams after its first word
    (in ``FLOOD_DELTA`` pieces, until the client has gone) so that a server's writes back up;
    ``log`` is what the model went through, as ``HANG_LOG``.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self, *, flood_bytes: int = 0) -> None:
        self.gone = asyncio.Event()
        self.flood_bytes = flood_bytes
        self.log: list[str] = []


DEPARTURE = Departure()
#: One delta of a flood: 64 KiB, a server's whole write buffer.
FLOOD_DELTA = "x" * 65536


def departing_agent(ending: Literal["hang", "finish"]) -> Agent[None, str]:
    """Streams ``"Working "`` (then ``DEPARTURE.flood_bytes`` of ``FLOOD_DELTA``), then, with
    ``ending="hang"``, waits until the run is cancelled; with ``"finish"``, waits until the
    client has gone (at most 10 s) and ends with ``"done."``: a run that outlives its client."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        log = DEPARTURE.log
        log.append("started")
        try:
            yield "Working "
            flooded = 0
            while flooded < DEPARTURE.flood_bytes and not DEPARTURE.gone.is_set():
                yield FLOOD_DELTA
                flooded += len(FLOOD_DELTA)
            try:
                if ending == "finish":
                    await asyncio.wait_for(DEPARTURE.gone.wait(), timeout=10)
                else:
                    await asyncio.sleep(30)
            except asyncio.CancelledError:
                log.append("cancelled")
                raise
            log.append("went on")
            if ending == "finish":
                yield "done."
        finally:
            log.append("stopped")

    return Agent(FunctionModel(stream_function=stream))


async def _failing(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    yield "Partial "
    raise RuntimeError(SECRET_ERROR)


def failing_agent() -> Agent[None, str]:
    """Streams a word, then raises an exception carrying a secret."""
    return Agent(FunctionModel(stream_function=_failing))


async def _echo_instructions(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    yield f"instructions={info.instructions}"


def echo_instructions_agent() -> Agent[None, str]:
    """Answers with the instructions the model was given for this run."""
    return Agent(FunctionModel(stream_function=_echo_instructions))


#: The words ``interrupted_agent`` streams before it hangs or fails.
PARTIAL_ANSWER = ["It ", "is ", "sunny "]


def interrupted_agent(
    *, ending: Literal["hang", "fail"], during: Literal["answer", "tool_args", "tool"] = "answer"
) -> Agent[None, str]:
    """Reasons, calls ``weather`` (args in two fragments) and answers, pausing between words.

    It never finishes: ``during`` the answer (after ``PARTIAL_ANSWER``), the tool call's
    arguments (after the first fragment) or the tool itself, it hangs until cancelled or raises.
    """

    async def stop() -> None:
        if ending == "fail":
            raise RuntimeError("The model provider went away.")
        await asyncio.sleep(30)

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | dict[int, DeltaToolCall] | dict[int, DeltaThinkingPart]]:
        if _after_tool(messages):
            for word in PARTIAL_ANSWER[:-1]:
                yield word
                await asyncio.sleep(0.01)
            yield PARTIAL_ANSWER[-1]
            await stop()
            yield "never."  # pragma: no cover - the run is over by now
            return
        yield {0: DeltaThinkingPart(content="Let me look that up.")}
        await asyncio.sleep(0.01)
        yield {1: DeltaToolCall(name="weather", json_args='{"city": ', tool_call_id="call-weather")}
        if during == "tool_args":
            await stop()
        await asyncio.sleep(0.01)
        yield {1: DeltaToolCall(json_args='"Oslo"}')}

    agent: Agent[None, str] = Agent(FunctionModel(stream_function=stream))

    @agent.tool_plain
    async def weather(city: str) -> str:
        """Today's weather in ``city``."""
        if during == "tool":
            await stop()
        return f"Sunny in {city}"

    return agent


async def _describe_prompt(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    from pydantic_ai.messages import UserPromptPart

    kinds = []
    for message in messages:
        for part in getattr(message, "parts", []):
            if isinstance(part, UserPromptPart):
                content = [part.content] if isinstance(part.content, str) else part.content
                kinds.extend(type(item).__name__ for item in content)
    yield "parts=" + ",".join(kinds)


def prompt_parts_agent() -> Agent[None, str]:
    """Answers with the kinds of user content the model received, e.g. ``parts=str,ImageUrl``."""
    return Agent(FunctionModel(stream_function=_describe_prompt))


class Gate:
    """Where ``gated_agent`` pauses: ``reached`` is set once it has streamed its first word, and
    it goes on once ``released`` is set. ``reset()`` before each run (events bind to a loop)."""

    reached: asyncio.Event
    released: asyncio.Event

    def reset(self) -> None:
        self.reached = asyncio.Event()
        self.released = asyncio.Event()


GATE = Gate()


async def _gated(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    yield "Working "
    GATE.reached.set()
    await asyncio.wait_for(GATE.released.wait(), timeout=10)
    yield "done."


def gated_agent() -> Agent[None, str]:
    """Streams one word, then waits for ``GATE.released`` before it finishes."""
    return Agent(FunctionModel(stream_function=_gated))


#: What ``approval_agent``'s tool did: one entry per executed (approved) call.
SENT_EMAILS: list[str] = []


async def _asks_approval(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
    """Call ``send_email(to="bob")`` (which needs approval), then answer once it returned."""
    if _after_tool(messages):
        yield "Sent."
        return
    yield {0: DeltaToolCall(name="send_email", json_args='{"to": "bob"}', tool_call_id="call-send")}


def approval_agent() -> Agent[None, str | DeferredToolRequests]:
    """A tool with ``requires_approval=True``: the first run ends waiting for a human."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(stream_function=_asks_approval), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        """Send an email."""
        SENT_EMAILS.append(to)
        return f"Sent to {to}."

    return agent


#: What ``reader_agent``'s model saw after calling ``read_attachment``: text, files, retries.
READ_BACK: list[object] = []


def _seen(part: object) -> list[object]:
    from pydantic_ai.messages import BinaryContent, RetryPromptPart, UserPromptPart

    if isinstance(part, RetryPromptPart):
        return [f"retry: {part.model_response()}"]
    content = getattr(part, "content", None)
    items = content if isinstance(content, list) else [content]
    found: list[object] = []
    for item in items:
        if isinstance(item, BinaryContent):
            found.append((item.media_type, item.data))
        elif isinstance(item, str) and not isinstance(part, UserPromptPart):
            found.append(item)
    return found


async def _reader(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
    """Call ``read_attachment`` with the last word of the user's message, then answer."""
    import json

    from pydantic_ai.messages import RetryPromptPart, UserPromptPart

    last = messages[-1]
    assert isinstance(last, ModelRequest)
    if any(isinstance(p, ToolReturnPart | RetryPromptPart) for p in last.parts):
        for part in last.parts:
            READ_BACK.extend(_seen(part))
        yield "Read."
        return
    [prompt] = [p for p in last.parts if isinstance(p, UserPromptPart)]
    text = prompt.content if isinstance(prompt.content, str) else str(prompt.content[0])
    args = json.dumps({"attachment_id": text.split()[-1]})
    yield {0: DeltaToolCall(name="read_attachment", json_args=args, tool_call_id="call-read")}


def reader_agent() -> Agent[AgentDeps, str]:
    """Reads the attachment the user names, through ``agui.tools.read_attachment``."""
    from django_pydantic_agent.agui.tools import read_attachment

    return Agent(
        FunctionModel(stream_function=_reader), deps_type=AgentDeps, tools=[read_attachment]
    )


async def _history(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    from pydantic_ai.messages import ModelResponse, TextPart, UserPromptPart

    seen: list[str] = []
    for message in messages:
        parts = message.parts
        for part in parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                seen.append(f"U:{part.content}")
            elif isinstance(message, ModelResponse) and isinstance(part, TextPart):
                seen.append(f"A:{part.content}")
    yield f"answer {len(seen)} to [" + " | ".join(seen) + "]"


def history_agent() -> Agent[None, str]:
    """Answers with the history its model saw: ``U:<prompt>`` and ``A:<answer>`` in order."""
    return Agent(FunctionModel(stream_function=_history))
