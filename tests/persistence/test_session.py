"""DjangoSessionConversationStore: the contract, plus streaming saves, limits and JSON safety."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import import_module
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.contrib.sessions.backends.base import UpdateError
from django.contrib.sessions.models import Session
from django.core.exceptions import ImproperlyConfigured
from django.test import AsyncClient, RequestFactory

from django_pydantic_agent.chat_history.records import ChatCreate, MessageCreate
from django_pydantic_agent.persistence import (
    Conversation,
    ConversationStore,
    DjangoSessionConversationStore,
    StoreError,
    StoreLimitError,
    ensure_session_key,
    repositories_for,
)
from django_pydantic_agent.testing import (
    ConversationStoreContract,
    ScopedConversationStoreContract,
    StoreActors,
)

SESSION_KEY = "django_pydantic_agent_conversations"


class TestDjangoSessionConversationStoreContract(ConversationStoreContract):
    def make_store(self) -> ConversationStore:
        return DjangoSessionConversationStore()


class TestScopedDjangoSessionConversationStoreContract(ScopedConversationStoreContract):
    def make_inner_store(self) -> ConversationStore:
        return DjangoSessionConversationStore()


def _conversation(thread_id: str, text: str = "hello") -> Conversation:
    return Conversation(
        thread_id=thread_id, messages=[{"id": f"{thread_id}-m", "role": "user", "content": text}]
    )


def _stored(actors: StoreActors, actor: str) -> object:
    """What the session backend holds for ``actor``, read straight from storage."""
    session = import_module(settings.SESSION_ENGINE).SessionStore(actors.session_key(actor))
    return session.get(SESSION_KEY)


# -- regression: the predecessor lost saves made while a response was streaming ----------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.persistence.urls")
async def test_a_save_made_while_streaming_is_persisted() -> None:
    client = AsyncClient()
    response = await client.get("/stream/")
    assert response.status_code == 200
    # The cookie went out with the headers, before anything was saved.
    assert settings.SESSION_COOKIE_NAME in response.cookies
    body = b"".join([chunk async for chunk in response.streaming_content])  # type: ignore[attr-defined]
    assert body.endswith(b"finished\n\n")

    listed = await client.get("/threads/")
    assert listed.json() == {"threads": [{"id": "streamed", "title": "saved while streaming"}]}


# -- limits ---------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_thread_count_limit_refuses_a_new_thread_and_keeps_the_old(
    actors: StoreActors,
) -> None:
    store = DjangoSessionConversationStore(max_threads=2)
    for thread_id in ("t1", "t2"):
        await store.save(_conversation(thread_id), request=actors.request("alice"))
    with pytest.raises(StoreLimitError, match=re.escape("'t3'")) as raised:
        await store.save(_conversation("t3"), request=actors.request("alice"))
    assert "max_threads=2" in str(raised.value)
    assert isinstance(raised.value, StoreError)
    # Updating an existing thread is still fine, and nothing was half-written.
    await store.save(_conversation("t1", "updated"), request=actors.request("alice"))
    ids = [row.thread_id for row in await store.list(request=actors.request("alice"))]
    assert ids == ["t1", "t2"]


@pytest.mark.django_db(transaction=True)
async def test_byte_limit_refuses_an_oversized_save_and_writes_nothing(
    actors: StoreActors,
) -> None:
    store = DjangoSessionConversationStore(max_bytes=600)
    await store.save(_conversation("small"), request=actors.request("alice"))
    with pytest.raises(StoreLimitError, match="max_bytes=600"):
        await store.save(_conversation("big", "x" * 1000), request=actors.request("alice"))
    stored = await sync_to_async(_stored)(actors, "alice")
    assert isinstance(stored, dict)
    assert list(stored) == ["small"]


async def test_a_rename_cannot_grow_the_session_past_its_byte_limit(
    actors: StoreActors,
) -> None:
    store = DjangoSessionConversationStore(max_bytes=600)
    await store.save(_conversation("t1"), request=actors.request("alice"))
    with pytest.raises(StoreLimitError, match="rename conversation 't1'"):
        await store.rename("t1", "x" * 1000, request=actors.request("alice"))
    [row] = await store.list(request=actors.request("alice"))
    assert row.title == "hello"


@pytest.mark.django_db(transaction=True)
async def test_limits_are_per_session(actors: StoreActors) -> None:
    store = DjangoSessionConversationStore(max_threads=1)
    await store.save(_conversation("t1"), request=actors.request("alice"))
    await store.save(_conversation("t1"), request=actors.request("anon1"))
    with pytest.raises(StoreLimitError):
        await store.save(_conversation("t2"), request=actors.request("alice"))


# -- JSON safety and odd session contents --------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_non_json_messages_are_refused_by_name(actors: StoreActors) -> None:
    store = DjangoSessionConversationStore()
    bad = Conversation(thread_id="t-bad", messages=[{"content": object()}])
    with pytest.raises(TypeError, match="'t-bad'"):
        await store.save(bad, request=actors.request("alice"))
    assert await store.exists("t-bad", request=actors.request("alice")) is False


@pytest.mark.django_db(transaction=True)
async def test_stored_messages_are_plain_json(actors: StoreActors) -> None:
    store = DjangoSessionConversationStore()
    conversation = Conversation(
        thread_id="t1", messages=[{"id": "m1", "role": "user", "content": ("a", "b")}]
    )
    await store.save(conversation, request=actors.request("alice"))
    loaded = await store.load("t1", request=actors.request("alice"))
    assert loaded is not None
    assert loaded.messages == [{"id": "m1", "role": "user", "content": ["a", "b"]}]


@pytest.mark.django_db(transaction=True)
async def test_corrupt_session_contents_read_as_empty_or_skipped(actors: StoreActors) -> None:
    def plant(value: object) -> None:
        session = import_module(settings.SESSION_ENGINE).SessionStore(actors.session_key("alice"))
        session[SESSION_KEY] = value
        session.save()

    store = DjangoSessionConversationStore()
    await sync_to_async(plant)(["not", "a", "dict"])
    assert await store.list(request=actors.request("alice")) == []

    await sync_to_async(plant)(
        {
            "ok": {"messages": [], "updated_at": "2024-05-01T10:00:00+00:00"},
            "no-time": {"messages": "oops", "updated_at": "yesterday"},
            "junk": "not an entry",
            "never": {"messages": []},
        }
    )
    rows = await store.list(request=actors.request("alice"))
    assert [(row.thread_id, row.title) for row in rows] == [
        ("ok", "New conversation"),
        ("no-time", "New conversation"),
        ("never", "New conversation"),
    ]
    assert rows[1].updated_at is None
    assert rows[2].updated_at is None
    loaded = await store.load("no-time", request=actors.request("alice"))
    assert loaded is not None
    assert loaded.messages == []


@pytest.mark.django_db(transaction=True)
async def test_owner_id_is_kept_as_given(actors: StoreActors) -> None:
    store = DjangoSessionConversationStore()
    await store.save(
        Conversation(thread_id="t1", messages=[], owner_id="42"), request=actors.request("alice")
    )
    loaded = await store.load("t1", request=actors.request("alice"))
    assert loaded is not None
    assert loaded.owner_id == "42"
    [row] = await store.list(request=actors.request("alice"))
    assert row.owner_id == "42"


@pytest.mark.django_db(transaction=True)
async def test_two_session_keys_do_not_share_threads(actors: StoreActors) -> None:
    first = DjangoSessionConversationStore(session_key="first")
    second = DjangoSessionConversationStore(session_key="second")
    await first.save(_conversation("t1"), request=actors.request("alice"))
    assert await second.exists("t1", request=actors.request("alice")) is False


@pytest.mark.django_db(transaction=True)
async def test_a_session_ended_mid_request_is_a_store_error(actors: StoreActors) -> None:
    store = DjangoSessionConversationStore()
    request = actors.request("alice")
    assert await store.load("t1", request=request) is None  # the session is loaded
    await Session.objects.filter(session_key=actors.session_key("alice")).adelete()
    with pytest.raises(StoreError, match="session ended") as raised:
        await store.save(_conversation("t1"), request=request)
    assert not isinstance(raised.value, StoreLimitError)


@pytest.mark.django_db(transaction=True)
async def test_a_save_without_a_session_is_refused_and_creates_none() -> None:
    request = RequestFactory().get("/")
    request.session = import_module(settings.SESSION_ENGINE).SessionStore("forged" * 6)
    with pytest.raises(StoreError, match="ensure_session_key"):
        await DjangoSessionConversationStore().save(_conversation("t1"), request=request)
    assert await Session.objects.acount() == 0


# -- requests without a session ---------------------------------------------


async def test_a_request_without_a_session_reads_empty_and_cannot_write() -> None:
    request = RequestFactory().get("/")
    store = DjangoSessionConversationStore()
    assert await store.load("t1", request=request) is None
    assert await store.list(request=request) == []
    with pytest.raises(ImproperlyConfigured, match="SessionMiddleware"):
        await store.save(_conversation("t1"), request=request)


# -- construction ---------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_threads": 0}, "max_threads=0"),
        ({"max_threads": True}, "max_threads=True"),
        ({"max_bytes": "1000"}, "max_bytes='1000'"),
        ({"session_key": ""}, "session_key=''"),
    ],
)
def test_misconfiguration_fails_at_construction(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        DjangoSessionConversationStore(**kwargs)  # type: ignore[arg-type]


def test_limits_are_visible() -> None:
    store = DjangoSessionConversationStore(max_threads=3, max_bytes=4096)
    assert (store.max_threads, store.max_bytes) == (3, 4096)
    assert repr(store) == (
        "DjangoSessionConversationStore(session_key='django_pydantic_agent_conversations', "
        "max_threads=3, max_bytes=4096)"
    )


# -- regression: a write must not put back a session loaded before another tab changed it ------


@pytest.mark.django_db(transaction=True)
async def test_a_thread_deleted_in_another_tab_stays_deleted(actors: StoreActors) -> None:
    store = DjangoSessionConversationStore()
    await store.save(_conversation("B"), request=actors.request("alice"))
    # Tab 1 starts a long run: its request loads the session (B is there).
    long_run = actors.request("alice")
    assert await store.exists("B", request=long_run) is True
    # Tab 2, same session cookie, deletes B meanwhile.
    await store.delete("B", request=actors.request("alice"))
    # Tab 1's run finishes and saves its own thread.
    await store.save(_conversation("A"), request=long_run)
    # Nor will SessionMiddleware write the run's older copy of the session back afterwards.
    assert long_run.session.modified is False

    stored = await sync_to_async(_stored)(actors, "alice")
    assert isinstance(stored, dict)
    assert sorted(stored) == ["A"]
    assert await store.exists("B", request=actors.request("alice")) is False


@pytest.mark.django_db(transaction=True)
async def test_a_concurrent_runs_thread_is_not_lost(actors: StoreActors) -> None:
    store = DjangoSessionConversationStore()
    first = actors.request("alice")
    second = actors.request("alice")
    # Both tabs load the (empty) session at the start of their run.
    assert await store.list(request=first) == []
    assert await store.list(request=second) == []
    await store.save(_conversation("one"), request=first)
    await store.save(_conversation("two"), request=second)
    await store.rename("one", "First tab", request=second)

    rows = await store.list(request=actors.request("alice"))
    assert {(row.thread_id, row.title) for row in rows} == {("one", "First tab"), ("two", "hello")}
    # A tab's own request reads what its last write left stored, not its start-of-request copy.
    assert {row.thread_id for row in await store.list(request=second)} == {"one", "two"}


@pytest.mark.django_db(transaction=True)
async def test_a_rename_does_not_bring_back_a_thread_deleted_elsewhere(
    actors: StoreActors,
) -> None:
    store = DjangoSessionConversationStore()
    await store.save(_conversation("B"), request=actors.request("alice"))
    stale = actors.request("alice")
    assert await store.exists("B", request=stale) is True
    await store.delete("B", request=actors.request("alice"))
    await store.rename("B", "Renamed", request=stale)
    assert await sync_to_async(_stored)(actors, "alice") == {}
    await store.delete("B", request=stale)  # already gone: a no-op, not an error
    assert await sync_to_async(_stored)(actors, "alice") == {}


@pytest.mark.django_db(transaction=True)
async def test_delete_and_rename_without_a_stored_session_are_no_ops(actors: StoreActors) -> None:
    store = DjangoSessionConversationStore()
    no_middleware = RequestFactory().get("/")
    forged = RequestFactory().get("/")
    forged.session = import_module(settings.SESSION_ENGINE).SessionStore("forged" * 6)
    ended = actors.request("alice")
    await store.save(_conversation("t1"), request=ended)
    await Session.objects.filter(session_key=actors.session_key("alice")).adelete()
    for request in (no_middleware, forged, ended):
        await store.delete("t1", request=request)
        await store.rename("t1", "T", request=request)
    assert await Session.objects.acount() == 3  # nothing created; bob, anon1, anon2 remain


@pytest.mark.django_db(transaction=True)
async def test_a_session_ended_between_reload_and_save_is_a_store_error(
    actors: StoreActors, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = import_module(settings.SESSION_ENGINE).SessionStore
    real_load = engine.load
    loads: list[str] = []

    def load_then_logout_elsewhere(self: object) -> Any:
        data = real_load(self)
        loads.append("load")
        if len(loads) == 2:  # the store's reload: the row goes right after it was read
            Session.objects.filter(session_key=actors.session_key("alice")).delete()
        return data

    monkeypatch.setattr(engine, "load", load_then_logout_elsewhere)
    store = DjangoSessionConversationStore()
    with pytest.raises(StoreError, match="session ended") as raised:
        await store.save(_conversation("t1"), request=actors.request("alice"))
    assert len(loads) == 2
    assert isinstance(raised.value.__cause__, UpdateError)


@pytest.mark.django_db(transaction=True)
async def test_signed_cookie_sessions_still_get_their_new_cookie_from_the_middleware() -> None:
    from django.contrib.sessions.backends.signed_cookies import SessionStore as CookieStore

    first = CookieStore()
    first["greeting"] = "hi"
    first.save()
    request = RequestFactory().get("/")
    request.session = CookieStore(first.session_key)
    await DjangoSessionConversationStore().save(_conversation("t1"), request=request)
    # The cookie is the data, so SessionMiddleware must send a new one after the view.
    assert request.session.modified
    request.session.save()
    after = CookieStore(request.session.session_key)
    assert sorted(after[SESSION_KEY]) == ["t1"]
    assert after["greeting"] == "hi"


# -- regression: a stale copy of the whole session saved over the store's entry ---------------


def _save_stale_copy(session_key: str, data: dict[str, Any]) -> None:
    """What SessionMiddleware does with a request's copy loaded (or created) before a write."""
    copy = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    copy._session_cache = dict(data)
    copy.save()


