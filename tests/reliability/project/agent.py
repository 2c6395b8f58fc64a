"""The reliability site's scripted model: text, a tool call, then a streamed answer.

Each run asks about a *marker* (the user message ``"ask <marker>"``). The model streams a short
preamble, calls ``lookup(topic=<marker>)`` with its arguments split over several deltas, then
streams an answer naming the marker and the tool's result, one word per delta, pausing
``RELIABILITY_DELTA_DELAY`` seconds after each delta. A message with ``slow`` in it pauses
``SLOW_DELAY`` per word and goes on for ``SLOW_WORDS`` words: long enough to kill its worker.

Words of the message ask for more (``tests/reliability/test_worker_death.py``): ``think``
streams ``THOUGHTS`` as reasoning first; ``long`` makes the answer ``LONG_WORDS`` words; and
``park:<point>`` (one of ``PARK_POINTS``) stops the run there for good on a worker started with
``RELIABILITY_PARK_DIR``, which then holds a file named after the marker. Elsewhere the run
streams straight through.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path

from django.conf import settings
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import (
    AgentInfo,
    DeltaThinkingCalls,
    DeltaThinkingPart,
    DeltaToolCall,
    DeltaToolCalls,
    FunctionModel,
)

PREAMBLE = ["Let ", "me ", "look ", "that ", "up."]
THOUGHTS = ["The ", "user ", "wants ", "the ", "notes; ", "I ", "will ", "look ", "them ", "up."]
SLOW_DELAY = 0.1
SLOW_WORDS = 600
LONG_WORDS = 1000
#: Where a run parks (``park:<point>``): before its first event of the model, halfway through
#: its reasoning, halfway through the tool call's arguments, inside the tool, or four words
#: into its answer.
PARK_POINTS = ("start", "reasoning", "args", "tool", "answer")


def marker_of(prompt: str) -> str:
    """The marker a user message asks about (``"ask t3-7"`` gives ``"t3-7"``)."""
    return prompt.split()[-1] if prompt.split() else ""


def tool_arguments(marker: str) -> str:
    """The JSON arguments the model streams for ``lookup``."""
    return json.dumps({"topic": marker})


def answer_words(marker: str) -> list[str]:
    """The answer the model streams after the tool returned, as its deltas."""
    text = (
        f"The notes on {marker} say: {lookup_result(marker)} That is all I found about "
        f"{marker} today, so ask again later."
    )
    words = text.split(" ")
    return [f"{word} " for word in words[:-1]] + [words[-1]]


def lookup_result(topic: str) -> str:
    """What the ``lookup`` tool returns for ``topic``."""
    return f"{topic} is on page {sum(map(ord, topic)) % 97}."


def park_point(prompt: str) -> str | None:
    """The point a message asks its run to park at (``"park:args ask m1"`` gives ``"args"``)."""
    for word in prompt.split():
        if word.startswith("park:"):
            return word[len("park:") :]
    return None


async def _park(prompt: str, point: str) -> None:
    """Stop here for good if the worker parks runs and ``prompt`` names ``point``."""
    folder = settings.RELIABILITY_PARK_DIR
    if not folder or park_point(prompt) != point:
        return
    (Path(folder) / marker_of(prompt)).write_text(point)
    await asyncio.Event().wait()  # until the worker is killed


def _prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


async def _stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls | DeltaThinkingCalls]:
    prompt = _prompt(messages)
    marker = marker_of(prompt)
    words_asked = prompt.split()
    delay = float(settings.RELIABILITY_DELTA_DELAY)
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        words = answer_words(marker)
        if "slow" in prompt:
            words, delay = [f"word{i} " for i in range(SLOW_WORDS)], SLOW_DELAY
        elif "long" in words_asked:
            words = [*(f"word{i} " for i in range(LONG_WORDS)), *words]
        for index, word in enumerate(words):
            if index == 4:
                await _park(prompt, "answer")
            yield word
            await asyncio.sleep(delay)
        return
    await _park(prompt, "start")
    if "think" in words_asked:
        for index, thought in enumerate(THOUGHTS):
            if index == len(THOUGHTS) // 2:
                await _park(prompt, "reasoning")
            yield {0: DeltaThinkingPart(content=thought)}
            await asyncio.sleep(delay)
    for word in PREAMBLE:
        yield word
        await asyncio.sleep(delay)
    arguments = tool_arguments(marker)
    cuts = [0, 3, len(arguments) // 2, len(arguments) - 2, len(arguments)]
    for index, (start, end) in enumerate(itertools.pairwise(cuts)):
        delta = DeltaToolCall(json_args=arguments[start:end])
        if index == 0:
            delta = DeltaToolCall(
                name="lookup", json_args=arguments[start:end], tool_call_id=f"call-{marker}"
            )
        if index == 2:
            await _park(prompt, "args")
        yield {1: delta}
        await asyncio.sleep(delay)


def build_agent() -> Agent[None, str]:
    """The agent every mount of the site serves."""
    agent: Agent[None, str] = Agent(FunctionModel(stream_function=_stream), name="reliability")

    @agent.tool
    async def lookup(ctx: RunContext[None], topic: str) -> str:
        """Look ``topic`` up in the notes."""
        await _park(_prompt(ctx.messages), "tool")
        return lookup_result(topic)

    return agent
