"""A thread deleted while a run writes to it: the run ends quietly, nothing is retried.

The run's inner agent waits for each flush to end before its next event, so the run's writes
happen at the same flush points every time: the inbound user message, the text's first
write, a text delta, the tool call, and the final flush. The thread is deleted through the
store (as ``DELETE threads/<id>/`` does) on entering each one in turn, on the real
repositories: the ORM pair of ``DefaultConversationStore`` (SQLite, or PostgreSQL with
``DATABASE_URL``), the generic adapter over a model store, the Memory Service pair over HTTP
to the emulator, and the in-memory pair.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from ag_ui.core import BaseEvent, RunAgentInput, UserMessage
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import RequestFactory

from django_pydantic_agent.chat_history import (
    AGUIAgent,
    AGUIStorageAgent,
    InMemoryChatRepository,
    InMemoryMessageRepository,
    StreamPersistenceManager,
)
from django_pydantic_agent.chat_history.memory_service import (
    ChatRepository,
    ChatSessionRegistry,
    MessageRepository,
)
from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.memory_service import DRMemoryServiceClient, DRMemorySpace
from django_pydantic_agent.persistence import repositories_for
from django_pydantic_agent.testing.agui_script import RF, RS, TCA, TCE, TCS, TMC, TME, TMS
from tests.chat_history.conftest import USER
from tests.chat_history.scripted import run_input
from tests.testapp.models import Thread
from tests.testapp.stores import ThreadStore

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def alice(django_user_model: type[User]) -> User:
    return django_user_model.objects.create_user("alice", password="pw")


#: The run's flush points, in order (the transactions a run on an existing thread makes).
POINTS = ["inbound", "first text", "text delta", "tool call", "final"]
GONE_LINE = (
    "Thread {thread!r} was deleted while run 'r1' wrote to it; the run goes on, and the rest "
    "of it is not stored."
)


class CountingRepository:
    """The real message repository; counts its transactions (each a write attempt of the
    run) and runs ``before`` on entering number ``at``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.entered = 0
        self.exited = 0
        self.at: int | None = None
        self.before: Callable[[], Awaitable[None]] | None = None
        self.idle = asyncio.Event()
        self.idle.set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        self.entered += 1
        self.idle.clear()
        if self.entered == self.at and self.before is not None:
            await self.before()
        try:
            async with self._inner.transaction():
                yield
        finally:
            self.exited += 1
            if self.exited == self.entered:
                self.idle.set()


class Stepped(AGUIAgent):
    """A text answer and a tool call; after each event it waits for the flush it started."""

    name = "stepped"

    def __init__(self, repo: CountingRepository, run_id: str = "r1") -> None:
        self.repo = repo
        self.run_id = run_id

    async def _settled(self) -> None:
        await asyncio.sleep(0.02)  # a flush the event made due has started by now
        await self.repo.idle.wait()

    async def run(self, input: RunAgentInput) -> AsyncGenerator[BaseEvent, None]:
        script = [
            RS(self.run_id, input.thread_id),
            TMS("m1"),
            TMC("m1", "Looking"),
            TMC("m1", " it up."),
            TME("m1"),
            TCS("tc1", "lookup", parent="m1"),
            TCA("tc1", '{"q": 1}'),
            TCE("tc1"),
            RF(self.run_id, input.thread_id),
        ]
        await self._settled()  # the inbound writes
        for event in script:
            yield event
            await self._settled()


async def _nothing() -> None:
    return None


@dataclass
class Backend:
    """One owner's repositories on a store, and how to read and delete its thread."""

    chats: Any
    messages: CountingRepository
    user: Any
    delete: Callable[[str], Awaitable[None]]
    exists: Callable[[str], Awaitable[bool]]
    rows: Callable[[str], Awaitable[int]]
    close: Callable[[], Awaitable[None]] = _nothing