class MiddlewareSavesBeforeRename(DjangoSessionConversationStore):
    """Replays SessionMiddleware's save of the request's copy of a session created for the
    request, as it was before the run's first write, landing after that write (here: just
    before ``create_chat``'s rename)."""

    stale: dict[str, Any]

    async def rename(self, thread_id: str, title: str, *, request: Any) -> None:
        await sync_to_async(_save_stale_copy)(request.session.session_key, self.stale)
        await super().rename(thread_id, title, request=request)


@pytest.mark.django_db(transaction=True)
async def test_a_middleware_save_of_the_new_session_does_not_lose_the_new_thread() -> None:
    from django.contrib.auth.models import AnonymousUser

    store = MiddlewareSavesBeforeRename()
    request = RequestFactory().post("/agent/")
    request.session = import_module(settings.SESSION_ENGINE).SessionStore()
    request.user = AnonymousUser()
    await sync_to_async(ensure_session_key)(request)  # marks the session modified
    store.stale = await sync_to_async(lambda: dict(request.session.items()))()
    chats, messages = await repositories_for(store, request=request)
    chat = await chats.create_chat(
        ChatCreate(thread_id="first", name="First", user_uuid=chats.user_uuid)
    )
    await messages.create_message(
        MessageCreate(chat_uuid=chat.chat_uuid, role="user", content="Hello")
    )

    fresh = import_module(settings.SESSION_ENGINE).SessionStore(request.session.session_key)
    stored = await sync_to_async(fresh.get)(SESSION_KEY)
    assert sorted(stored) == ["first"]
    assert stored["first"]["title"] == "First"
    assert [m["content"] for m in stored["first"]["messages"]] == ["Hello"]


