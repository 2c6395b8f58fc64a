"""A store that goes away mid-run (a database restarting): the run's writes wait for it.

The outage is an injected fault (the in-memory repository refuses every write with a
``ConnectionError`` for a while); what is checked is what a user would see afterwards: the
whole answer stored once, and a log with one line per outage rather than one per attempt.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from django_pydantic_agent.chat_history import (
    AGUIStorageAgent,
    InMemoryChatRepository,
    InMemoryMessageRepository,
)
from tests.chat_history.conftest import USER
from tests.chat_history.scripted import (
    ScriptedAgent,
    inbound_stored,
    rf,
    rs,
    run_input,
    summary,
    tmc,
    tme,
    tms,
)


class Restarting(InMemoryMessageRepository):
    """Refuses every transaction with ``ConnectionError`` while ``down`` is set."""

    down = False
    refused = 0

    def transaction(self) -> Any:
        if self.down:
            self.refused += 1
            raise ConnectionError("server closed the connection unexpectedly")
        return super().transaction()


def _outage(messages: Restarting, seconds: float) -> Any:
    async def begin() -> None:
        messages.down = True
        asyncio.get_running_loop().call_later(seconds, setattr, messages, "down", False)

    return begin


async def test_an_outage_longer_than_three_attempts_at_the_end_loses_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chats = InMemoryChatRepository()
    messages = Restarting(chats)
    # The store goes down mid-answer and comes back 1.5 s later, after the run ended: the
    # final flush used to give up after three attempts (about 1 s).
    script: list[Any] = [
        inbound_stored(chats, messages),
        rs(),
        tms("m1"),
        tmc("m1", "first half, "),
    ]
    script += [_outage(messages, 1.5), tmc("m1", "second half"), tme("m1"), rf()]
    agent = AGUIStorageAgent(
        "assistant", USER, chats, messages, ScriptedAgent(script), flush_interval=0.05
    )
    with caplog.at_level(logging.DEBUG, logger="django_pydantic_agent.chat_history"):
        events = [event async for event in agent.run(run_input())]
    assert events[-1].type == "RUN_FINISHED"
    chat = await chats.get_chat_by_thread_id(USER, "t1")
    assert chat is not None
    stored = await messages.get_chat_messages(chat.chat_uuid)
    assert summary(stored)[1:] == [
        ("assistant", "m1", "first half, second half", "complete", False)
    ]
    assert messages.refused > 3, "the outage outlasted the three attempts of before"
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "Persisting run 'r1' failed; the changes are kept and retried. "
        "(ConnectionError: server closed the connection unexpectedly)"
    ], "one line per outage, no traceback"
    assert not warnings[0].exc_info
    assert "Persisting run 'r1' works again; nothing was lost." in caplog.messages
