"""A worker that starts a run, writes part of an answer, then hangs until it is killed.

Run as ``python tests/contrib/store/run_victim.py`` with ``DPA_VICTIM_DB`` naming the test
database (the parent's test database file or name); prints ``ready`` once its writes are
committed.
"""

from __future__ import annotations

import asyncio
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")


async def main() -> None:
    from django_pydantic_agent.chat_history import (
        ChatCreate,
        MessageCreate,
        MessageReasoningCreate,
        MessageToolCallCreate,
        MessageUpdate,
    )
    from django_pydantic_agent.contrib.store.repositories import (
        OrmChatRepository,
        OrmMessageRepository,
    )
    from django_pydantic_agent.contrib.store.runs import DefaultRunStore

    runs = DefaultRunStore()
    await runs.start(owner_id="victim", thread_id="t1", run_id="r1", worker_id=f"pid-{os.getpid()}")
    chats = OrmChatRepository(owner_id="victim")
    messages = OrmMessageRepository(chats)
    chat = await chats.create_chat(ChatCreate(thread_id="t1", user_uuid=chats.user_uuid))
    async with messages.transaction():
        await messages.create_message(
            MessageCreate(
                chat_uuid=chat.chat_uuid,
                agui_id="u1",
                content="Hello",
                status="complete",
                in_progress=False,
            )
        )
        answer = await messages.create_message(
            MessageCreate(chat_uuid=chat.chat_uuid, agui_id="m1", role="assistant", run_id="r1")
        )
        await messages.create_message_tool_call(
            MessageToolCallCreate(message_uuid=answer.message_uuid, tool_call_id="c1", run_id="r1")
        )
        await messages.create_message_reasoning(
            MessageReasoningCreate(message_uuid=answer.message_uuid, content="hmm", run_id="r1")
        )
    await messages.update_message(
        answer.message_uuid, MessageUpdate(content_delta="Half an answer", content_offset=0)
    )
    await runs.heartbeat(owner_id="victim", thread_id="t1", run_id="r1", last_seq=4)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    import django

    from tests import settings

    settings.DATABASES["default"]["NAME"] = os.environ["DPA_VICTIM_DB"]
    django.setup()
    asyncio.run(main())
