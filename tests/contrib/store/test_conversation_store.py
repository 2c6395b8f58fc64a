"""DefaultConversationStore: row-per-message storage, owner scoping, titles, lifecycle."""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, connection
from django.http import HttpRequest
from django.test.utils import CaptureQueriesContext

from django_pydantic_agent.contrib.store.models import (
    StoredAttachment,
    StoredConversation,
    StoredMessage,
)
from django_pydantic_agent.contrib.store.rows import PLAIN_WIRE, saved_wire
from django_pydantic_agent.contrib.store.stores import DEFAULT_LIST_LIMIT, DefaultConversationStore
from django_pydantic_agent.persistence import AnonymousOperationError, Conversation, StoreLimitError
from tests.contrib.store.conftest import race_to_the_quota

pytestmark = pytest.mark.django_db


def user_msg(i: int, text: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": f"m{i}", "role": "user", "content": text or f"question {i}", **extra}


def bot_msg(i: int, text: str | None = None) -> dict[str, Any]:
    return {"id": f"m{i}", "role": "assistant", "content": text or f"answer {i}"}


@pytest.fixture
def store() -> DefaultConversationStore:
    return DefaultConversationStore()


def save(store: DefaultConversationStore, owner: str, thread: str, messages: list[Any]) -> None:
    store._store(Conversation(thread_id=thread, messages=messages), owner)


def test_round_trip_keeps_ids_extra_fields_and_order(store: DefaultConversationStore) -> None:
    messages = [
        user_msg(0, attachments=[{"id": "x", "name": "a.pdf"}], metadata={"k": [1, 2]}),
        {"id": "tc", "role": "assistant", "toolCalls": [{"id": "c1", "type": "function"}]},
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "42"},
        bot_msg(3),
    ]
    save(store, "1", "t", messages)

    loaded = DefaultConversationStore()._fetch("t", "1")

    assert loaded is not None
    assert loaded.messages == messages
    assert loaded.thread_id == "t"
    assert loaded.owner_id == "1"
    # One row per record: the tool result is the assistant's call's, in its row.
    rows = list(StoredMessage.objects.order_by("position"))
    assert [(r.message_id, r.role, r.content) for r in rows] == [
        ("m0", "user", "question 0"),
        ("tc", "assistant", ""),
        ("m3", "assistant", "answer 3"),
    ]
    assert [(c["tool_call_id"], c["content"]) for c in rows[1].tool_calls] == [("c1", "42")]
    assert rows[0].record["wire_extra"] == {
        "attachments": [{"id": "x", "name": "a.pdf"}],
        "metadata": {"k": [1, 2]},
    }
    assert [saved_wire(r) for r in rows] == [messages[:1], messages[1:3], messages[3:]]


def test_appending_a_message_inserts_one_row_and_rewrites_nothing(
    store: DefaultConversationStore,
) -> None:
    thread = [user_msg(i) if i % 2 == 0 else bot_msg(i) for i in range(200)]
    save(store, "1", "t", thread)

    with CaptureQueriesContext(connection) as ctx:
        save(store, "1", "t", [*thread, user_msg(200)])

    # executemany is logged as "<n> times: <sql>": one statement all the same.
    sql = [re.sub(r"^\d+ TIMES: ", "", q["sql"].upper()) for q in ctx.captured_queries]
    inserts = [s for s in sql if s.startswith("INSERT") and "STOREDMESSAGE" in s]
    message_updates = [s for s in sql if s.startswith("UPDATE") and "STOREDMESSAGE" in s]
    assert len(inserts) == 1
    assert message_updates == []
    assert len(sql) <= 10
    assert StoredMessage.objects.count() == 201


def test_growing_the_last_message_updates_only_its_row(store: DefaultConversationStore) -> None:
    thread = [user_msg(0), bot_msg(1, "Hel")]
    save(store, "1", "t", thread)
    grown_pk = StoredMessage.objects.get(position=1).pk

    with CaptureQueriesContext(connection) as ctx:
        save(store, "1", "t", [user_msg(0), bot_msg(1, "Hello there")])

    updates = [
        q["sql"]
        for q in ctx.captured_queries
        if q["sql"].upper().startswith("UPDATE") and "storedmessage" in q["sql"].lower()
    ]
    assert len(updates) == 1
    grown = StoredMessage.objects.get(pk=grown_pk)
    assert (grown.content, saved_wire(grown)) == ("Hello there", [bot_msg(1, "Hello there")])
    assert store._fetch("t", "1") == Conversation(
        thread_id="t", messages=[user_msg(0), bot_msg(1, "Hello there")], owner_id="1"
    )