@pytest.mark.django_db(transaction=True)
async def test_a_stale_copy_saved_after_the_last_write_is_repaired_by_the_next_read(
    actors: StoreActors,
) -> None:
    store = DjangoSessionConversationStore()
    # Another request (SESSION_SAVE_EVERY_REQUEST=True) loaded the session before the run wrote.
    other = actors.request("alice")
    before = await sync_to_async(lambda: dict(other.session.items()))()
    run = actors.request("alice")
    await store.save(_conversation("A"), request=run)
    await sync_to_async(_save_stale_copy)(actors.session_key("alice"), before)
    assert await sync_to_async(_stored)(actors, "alice") is None

    assert await store.exists("A", request=run) is True  # and it is written back
    stored = await sync_to_async(_stored)(actors, "alice")
    assert isinstance(stored, dict)
    assert sorted(stored) == ["A"]
    assert await store.exists("A", request=actors.request("alice")) is True


@pytest.mark.django_db(transaction=True)
async def test_the_middleware_save_of_a_request_that_used_the_store_keeps_newer_writes(
    actors: StoreActors,
) -> None:
    # A streaming run's view reads the thread, returns, and SessionMiddleware saves the
    # request's copy; the run's writes may land before that save does (it waited for a
    # database lock after encoding, or another tab wrote). A request that comes later has no
    # newer copy to restore from, so the save itself must not take the threads back.
    store = DjangoSessionConversationStore()
    view = actors.request("alice")
    assert await store.exists("A", request=view) is False
    await store.save(_conversation("A"), request=actors.request("alice"))
    await store.save(_conversation("B"), request=actors.request("alice"))

    def middleware_save() -> None:
        view.session["unrelated"] = "kept"  # the view's own change to the session
        view.session.save()

    await sync_to_async(middleware_save)()
    later = actors.request("alice")
    assert await store.exists("A", request=later) is True
    assert await store.exists("B", request=later) is True
    stored = await sync_to_async(_stored)(actors, "alice")
    assert isinstance(stored, dict)
    assert sorted(stored) == ["A", "B"]
    again = import_module(settings.SESSION_ENGINE).SessionStore(actors.session_key("alice"))
    assert await sync_to_async(again.get)("unrelated") == "kept"

    # A deletion elsewhere is newer too: the save does not bring the thread back.
    await store.delete("A", request=actors.request("alice"))
    await sync_to_async(view.session.save)()
    assert await store.exists("A", request=actors.request("alice")) is False


