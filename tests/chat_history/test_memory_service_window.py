"""A run on the Memory Service reads what its window needs: one ``lastN`` request, over HTTP."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import httpx
import pytest

from bench.memory_window import measure_window
from django_pydantic_agent.chat_history.memory_service import (
    ChatRepository,
    ChatSessionRegistry,
    MessageRepository,
)
from django_pydantic_agent.chat_history.records import ChatCreate, MessageCreate
from django_pydantic_agent.contrib.memory_service_emulator import request_counter
from django_pydantic_agent.memory_service import DRMemoryServiceClient, DRMemorySpace
from tests.support.emulator import no_faults_armed

pytestmark = [pytest.mark.django_db(transaction=True)]

USER = "12345678-1234-5678-1234-567812345678"


async def test_a_run_on_a_long_thread_reads_one_lastn_page_not_the_thread(
    live_server: Any,
) -> None:
    with no_faults_armed():
        rows = await measure_window(f"{live_server.url}/api/v2", sizes=(10, 1000))
    by = {(row.size, row.scenario.split(",")[0]): row for row in rows}
    cold_echo = "cold worker"
    ten = [r for r in rows if r.size == 10]
    thousand = [r for r in rows if r.size == 1000]
    # A cold worker re-running on the thread's newest user message: one lastN=100 page.
    echo_1000 = thousand[0]
    assert echo_1000.events_read == 100
    assert echo_1000.by_route[("GET", "event-list")] == 1
    assert echo_1000.requests == ten[0].requests  # flat: the same requests at 10 and 1,000
    # A warm worker's next turn: one lastN=1 freshness check, at any length.
    assert thousand[2].by_route[("GET", "event-list")] == 1
    assert thousand[2].events_read == 1
    assert thousand[2].requests == ten[2].requests
    # A new user message on a cold worker may be an older one echoed: the chat is listed.
    assert thousand[1].events_read >= 100 + 1000
    assert by[(10, cold_echo)].events_read <= 11
    # A regenerate on a cold worker cuts against the whole active branch: it lists the thread
    # once, and its cut marker rides in the batch POST of the run's first writes.
    regenerate_1000 = thousand[3]
    assert regenerate_1000.scenario == "a regenerate of the newest answer (cold worker)"
    assert (
        regenerate_1000.by_route[("POST", "event-list")]
        == thousand[1].by_route[("POST", "event-list")]
    )
    for row in rows:
        print(row.row())


async def test_get_recent_messages_reads_the_tail_and_a_run_writes_without_listing(
    live_server: Any,
) -> None:
    with no_faults_armed():
        async with httpx.AsyncClient(timeout=30.0) as pool:
            client = DRMemoryServiceClient(
                endpoint=f"{live_server.url}/api/v2", api_token="tail", http_client=pool
            )
            space = await DRMemorySpace.post(client, deduplication_key="tail-reads")
            registry = ChatSessionRegistry(space)
            chats = ChatRepository(space, registry)
            messages = MessageRepository(space, registry)
            chat = await chats.create_chat(
                ChatCreate(name="t", thread_id="t", user_uuid=UUID(USER))
            )
            async with messages.transaction():
                for n in range(150):
                    await messages.create_message(
                        MessageCreate(chat_uuid=chat.chat_uuid, content=f"m{n}", agui_id=f"a{n}")
                    )
            cold_registry = ChatSessionRegistry(space)
            cold = MessageRepository(space, cold_registry)
            await ChatRepository(space, cold_registry).get_chat_by_thread_id(chat.user_uuid, "t")
            request_counter.reset()
            recent = await cold.get_recent_messages(chat.chat_uuid, 20)
            assert [m.content for m in recent] == [f"m{n}" for n in range(130, 150)]
            assert request_counter.snapshot() == {("GET", "event-list"): 1}
            # A message of the tail is found and updated with one PATCH, nothing listed.
            request_counter.reset()
            found = await cold.get_message_by_agui_id(chat.chat_uuid, "a149")
            assert found is not None
            assert found.content == "m149"
            from django_pydantic_agent.chat_history.records import MessageUpdate

            await cold.update_message(found.message_uuid, MessageUpdate(content="edited"))
            assert ("GET", "event-list") not in request_counter.snapshot()
            # An older one is still found: the chat is listed (pages of 100), once.
            request_counter.reset()
            older = await cold.get_message_by_agui_id(chat.chat_uuid, "a3")
            assert older is not None
            assert older.content == "m3"
            assert request_counter.snapshot()[("GET", "event-list")] == 2
            whole = await cold.get_chat_messages(chat.chat_uuid)
            assert [m.content for m in whole][-2:] == ["m148", "edited"]
            assert len(whole) == 150
            # A short chat's tail is the whole chat: nothing more is listed afterwards.
            short = await chats.create_chat(
                ChatCreate(name="s", thread_id="s", user_uuid=chat.user_uuid)
            )
            await messages.create_message(MessageCreate(chat_uuid=short.chat_uuid, content="only"))
            fresh_registry = ChatSessionRegistry(space)
            fresh = MessageRepository(space, fresh_registry)
            await ChatRepository(space, fresh_registry).get_chat_by_thread_id(chat.user_uuid, "s")
            assert [m.content for m in await fresh.get_recent_messages(short.chat_uuid, 5)] == [
                "only"
            ]
            request_counter.reset()
            assert await fresh.get_message_by_agui_id(short.chat_uuid, "missing") is None
            assert ("GET", "event-list") not in request_counter.snapshot()
            with pytest.raises(ValueError, match="at least 1"):
                await fresh.get_recent_messages(short.chat_uuid, 0)