def test_shrinking_and_rewriting_history(store: DefaultConversationStore) -> None:
    save(store, "1", "t", [user_msg(0), bot_msg(1), user_msg(2)])
    save(store, "1", "t", [user_msg(0), {"id": "other", "role": "assistant", "content": "x"}])

    loaded = store._fetch("t", "1")
    assert loaded is not None
    assert [m["id"] for m in loaded.messages] == ["m0", "other"]
    assert StoredMessage.objects.count() == 2


def test_saving_an_empty_conversation_keeps_the_thread(store: DefaultConversationStore) -> None:
    save(store, "1", "t", [user_msg(0)])
    save(store, "1", "t", [])

    loaded = store._fetch("t", "1")
    assert loaded is not None
    assert loaded.messages == []
    assert store._exists("t", "1")


def test_title_is_set_once_and_changes_only_by_rename(store: DefaultConversationStore) -> None:
    save(store, "1", "t", [user_msg(0, "  What   is the capital of France?  ")])
    assert StoredConversation.objects.get().title == "What is the capital of France?"

    save(store, "1", "t", [user_msg(0, "Something else entirely"), bot_msg(1, "Paris.")])
    row = StoredConversation.objects.get()
    assert row.title == "What is the capital of France?"
    assert row.preview == "Paris."

    store._rename("t", "  Trip\nplanning ", "1")
    save(store, "1", "t", [user_msg(0, "again")])
    assert StoredConversation.objects.get().title == "Trip planning"


def test_rename_of_missing_or_foreign_thread_is_a_no_op(store: DefaultConversationStore) -> None:
    save(store, "1", "t", [user_msg(0, "mine")])
    store._rename("t", "hijacked", "2")
    store._rename("missing", "x", "1")
    store._rename("x" * 300, "x", "1")
    assert StoredConversation.objects.get().title == "mine"


def test_list_is_owner_scoped_newest_first_with_limit_in_one_query(
    store: DefaultConversationStore,
) -> None:
    for i in range(5):
        save(store, "1", f"t{i}", [user_msg(0, f"thread {i}")])
    save(store, "2", "other", [user_msg(0, "not yours")])
    save(store, "1", "t1", [user_msg(0, "thread 1"), bot_msg(1, "bumped")])

    with CaptureQueriesContext(connection) as ctx:
        metas = store._list("1", 3)

    assert len(ctx.captured_queries) == 1
    assert "LIMIT 3" in ctx.captured_queries[0]["sql"]
    assert [m.thread_id for m in metas] == ["t1", "t4", "t3"]
    assert metas[0].preview == "bumped"
    assert metas[0].title == "thread 1"
    assert metas[0].updated_at is not None
    assert all(m.owner_id == "1" for m in metas)


def test_list_without_limit_uses_the_store_default() -> None:
    store = DefaultConversationStore(list_limit=2)
    for i in range(3):
        save(store, "1", f"t{i}", [user_msg(0)])
    assert len(store._list("1", None)) == 2
    assert DefaultConversationStore().list_limit == DEFAULT_LIST_LIMIT


@pytest.mark.parametrize("bad", [0, -1, True, "10", 1.5])
def test_bad_list_limit_is_refused_at_construction(bad: Any) -> None:
    with pytest.raises(ValueError, match="list_limit="):
        DefaultConversationStore(list_limit=bad)


def test_cross_owner_thread_behaves_like_a_missing_one(store: DefaultConversationStore) -> None:
    save(store, "1", "t", [user_msg(0, "secret")])

    assert store._fetch("t", "2") is None
    assert not store._exists("t", "2")
    store._remove("t", "2")
    assert store._exists("t", "1")

    # The same thread id under another owner is a separate thread, never an overwrite.
    save(store, "2", "t", [user_msg(0, "mine")])
    mine = store._fetch("t", "1")
    assert mine is not None
    assert mine.messages[0]["content"] == "secret"