@pytest.mark.django_db(transaction=True)
async def test_a_read_sees_a_thread_deleted_in_another_tab(actors: StoreActors) -> None:
    store = DjangoSessionConversationStore()
    await store.save(_conversation("B"), request=actors.request("alice"))
    long_run = actors.request("alice")
    assert await store.exists("B", request=long_run) is True
    await store.delete("B", request=actors.request("alice"))
    # The deletion carries a newer revision: this request's copy of B is not written back.
    assert await store.exists("B", request=long_run) is False
    assert await store.load("B", request=long_run) is None
    assert await store.list(request=long_run) == []
    assert await sync_to_async(_stored)(actors, "alice") == {}


@pytest.mark.django_db(transaction=True)
async def test_sessions_written_by_earlier_versions_read_the_same(actors: StoreActors) -> None:
    # 0.28.3 and earlier stored the threads under the same key, with no revision.
    legacy = {"old": {"messages": [{"id": "m", "role": "user", "content": "hi"}], "title": "Old"}}
    await sync_to_async(_save_stale_copy)(actors.session_key("alice"), {SESSION_KEY: legacy})
    store = DjangoSessionConversationStore()
    request = actors.request("alice")
    assert [(row.thread_id, row.title) for row in await store.list(request=request)] == [
        ("old", "Old")
    ]
    await store.save(_conversation("new"), request=request)
    stored = await sync_to_async(_stored)(actors, "alice")
    assert isinstance(stored, dict)
    assert sorted(stored) == ["new", "old"]
    assert await store.exists("old", request=actors.request("alice")) is True


