"""``AGUIAgent`` as seed 000 describes it: a named object, whichever way a subclass names it.

Each inner agent below is written the way code against the seed is: it either calls
``super().__init__(name)``, or sets ``name`` itself. Each is wrapped by ``AGUIStorageAgent``
and run through ``StreamPersistenceManager``, and the stored history is read back.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from ag_ui.core import (
    BaseEvent,
    EventType,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)

from django_pydantic_agent.chat_history import (
    AGUIAgent,
    AGUIStorageAgent,
    StreamPersistenceManager,
)
from tests.chat_history.conftest import USER
from tests.chat_history.scripted import Store, run_input


async def _answer(input: RunAgentInput, text: str) -> AsyncGenerator[BaseEvent, None]:
    yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)
    yield TextMessageStartEvent(message_id="a1")
    yield TextMessageContentEvent(message_id="a1", delta=text)
    yield TextMessageEndEvent(message_id="a1")
    yield RunFinishedEvent(thread_id=input.thread_id, run_id=input.run_id)


class CallsSuper(AGUIAgent):
    """The seed's own habit: the base class is given the name."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__(name)
        self.text = text

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        async for event in _answer(input, self.text):
            yield event


class SetsNameItself(AGUIAgent):
    """Sets ``name`` in its own ``__init__`` and never calls the base class's."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        async for event in _answer(input, f"I am {self.name}."):
            yield event


class ClassAttribute(AGUIAgent):
    """Names itself with a class attribute and has no ``__init__`` at all."""

    name = "constant"

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        async for event in _answer(input, "From a class attribute."):
            yield event


class ClassAttributeCallsSuper(ClassAttribute):
    """A class attribute, and an ``__init__`` that calls ``super().__init__()`` with no name."""

    def __init__(self) -> None:
        super().__init__()
        self.extra = True


def _agents() -> list[AGUIAgent]:
    return [
        CallsSuper("seed", "Hello from the seed."),
        CallsSuper(name="keyword", text="By keyword."),
        SetsNameItself("own"),
        ClassAttribute(),
        ClassAttributeCallsSuper(),
    ]


def test_every_way_of_naming_gives_the_agent_its_name() -> None:
    assert [agent.name for agent in _agents()] == [
        "seed",
        "keyword",
        "own",
        "constant",
        "constant",
    ]
    assert ClassAttributeCallsSuper().extra is True


def test_an_agent_with_no_name_is_refused_at_construction() -> None:
    class Nameless(AGUIAgent):
        async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
            yield RunStartedEvent(thread_id=input.thread_id, run_id=input.run_id)

    with pytest.raises(TypeError, match=r"Nameless has no name; pass one to super\(\)"):
        Nameless()


def test_run_stays_abstract() -> None:
    class NoRun(AGUIAgent):
        pass

    with pytest.raises(TypeError, match="abstract"):
        NoRun("x")  # type: ignore[abstract]


@pytest.mark.parametrize("index", range(5))
async def test_a_seed_agent_is_wrapped_and_its_run_is_stored(index: int) -> None:
    inner = _agents()[index]
    store = Store()
    storage = AGUIStorageAgent(inner.name, USER, store.chats, store.messages, inner)
    assert isinstance(storage, AGUIAgent)

    async with StreamPersistenceManager(lambda: storage) as manager:
        handle = await manager.run(run_input(thread=f"t-{index}"))
        events = [event async for event in handle.events()]
        await handle.wait()

    assert [event.type for event in events] == [
        EventType.RUN_STARTED,
        EventType.TEXT_MESSAGE_START,
        EventType.TEXT_MESSAGE_CONTENT,
        EventType.TEXT_MESSAGE_END,
        EventType.RUN_FINISHED,
    ]
    answer = events[2]
    assert isinstance(answer, TextMessageContentEvent)
    stored = await store.history(f"t-{index}")
    assert [(m.role, m.agui_id, m.content, m.status) for m in stored] == [
        ("user", "u1", "Hello", "complete"),
        ("assistant", "a1", answer.delta, "complete"),
    ]
    assert stored[1].name == inner.name