def test_too_long_thread_ids(store: DefaultConversationStore) -> None:
    long_id = "x" * 256
    with pytest.raises(ValueError, match="thread_id="):
        save(store, "1", long_id, [])
    with pytest.raises(ValueError, match="thread_id="):
        save(store, "1", "", [])
    assert store._fetch(long_id, "1") is None
    assert not store._exists(long_id, "1")
    store._remove(long_id, "1")


def test_odd_messages_are_stored_verbatim(store: DefaultConversationStore) -> None:
    messages: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}, 7]
    save(store, "1", "t", messages)
    loaded = store._fetch("t", "1")
    assert loaded is not None
    assert loaded.messages == messages
    assert StoredConversation.objects.get().title == "hi"


def test_delete_removes_thread_messages_and_attachments_nothing_else_quotes(
    store: DefaultConversationStore,
) -> None:
    only_here = StoredAttachment.objects.create(owner_id="1", name="a")
    shared = StoredAttachment.objects.create(owner_id="1", name="b")
    refs = [{"id": only_here.attachment_id.hex}, {"id": shared.attachment_id.hex}]
    save(store, "1", "t", [user_msg(0, attachments=refs)])
    save(store, "1", "u", [user_msg(0, attachments=[{"id": shared.attachment_id.hex}])])

    store._remove("t", "1")
    store._remove("t", "1")  # idempotent

    assert not StoredConversation.objects.filter(thread_id="t").exists()
    assert StoredMessage.objects.filter(conversation__thread_id="t").count() == 0
    assert list(StoredAttachment.objects.values_list("name", flat=True)) == ["b"]


@pytest.mark.django_db(transaction=True)
async def test_async_api_round_trip(
    request_as: Callable[[Any], HttpRequest], alice: User, bob: User
) -> None:
    store = DefaultConversationStore()
    as_alice, as_bob = request_as(alice), request_as(bob)

    await store.save(
        Conversation(thread_id="t", messages=[user_msg(0, "hi")], owner_id="forged"),
        request=as_alice,
    )

    loaded = await store.load("t", request=as_alice)
    assert loaded is not None
    assert loaded.owner_id == str(alice.pk)
    assert await store.load("t", request=as_bob) is None
    assert await store.exists("t", request=as_alice)
    await store.rename("t", "Renamed", request=as_alice)
    [meta] = await store.list(request=as_alice)
    assert meta.title == "Renamed"
    assert await store.list(request=as_bob) == []
    await store.delete("t", request=as_alice)
    assert not await store.exists("t", request=as_alice)


@pytest.mark.django_db(transaction=True)
async def test_anonymous_is_refused_by_default(
    request_as: Callable[[Any], HttpRequest],
) -> None:
    with pytest.raises(AnonymousOperationError):
        await DefaultConversationStore().load("t", request=request_as(None))


