"""DefaultConversationStore.save: the prefix hash lets an append or a grown tail skip the diff."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage
from django_pydantic_agent.contrib.store.rows import saved_wire
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import Conversation, UnstorableMessageError

pytestmark = pytest.mark.django_db


def msg(i: int, text: str | None = None) -> dict[str, Any]:
    return {
        "id": f"m{i}",
        "role": "user" if i % 2 == 0 else "assistant",
        "content": text or f"t{i}",
    }


def save(messages: list[Any], thread: str = "t") -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        DefaultConversationStore()._store(Conversation(thread_id=thread, messages=messages), "o")
    # executemany is logged as "<n> times: <sql>": one statement all the same.
    return [re.sub(r"^\d+ times: ", "", q["sql"]) for q in ctx.captured_queries]


def load(thread: str = "t") -> list[Any]:
    found = DefaultConversationStore()._fetch(thread, "o")
    assert found is not None
    return found.messages


def _reads_messages(sql: list[str]) -> bool:
    return any(q.startswith("SELECT") and "storedmessage" in q.lower() for q in sql)


def test_an_append_and_a_grown_tail_read_no_message_row() -> None:
    thread = [msg(i) for i in range(50)]
    save(thread)
    appended = save([*thread, msg(50)])
    assert not _reads_messages(appended)
    assert sum(q.startswith("INSERT") for q in appended) == 1
    grown = save([*thread, msg(50, "t50 and more")])
    assert not _reads_messages(grown)
    assert sum(q.startswith("UPDATE") and "storedmessage" in q for q in grown) == 1
    same = save([*thread, msg(50, "t50 and more")])
    assert not any("storedmessage" in q for q in same)
    assert load() == [*thread, msg(50, "t50 and more")]


def test_an_edit_before_the_tail_is_found_by_comparing_every_row() -> None:
    thread = [msg(i) for i in range(10)]
    save(thread)
    edited = [*thread[:3], msg(3, "changed"), *thread[4:]]
    sql = save(edited)
    assert _reads_messages(sql)
    assert sum(q.startswith("UPDATE") and "storedmessage" in q for q in sql) == 1
    assert not any(q.startswith(("INSERT", "DELETE")) and "storedmessage" in q for q in sql)
    assert load() == edited


def test_keys_in_another_order_are_the_same_message() -> None:
    thread = [msg(i) for i in range(5)]
    save(thread)
    reordered = [dict(reversed(list(m.items()))) for m in thread]
    sql = save(reordered)
    assert not any(q.startswith(("UPDATE", "INSERT")) and "storedmessage" in q for q in sql)
    assert save([*reordered, msg(5)])  # the state now describes the reordered list
    assert load() == [*thread, msg(5)]


def test_shorter_lists_and_empty_lists_drop_rows() -> None:
    thread = [msg(i) for i in range(6)]
    save(thread)
    save(thread[:5])  # the last message went away: fast path
    assert load() == thread[:5]
    save(thread[:2])  # several went away: compared in full
    assert load() == thread[:2]
    save([])
    assert load() == []
    assert StoredConversation.objects.get().save_state == ""
    save(thread)
    assert load() == thread


def test_a_state_that_does_not_parse_or_a_list_that_is_not_json_falls_back() -> None:
    thread = [msg(i) for i in range(3)]
    save(thread)
    StoredConversation.objects.update(save_state="garbage")
    save([*thread, msg(3)])
    assert load() == [*thread, msg(3)]
    # A message the JSON encoder cannot hash (a set) is still compared and refused cleanly.
    with pytest.raises(TypeError):
        save([*thread, {"id": "x", "role": "user", "content": {1, 2}}])
    assert load() == [*thread, msg(3)]
    with pytest.raises(UnstorableMessageError):
        save([*thread, msg(3), {"id": "n", "role": "user", "content": math.nan}])


def test_messages_pickle_cannot_encode_are_compared_in_full() -> None:
    class Local(dict[str, str]):
        """A dict pickle cannot name (its class is local to this test); JSON can encode it."""

    special = Local(id="m1", role="assistant", content="ordered")
    save([msg(0), msg(1)])
    save([msg(0), special])  # the tail cannot be hashed: compared in full, rewritten
    assert StoredConversation.objects.get().save_state == ""
    save([msg(0), special, msg(2)])  # no state to trust: compared in full again
    assert load() == [msg(0), dict(special), msg(2)]
    save([msg(0), dict(special), msg(2), msg(3)])
    assert StoredConversation.objects.get().save_state.startswith("3:3:")  # the last row: m3


def test_messages_that_are_not_objects_are_stored_as_they_are() -> None:
    thread: list[Any] = [msg(0), "a bare string", 42, ["a", "list"]]
    save(thread)
    assert load() == thread
    # Each is kept, verbatim, as an inert record of its own.
    assert [(r.message_id, r.role, saved_wire(r)) for r in StoredMessage.objects.all()] == [
        ("m0", "user", [msg(0)]),
        ("", "activity", ["a bare string"]),
        ("", "activity", [42]),
        ("", "activity", [["a", "list"]]),
    ]