async def _on_store(store: Any, alice: User, rows: Callable[[str], int]) -> Backend:
    """Alice's repositories on a Django conversation store; ``rows`` counts the thread's rows."""
    request = RequestFactory().post("/agent/")
    request.user = alice
    chats, messages = await repositories_for(store, request=request)

    async def delete(thread_id: str) -> None:
        await store.delete(thread_id, request=request)

    async def exists(thread_id: str) -> bool:
        return await store.exists(thread_id, request=request)

    return Backend(
        chats, CountingRepository(messages), chats.user_uuid, delete, exists, sync_to_async(rows)
    )


async def _orm(alice: User) -> Backend:
    def rows(thread_id: str) -> int:
        return StoredMessage.objects.filter(conversation__thread_id=thread_id).count() + (
            StoredConversation.objects.filter(thread_id=thread_id).count()
        )

    return await _on_store(DefaultConversationStore(), alice, rows)


async def _adapter(alice: User) -> Backend:
    def rows(thread_id: str) -> int:
        return Thread.objects.filter(thread_id=thread_id).count()

    return await _on_store(ThreadStore(), alice, rows)


async def _memory(alice: User) -> Backend:
    chats = InMemoryChatRepository()
    messages = InMemoryMessageRepository(chats)

    async def delete(thread_id: str) -> None:
        chat = await chats.get_chat_by_thread_id(USER, thread_id)
        assert chat is not None
        await chats.delete_chat(chat.chat_uuid)

    async def exists(thread_id: str) -> bool:
        return await chats.get_chat_by_thread_id(USER, thread_id) is not None

    async def rows(thread_id: str) -> int:
        chat = await chats.get_chat_by_thread_id(USER, thread_id)
        return 0 if chat is None else 1 + len(await messages.get_chat_messages(chat.chat_uuid))

    return Backend(chats, CountingRepository(messages), USER, delete, exists, rows)


async def _memory_service(alice: User, live_server: Any) -> Backend:
    pool = httpx.AsyncClient(timeout=10.0)
    client = DRMemoryServiceClient(
        endpoint=f"{live_server.url}/api/v2", api_token="tok", http_client=pool
    )
    space = await DRMemorySpace.post(client, deduplication_key="delete-during-run")
    registry = ChatSessionRegistry(space)
    chats = ChatRepository(space, registry)
    messages = MessageRepository(space, registry)

    def replica() -> ChatRepository:  # another worker: the thread route's own repositories
        return ChatRepository(space, ChatSessionRegistry(space))

    async def delete(thread_id: str) -> None:
        other = replica()
        chat = await other.get_chat_by_thread_id(USER, thread_id)
        assert chat is not None
        await other.delete_chat(chat.chat_uuid)

    async def exists(thread_id: str) -> bool:
        return await replica().get_chat_by_thread_id(USER, thread_id) is not None

    async def rows(thread_id: str) -> int:
        other = replica()
        chat = await other.get_chat_by_thread_id(USER, thread_id)
        if chat is None:
            return 0
        return 1 + len(
            await MessageRepository(space, other._registry).get_chat_messages(chat.chat_uuid)
        )

    return Backend(chats, CountingRepository(messages), USER, delete, exists, rows, pool.aclose)


BACKENDS: dict[str, Callable[..., Awaitable[Backend]]] = {
    "orm": _orm,
    "adapter": _adapter,
    "memory": _memory,
    "memory_service": _memory_service,
}


@pytest.fixture
async def make_backend(
    alice: User, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[[str], Awaitable[Backend]]]:
    built: list[Backend] = []

    async def make(name: str) -> Backend:
        if name == "memory_service":
            backend = await _memory_service(alice, request.getfixturevalue("live_server"))
        else:
            backend = await BACKENDS[name](alice)
        built.append(backend)
        return backend

    yield make
    for backend in built:
        await backend.close()


async def _run(backend: Backend, thread_id: str, run_id: str, text: str) -> list[BaseEvent]:
    inner = Stepped(backend.messages, run_id)
    agent = AGUIStorageAgent(
        "assistant",
        backend.user,
        backend.chats,
        backend.messages,
        inner,
        minimal_chunk_to_persist=1,  # every delta is a flush point; no flush by time
        flush_interval=30.0,
    )
    posted = run_input(UserMessage(id=f"u-{run_id}", content=text), thread=thread_id, run=run_id)
    async with StreamPersistenceManager(lambda: agent) as manager:
        handle = await manager.run(posted)
        events = [event async for event in handle.events()]
        await handle.wait()
    return events