def test_a_concurrent_first_save_updates_the_winners_row(
    store: DefaultConversationStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another worker committed the same thread after our lookup missed it.
    StoredConversation.objects.create(owner_id="1", thread_id="t", title="winner")
    real_lookup = store._locked_row
    calls: list[str] = []

    def stale_first_lookup(thread_id: str, owner_id: str) -> StoredConversation | None:
        calls.append(thread_id)
        return None if len(calls) == 1 else real_lookup(thread_id, owner_id)

    monkeypatch.setattr(store, "_locked_row", stale_first_lookup)

    save(store, "1", "t", [user_msg(0, "second writer")])

    assert calls == ["t", "t"]
    row = StoredConversation.objects.get()
    assert row.title == "winner"
    loaded = store._fetch("t", "1")
    assert loaded is not None
    assert loaded.messages == [user_msg(0, "second writer")]


def test_an_unrelated_integrity_error_is_not_swallowed(
    store: DefaultConversationStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_create(**fields: Any) -> StoredConversation:
        raise IntegrityError("NOT NULL constraint failed")

    monkeypatch.setattr(StoredConversation.objects, "create", broken_create)
    with pytest.raises(IntegrityError):
        save(store, "1", "t", [user_msg(0)])


@pytest.mark.django_db(transaction=True)
def test_concurrent_saves_of_one_thread_serialise(store: DefaultConversationStore) -> None:
    """Two workers racing on one new thread: no IntegrityError, one writer's list wins whole."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from django.db import connections

    barrier = Barrier(2)
    lists = {
        "a": [user_msg(0, "from a"), bot_msg(1, "a" * 50)],
        "b": [user_msg(0, "from b"), bot_msg(1, "b"), user_msg(2, "b again")],
    }

    def worker(name: str) -> None:
        try:
            for _ in range(10):
                barrier.wait()
                save(store, "1", f"race-{_}", lists[name])
        finally:
            connections.close_all()

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(worker, name) for name in lists]:
            future.result()

    assert StoredConversation.objects.count() == 10
    for i in range(10):
        loaded = store._fetch(f"race-{i}", "1")
        assert loaded is not None
        assert loaded.messages in (lists["a"], lists["b"])


UNSTORABLE = [
    pytest.param(user_msg(1, "a\u0000b"), "contains a NUL character", id="nul-in-text"),
    pytest.param({"id": "m1", "role": "user\u0000"}, "contains a NUL character", id="nul-in-role"),
    pytest.param(
        user_msg(1, metadata={"k\u0000": "v"}), "contains a NUL character", id="nul-in-key"
    ),
    pytest.param(None, "is null", id="none-message"),
    pytest.param(user_msg(1, n=float("inf")), "contains the non-finite number inf", id="infinity"),
    pytest.param(
        user_msg(1, n=[{"x": float("nan")}]), "contains the non-finite number nan", id="nan"
    ),
]


@pytest.mark.parametrize(("bad", "reason"), UNSTORABLE)
def test_an_unstorable_message_is_refused_before_anything_is_written(
    store: DefaultConversationStore, bad: Any, reason: str
) -> None:
    """Regression: PostgreSQL raised DataError for NUL, NOT NULL failed for None, and SQLite
    stored NaN/Infinity that no JSON reader parses; none of them was a ``StoreError``."""
    from django_pydantic_agent.agui.errors import Refusal
    from django_pydantic_agent.contrib.store.stores import UnstorableMessageError
    from django_pydantic_agent.persistence import StoreError

    # A new thread: no row may be created.
    with pytest.raises(UnstorableMessageError, match=rf"^Message 1 of the conversation {reason}"):
        save(store, "1", "fresh", [user_msg(0), bad])
    assert not StoredConversation.objects.exists()

    # An existing thread: it keeps its messages, preview and timestamp.
    save(store, "1", "t", [user_msg(0, "kept")])
    before = StoredConversation.objects.values_list("preview", "updated_at").get()
    with pytest.raises(UnstorableMessageError) as caught:
        save(store, "1", "t", [user_msg(0, "changed"), bad, bot_msg(2)])

    assert caught.value.index == 1
    assert isinstance(caught.value, StoreError)
    assert isinstance(caught.value, ValueError)
    assert "nothing was saved" in str(caught.value)
    assert Refusal.of_store(caught.value, store="conversation").status == 409
    assert StoredConversation.objects.values_list("preview", "updated_at").get() == before
    loaded = store._fetch("t", "1")
    assert loaded is not None
    assert loaded.messages == [user_msg(0, "kept")]


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(user_msg(20, "a\u0000b"), id="nul-in-text"),
        pytest.param({"id": "m\u000020", "role": "user", "content": "x"}, id="nul-in-id"),
    ],
)
def test_a_nul_in_a_plain_message_of_a_long_list_is_refused(
    store: DefaultConversationStore, bad: dict[str, Any]
) -> None:
    # Plain messages (exactly id, role and text) are checked for a NUL alone, not encoded.
    from django_pydantic_agent.contrib.store.stores import UnstorableMessageError

    thread = [user_msg(i) if i % 2 == 0 else bot_msg(i) for i in range(40)]
    save(store, "1", "t", thread[:10])
    refused = r"^Message 20 of the conversation contains a NUL"
    for messages in ([*thread[:20], bad, *thread[21:]], [*thread[:10], *thread[10:20], bad]):
        with pytest.raises(UnstorableMessageError, match=refused):
            save(store, "1", "t", messages)
        with pytest.raises(UnstorableMessageError, match=refused):
            save(store, "1", "fresh", messages)
    loaded = store._fetch("t", "1")
    assert loaded is not None
    assert loaded.messages == thread[:10]
    assert store._fetch("fresh", "1") is None


def test_escaped_nul_text_and_finite_numbers_are_stored(store: DefaultConversationStore) -> None:
    messages = [user_msg(0, "a literal \\u0000 is six characters", n=1.5, m=-0.0)]
    save(store, "1", "t", messages)
    loaded = store._fetch("t", "1")
    assert loaded is not None
    assert loaded.messages == messages


def test_a_rename_with_a_nul_character_drops_it(store: DefaultConversationStore) -> None:
    """Regression: PostgreSQL raised DataError; titles are normalised text anyway."""
    save(store, "1", "t", [user_msg(0)])
    store._rename("t", "Trip\u0000 plans", "1")
    assert StoredConversation.objects.get().title == "Trip plans"


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "10"])
def test_a_bad_thread_quota_is_refused_at_construction(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"^max_threads_per_owner={bad!r} is not valid"):
        DefaultConversationStore(max_threads_per_owner=bad)


def test_the_thread_quota_refuses_a_new_thread_and_writes_nothing() -> None:
    store = DefaultConversationStore(max_threads_per_owner=2)
    save(store, "1", "a", [user_msg(0)])
    save(store, "1", "b", [user_msg(0)])

    with pytest.raises(StoreLimitError) as refused:
        save(store, "1", "c", [user_msg(0)])

    assert str(refused.value) == (
        "This conversation store keeps at most 2 threads per owner "
        "(max_threads_per_owner=2), and that many are stored already: delete a thread to "
        "start a new one."
    )
    assert sorted(StoredConversation.objects.values_list("thread_id", flat=True)) == ["a", "b"]
    assert StoredMessage.objects.count() == 2
    save(store, "1", "a", [user_msg(0), bot_msg(1)])  # an existing thread still grows
    save(store, "2", "c", [user_msg(0)])  # the quota is per owner
    store._remove("a", "1")
    save(store, "1", "c", [user_msg(0)])  # room again after a deletion
    assert sorted(meta.thread_id for meta in store._list("1", None)) == ["b", "c"]


def test_a_first_save_that_lost_the_race_for_its_own_thread_is_not_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread appeared while waiting for the owner lock: saving it creates nothing new."""
    store = DefaultConversationStore(max_threads_per_owner=1)
    real_lookup = store._locked_row
    calls: list[str] = []

    def stale_first_lookup(thread_id: str, owner_id: str) -> StoredConversation | None:
        calls.append(thread_id)
        if len(calls) == 1:
            StoredConversation.objects.create(owner_id=owner_id, thread_id=thread_id)
            return None
        return real_lookup(thread_id, owner_id)

    monkeypatch.setattr(store, "_locked_row", stale_first_lookup)
    save(store, "1", "t", [user_msg(0)])

    assert calls == ["t", "t"]
    loaded = store._fetch("t", "1")
    assert loaded is not None
    assert loaded.messages == [user_msg(0)]


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_saves_never_overshoot_the_thread_quota() -> None:
    store = DefaultConversationStore(max_threads_per_owner=3)
    outcomes = race_to_the_quota(lambda i: save(store, "1", f"thread-{i}", [user_msg(0)]))

    assert outcomes == ["refused"] * 5 + ["saved"] * 3
    assert StoredConversation.objects.filter(owner_id="1").count() == 3


@pytest.mark.django_db(transaction=True)
def test_two_tabs_appending_to_an_existing_thread_serialise() -> None:
    """Both read the stored rows, then both write: the row lock makes the second re-read.

    Without the lock both would diff against the same rows and INSERT the same position, and
    the second would fail with an IntegrityError. Each tab waits (up to a second) at a barrier
    between its read and its write, so without the lock they are sure to overlap.
    """
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier, BrokenBarrierError

    from django.db import connections

    barrier = Barrier(2)

    class Tab(DefaultConversationStore):
        def _locked_row(self, thread_id: str, owner_id: str) -> Any:
            row = super()._locked_row(thread_id, owner_id)
            # A broken barrier means the other tab is waiting for the lock: go on.
            with suppress(BrokenBarrierError):
                barrier.wait(timeout=1)
            return row

    history = [user_msg(0), bot_msg(1)]
    save(DefaultConversationStore(), "1", "t", history)
    tabs = {
        "a": [*history, user_msg(2, "from tab a")],
        "b": [*history, user_msg(2, "from tab b"), bot_msg(3, "answer in b")],
    }

    def worker(name: str) -> None:
        try:
            save(Tab(), "1", "t", tabs[name])
        finally:
            connections.close_all()

    with ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(worker, name) for name in tabs]:
            future.result()  # re-raises an IntegrityError from either tab

    loaded = DefaultConversationStore()._fetch("t", "1")
    assert loaded is not None
    assert loaded.messages in (tabs["a"], tabs["b"])
    assert StoredMessage.objects.count() == len(loaded.messages)


@pytest.mark.urls("tests.contrib.store.urls")
@pytest.mark.django_db(transaction=True)
async def test_a_run_on_a_thread_over_the_quota_is_a_413_naming_the_limit(alice: User) -> None:
    from tests.agui.conftest import logged_in, run_body, sse_events

    async with await logged_in(alice) as http:
        first = await http.post("/quota/", json=run_body(thread_id="a", run_id="r1"))
        again = await http.post("/quota/", json=run_body(thread_id="a", run_id="r2"))
        second = await http.post("/quota/", json=run_body(thread_id="b", run_id="r3"))
        listing = (await http.get("/quota/threads/")).json()["threads"]
    assert sse_events(first.text)[-1]["type"] == "RUN_FINISHED"
    assert sse_events(again.text)[-1]["type"] == "RUN_FINISHED"  # an existing thread grows
    # Refused before streaming: a JSON 413, not a stream that ends in RUN_ERROR.
    assert second.status_code == 413
    assert second.headers["content-type"] == "application/json"
    assert "at most 1 thread per owner (max_threads_per_owner=1)" in second.json()["error"]
    assert [thread["threadId"] for thread in listing] == ["a"]


def test_a_plain_message_keeps_its_text_once_and_any_other_shape_verbatim(
    store: DefaultConversationStore,
) -> None:
    """A message that is exactly ``{"id", "role", "content"}`` is rebuilt from its columns;
    another key order, an extra key or a long id is kept as sent, and all load back as sent."""
    reordered = {"role": "user", "content": "b", "id": "m1"}
    extra = {"id": "m2", "role": "assistant", "content": "c", "metadata": {"k": 1}}
    long_id = {"id": "x" * 300, "role": "user", "content": "d"}
    thread = [user_msg(0), reordered, extra, long_id, bot_msg(4, 'quote " and \\ and é')]
    save(store, "1", "t", thread)

    raw = dict(StoredMessage.objects.values_list("position", "wire"))
    assert [raw[p] for p in range(5)] == [PLAIN_WIRE, [reordered], [extra], [long_id], PLAIN_WIRE]
    assert StoredMessage.objects.get(position=0).content == "question 0"
    loaded = store._fetch("t", "1")
    assert loaded is not None
    assert loaded.messages == thread
    assert [list(m) for m in loaded.messages] == [list(m) for m in thread]  # key order too


def test_a_client_sending_a_saved_uuid_for_another_message_cannot_make_two_rows_share_it(
    store: DefaultConversationStore,
) -> None:
    """The uuids of saved messages are derived; one a client sends as bookkeeping is re-derived
    for its position, even when it equals a derived one (else two rows would share a uuid)."""
    save(store, "1", "t", [user_msg(0)])
    taken = str(StoredMessage.objects.get(position=0).message_uuid)
    forged = {**bot_msg(1), "chatHistory": {"uuid": taken}}
    thread = [user_msg(0), forged, {**user_msg(2), "chatHistory": {"uuid": taken}}]

    save(store, "1", "t", thread)

    uuids = list(StoredMessage.objects.values_list("message_uuid", flat=True))
    assert len(set(uuids)) == len(uuids) == 3
    assert store._fetch("t", "1") == Conversation(thread_id="t", messages=thread, owner_id="1")