@pytest.mark.django_db(transaction=True)
def test_two_tabs_writing_at_once_in_one_process_keep_both_threads(
    actors: StoreActors, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = import_module(settings.SESSION_ENGINE).SessionStore
    real_load = engine.load

    def slow_load(self: object) -> Any:
        data = real_load(self)
        time.sleep(0.05)  # widen the window between a reload and its save
        return data

    monkeypatch.setattr(engine, "load", slow_load)
    store = DjangoSessionConversationStore()
    tabs = [actors.request("alice") for _ in range(4)]
    for tab in tabs:
        tab.session.keys()  # each tab's request loads the session when it starts

    def write(index: int) -> None:
        async_to_sync(store.save)(_conversation(f"tab-{index}"), request=tabs[index])

    with ThreadPoolExecutor(max_workers=len(tabs)) as pool:
        list(pool.map(write, range(len(tabs))))
    stored = _stored(actors, "alice")
    assert isinstance(stored, dict)
    assert sorted(stored) == [f"tab-{index}" for index in range(len(tabs))]


@pytest.mark.django_db(transaction=True)
async def test_a_revision_that_is_not_a_counter_counts_as_zero(actors: StoreActors) -> None:
    legacy = {"old": {"messages": []}}
    for revision in ("7", True, -3):
        data = {SESSION_KEY: legacy, f"{SESSION_KEY}:revision": revision}
        await sync_to_async(_save_stale_copy)(actors.session_key("alice"), data)
        request = actors.request("alice")
        await DjangoSessionConversationStore().save(_conversation("new"), request=request)
        stored = import_module(settings.SESSION_ENGINE).SessionStore(actors.session_key("alice"))
        assert await sync_to_async(stored.get)(f"{SESSION_KEY}:revision") == 1
        assert sorted(await sync_to_async(stored.get)(SESSION_KEY)) == ["new", "old"]


@pytest.mark.django_db(transaction=True)
async def test_a_forged_cookie_reads_nothing_and_creates_no_session() -> None:
    request = RequestFactory().get("/")
    request.session = import_module(settings.SESSION_ENGINE).SessionStore("forged" * 6)
    store = DjangoSessionConversationStore()
    assert await store.list(request=request) == []
    assert await store.exists("t1", request=request) is False
    assert await Session.objects.acount() == 0