@pytest.mark.parametrize("backend_name", list(BACKENDS))
async def test_the_flush_points_of_an_undisturbed_run(
    make_backend: Callable[[str], Awaitable[Backend]], backend_name: str
) -> None:
    # The control: what POINTS names is what a run makes, and it stores everything.
    backend = await make_backend(backend_name)
    await _run(backend, "kept", "r0", "First")
    backend.messages.entered = backend.messages.exited = 0
    events = await _run(backend, "kept", "r1", "Second")
    assert events[-1].type == "RUN_FINISHED"
    assert backend.messages.entered == len(POINTS)
    assert await backend.exists("kept")
    stored = await backend.messages.get_chat_messages(
        (await backend.chats.get_chat_by_thread_id(backend.user, "kept")).chat_uuid
    )
    assert [(m.agui_id, m.content, m.status) for m in stored] == [
        ("u-r0", "First", "complete"),
        ("m1", "Looking it up.", "complete"),
        ("u-r1", "Second", "complete"),
        ("m1", "Looking it up.", "complete"),
    ]
    assert [(c.tool_call_id, c.arguments) for c in stored[-1].tool_calls] == [("tc1", '{"q": 1}')]


@pytest.mark.parametrize(
    ("backend_name", "point"),
    [pytest.param(name, point, id=f"{name}-{point}") for name in BACKENDS for point in POINTS],
)
async def test_a_thread_deleted_at_a_flush_point_ends_the_run_quietly(
    make_backend: Callable[[str], Awaitable[Backend]],
    backend_name: str,
    point: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = await make_backend(backend_name)
    thread_id = f"doomed-{point}"
    await _run(backend, thread_id, "r0", "First")
    counter = backend.messages
    counter.entered = counter.exited = 0
    counter.at = POINTS.index(point) + 1
    counter.before = lambda: backend.delete(thread_id)
    caplog.set_level(logging.INFO, logger="django_pydantic_agent")

    events = await _run(backend, thread_id, "r1", "Second")

    # The client's stream ends as for any deleted thread: the agent's own RUN_FINISHED.
    assert [e.type.value for e in events][-2:] == ["TOOL_CALL_END", "RUN_FINISHED"]
    # No write was tried again: at most the one the delete preceded and the one that found
    # it out; none after that (a retry added one flush per failure, then three final ones).
    assert counter.at <= counter.entered <= min(counter.at + 1, len(POINTS))
    ours = [r for r in caplog.records if r.name.startswith("django_pydantic_agent")]
    assert [(r.levelname, r.getMessage()) for r in ours] == [
        ("INFO", GONE_LINE.format(thread=thread_id))
    ]
    assert all(r.exc_info is None for r in caplog.records)
    # The thread stays deleted: no row of it is left or written again.
    assert await backend.exists(thread_id) is False
    assert await backend.rows(thread_id) == 0
    assert await backend.chats.get_chat_by_thread_id(backend.user, thread_id) is None


@pytest.mark.parametrize("backend_name", list(BACKENDS))
async def test_a_new_thread_deleted_before_its_user_message_is_written(
    make_backend: Callable[[str], Awaitable[Backend]],
    backend_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # On a new thread the chat is created first, then the user message (the run's first
    # transaction): a delete in between leaves the run unstored, not failed.
    backend = await make_backend(backend_name)
    counter = backend.messages
    counter.at = 1
    counter.before = lambda: backend.delete("fresh")
    caplog.set_level(logging.INFO, logger="django_pydantic_agent")

    events = await _run(backend, "fresh", "r1", "Hello")

    assert events[-1].type.value == "RUN_FINISHED"
    assert counter.entered <= 2
    ours = [r for r in caplog.records if r.name.startswith("django_pydantic_agent")]
    assert [(r.levelname, r.getMessage()) for r in ours] == [
        ("INFO", GONE_LINE.format(thread="fresh"))
    ]
    assert await backend.exists("fresh") is False
    assert await backend.rows("fresh") == 0
