"""The shared contract suites every conversation and attachment store must pass.

Subclass a contract in a ``test_*.py`` module, name the subclass ``Test...`` and implement
``make_store``; pytest then runs every contract test against your store. Needs pytest,
pytest-django and pytest-asyncio; the tests use a transactional database because stores do
their work in worker threads.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, ClassVar

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.chat_history.records import ChatCreate, MessageCreate
from django_pydantic_agent.chat_history.repositories import StartsBranches
from django_pydantic_agent.persistence.base import (
    AttachmentStore,
    Conversation,
    ConversationStore,
    is_persistent,
    repository_user_uuid,
    wrapped_stores,
)
from django_pydantic_agent.persistence.branching import (
    KeepsBranches,
    activate_branch,
    branch_points,
    fork_thread,
)
from django_pydantic_agent.persistence.features import store_features
from django_pydantic_agent.persistence.listing import (
    ArchiveUnsupportedError,
    ThreadPage,
    ThreadQuery,
    archive_thread,
    find_threads,
)
from django_pydantic_agent.persistence.null import PersistenceDisabledError
from django_pydantic_agent.persistence.owner import AnonymousOperationError, aresolve_owner_uuid
from django_pydantic_agent.persistence.repositories import repositories_for
from django_pydantic_agent.persistence.scoped import ScopedConversationStore
from django_pydantic_agent.persistence.transfer import (
    check_document,
    export_thread,
    import_thread,
)
from django_pydantic_agent.testing.actors import ANONYMOUS_ACTORS, StoreActors

__all__ = [
    "AttachmentStoreContract",
    "ConversationStoreContract",
    "ScopedConversationStoreContract",
    "sample_messages",
]

_contract_marks = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def sample_messages(text: str = "Plan a trip to Lisbon") -> list[dict[str, Any]]:
    """AG-UI wire messages with the details a store must keep: ids, extra fields, parts."""
    return [
        {
            "id": "msg-user-1",
            "role": "user",
            "content": f"  {text}\n please ",
            "attachments": [{"id": "att-1", "name": "map.png", "mime": "image/png", "size": 3}],
        },
        {
            "id": "msg-assistant-1",
            "role": "assistant",
            "content": "Sure \u2014 three days?",
            "toolCalls": [
                {
                    "id": "call-1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"q": "Lisbon"}'},
                }
            ],
        },
        {"id": "msg-tool-1", "role": "tool", "toolCallId": "call-1", "content": "[]"},
        {
            "id": "msg-user-2",
            "role": "user",
            "content": [{"type": "text", "text": "Yes, in May"}],
        },
    ]


class ConversationStoreContract:
    """The ``ConversationStore`` contract. Implement ``make_store``.

    Class flags describe what the store promises:

    - ``serves_anonymous``: anonymous sessions are served (each its own owner); when
      ``False`` every method must raise ``AnonymousOperationError`` for them.
    - ``supports_list``: ``list`` enumerates (else it must return ``[]``).
    - ``supports_rename``: ``rename`` records a title (else it must be a no-op).
    - ``supports_archive``: ``archive`` keeps a flag (else, and on a Null store,
      ``ArchiveUnsupportedError``); ``None`` (the default): as the store's features declare.
    - ``supports_full_text``: a search finds message texts, not only titles; ``None`` (the
      default): as the store's features declare (``persistence.features.store_features``).

    A store whose ``persistent`` flag is ``False`` (a Null store) is held to the stateless
    contract instead: nothing it is given comes back. Override the ``actors`` fixture to build
    requests differently (custom user model, header authentication...).
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = _contract_marks

    serves_anonymous: ClassVar[bool] = True
    supports_list: ClassVar[bool] = True
    supports_rename: ClassVar[bool] = True
    supports_archive: ClassVar[bool | None] = None
    supports_full_text: ClassVar[bool | None] = None

    def make_store(self) -> ConversationStore:
        """Return a new store instance; called more than once per test."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement make_store() returning a ConversationStore."
        )

    @pytest.fixture
    def actors(self) -> StoreActors:
        """Two users and two anonymous sessions (override to build them differently)."""
        return StoreActors.create()

    # -- helpers -----------------------------------------

    def _store(self) -> ConversationStore:
        store = self.make_store()
        assert implements(store, ConversationStore), f"{store!r} is not a ConversationStore"
        return store

    def _owners(self) -> tuple[tuple[str, str], ...]:
        pairs = [("alice", "bob")]
        if self.serves_anonymous:
            pairs.append(ANONYMOUS_ACTORS)
        return tuple(pairs)

    async def _save(self, actors: StoreActors, actor: str, thread_id: str, text: str) -> None:
        conversation = Conversation(thread_id=thread_id, messages=sample_messages(text))
        await self._store().save(conversation, request=actors.request(actor))

    async def _listed_ids(self, actors: StoreActors, actor: str, **kwargs: Any) -> list[str]:
        rows = await self._store().list(request=actors.request(actor), **kwargs)
        return [row.thread_id for row in rows]

    # -- the contract -----------------------------------------

    async def test_is_a_conversation_store(self) -> None:
        assert isinstance(self.make_store(), ConversationStore)

    async def test_round_trip_through_a_fresh_instance(self, actors: StoreActors) -> None:
        messages = sample_messages()
        conversation = Conversation(thread_id="thread-1", messages=messages, owner_id="ignored")
        await self._store().save(conversation, request=actors.request("alice"))

        loaded = await self._store().load("thread-1", request=actors.request("alice"))
        if not is_persistent(self.make_store()):
            assert loaded is None
            return
        assert loaded is not None
        assert loaded.thread_id == "thread-1"
        assert loaded.messages == messages

    async def test_save_replaces_the_whole_conversation(self, actors: StoreActors) -> None:
        await self._save(actors, "alice", "thread-1", "first")
        replacement = sample_messages("second")[:1]
        await self._store().save(
            Conversation(thread_id="thread-1", messages=replacement),
            request=actors.request("alice"),
        )
        loaded = await self._store().load("thread-1", request=actors.request("alice"))
        if not is_persistent(self.make_store()):
            assert loaded is None
            return
        assert loaded is not None
        assert loaded.messages == replacement

    async def test_missing_thread_is_none(self, actors: StoreActors) -> None:
        store = self._store()
        assert await store.load("no-such-thread", request=actors.request("alice")) is None
        assert await store.exists("no-such-thread", request=actors.request("alice")) is False

    async def test_owners_are_isolated(self, actors: StoreActors) -> None:
        persistent = is_persistent(self.make_store())
        for owner, intruder in self._owners():
            await self._save(actors, owner, "shared-id", f"secret of {owner}")
            store = self._store()

            assert await store.load("shared-id", request=actors.request(intruder)) is None
            assert await store.exists("shared-id", request=actors.request(intruder)) is False
            assert "shared-id" not in await self._listed_ids(actors, intruder)

            await store.rename("shared-id", "hijacked", request=actors.request(intruder))
            await store.delete("shared-id", request=actors.request(intruder))
            # The intruder's own thread with the same id is theirs alone.
            await self._save(actors, intruder, "shared-id", f"own of {intruder}")

            loaded = await store.load("shared-id", request=actors.request(owner))
            if not persistent:
                assert loaded is None
                continue
            assert loaded is not None
            assert loaded.messages == sample_messages(f"secret of {owner}")
            if self.supports_list:
                rows = await store.list(request=actors.request(owner))
                assert [row.title for row in rows] == [f"secret of {owner} please"]
            theirs = await store.load("shared-id", request=actors.request(intruder))
            assert theirs is not None
            assert theirs.messages == sample_messages(f"own of {intruder}")

    async def test_a_claimed_owner_id_grants_nothing(self, actors: StoreActors) -> None:
        # Bob names Alice as the owner; the store must still file it under Bob.
        alice_pk = str(actors.user("alice").pk)
        forged = Conversation(thread_id="forged", messages=sample_messages(), owner_id=alice_pk)
        await self._store().save(forged, request=actors.request("bob"))
        store = self._store()
        assert await store.load("forged", request=actors.request("alice")) is None
        assert await store.exists("forged", request=actors.request("alice")) is False
        assert "forged" not in await self._listed_ids(actors, "alice")
        expected = is_persistent(store)
        assert await store.exists("forged", request=actors.request("bob")) is expected

    async def test_anonymous_refused_when_not_served(self, actors: StoreActors) -> None:
        if self.serves_anonymous:
            pytest.skip("This store serves anonymous sessions.")
        store = self._store()
        request = actors.request("anon1")
        conversation = Conversation(thread_id="thread-1", messages=sample_messages())
        calls = [
            store.load("thread-1", request=request),
            store.save(conversation, request=request),
            store.delete("thread-1", request=request),
            store.list(request=request),
            store.exists("thread-1", request=request),
            store.rename("thread-1", "title", request=request),
        ]
        for call in calls:
            with pytest.raises(AnonymousOperationError):
                await call

    async def test_delete_is_idempotent(self, actors: StoreActors) -> None:
        await self._save(actors, "alice", "thread-1", "hello")
        for _ in range(2):
            await self._store().delete("thread-1", request=actors.request("alice"))
        await self._store().delete("never-existed", request=actors.request("alice"))
        store = self._store()
        assert await store.load("thread-1", request=actors.request("alice")) is None
        assert await store.exists("thread-1", request=actors.request("alice")) is False
        assert await self._listed_ids(actors, "alice") == []

    async def test_list_is_most_recent_first_and_limited(self, actors: StoreActors) -> None:
        for thread_id in ("t1", "t2", "t3"):
            await self._save(actors, "alice", thread_id, f"about {thread_id}")
            await asyncio.sleep(0.002)  # distinct timestamps on coarse clocks
        if not (is_persistent(self.make_store()) and self.supports_list):
            assert await self._listed_ids(actors, "alice") == []
            return
        assert await self._listed_ids(actors, "alice") == ["t3", "t2", "t1"]
        assert await self._listed_ids(actors, "alice", limit=2) == ["t3", "t2"]
        await self._save(actors, "alice", "t1", "about t1 again")
        assert await self._listed_ids(actors, "alice") == ["t1", "t3", "t2"]

    async def test_list_rows_carry_title_and_preview(self, actors: StoreActors) -> None:
        await self._save(actors, "alice", "thread-1", "Plan a trip to Lisbon")
        rows = await self._store().list(request=actors.request("alice"))
        if not (is_persistent(self.make_store()) and self.supports_list):
            assert rows == []
            return
        [row] = rows
        assert row.thread_id == "thread-1"
        assert row.title == "Plan a trip to Lisbon please"
        assert row.preview == "Yes, in May"
        assert not hasattr(row, "messages")

    async def test_list_refuses_a_bad_limit(self, actors: StoreActors) -> None:
        for bad in (0, -1, True, "5"):
            with pytest.raises(ValueError, match="limit"):
                await self._store().list(request=actors.request("alice"), limit=bad)  # type: ignore[arg-type]

    async def test_exists_loads_no_message_bodies(
        self, actors: StoreActors, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await self._save(actors, "alice", "thread-1", "hello")
        store = self._store()

        def forbidden(*args: object, **kwargs: object) -> None:  # pragma: no cover
            raise AssertionError("exists() loaded a conversation body")

        for layer in wrapped_stores(store):
            for name in ("load", "_fetch"):
                if hasattr(layer, name):
                    monkeypatch.setattr(layer, name, forbidden)
        expected = is_persistent(store)
        assert await store.exists("thread-1", request=actors.request("alice")) is expected
        assert await store.exists("thread-2", request=actors.request("alice")) is False

    async def test_rename_sets_the_title(self, actors: StoreActors) -> None:
        await self._save(actors, "alice", "thread-1", "hello")
        await self._store().rename("thread-1", "Lisbon, May", request=actors.request("alice"))
        # A later save keeps the recorded title.
        await self._save(actors, "alice", "thread-1", "hello again")
        rows = await self._store().list(request=actors.request("alice"))
        if not (is_persistent(self.make_store()) and self.supports_list):
            assert rows == []
            return
        [row] = rows
        expected = "Lisbon, May" if self.supports_rename else "hello again please"
        assert row.title == expected

    async def test_an_earlier_request_undoes_no_change_made_since(
        self, actors: StoreActors
    ) -> None:
        # Two tabs of one browser: a long run's request was loaded before the other tab
        # deleted one thread and saved another; the run's save must keep both changes.
        await self._save(actors, "alice", "deleted-elsewhere", "old")
        store = self._store()
        long_run = actors.request("alice")
        await store.exists("deleted-elsewhere", request=long_run)
        await store.delete("deleted-elsewhere", request=actors.request("alice"))
        await self._save(actors, "alice", "saved-elsewhere", "other tab")
        run = Conversation(thread_id="the-run", messages=sample_messages("the run"))
        await store.save(run, request=long_run)

        present = {
            thread_id: await self._store().exists(thread_id, request=actors.request("alice"))
            for thread_id in ("deleted-elsewhere", "saved-elsewhere", "the-run")
        }
        persistent = is_persistent(self.make_store())
        assert present == {
            "deleted-elsewhere": False,
            "saved-elsewhere": persistent,
            "the-run": persistent,
        }

    async def test_rename_of_a_missing_thread_creates_nothing(self, actors: StoreActors) -> None:
        store = self._store()
        await store.rename("ghost", "Boo", request=actors.request("alice"))
        assert await store.exists("ghost", request=actors.request("alice")) is False
        assert await store.load("ghost", request=actors.request("alice")) is None
        assert await self._listed_ids(actors, "alice") == []

    # -- finding threads (persistence.listing) -----------------------------------------

    def _lists(self) -> bool:
        return is_persistent(self.make_store()) and self.supports_list

    async def _find(self, actors: StoreActors, actor: str, **kwargs: Any) -> ThreadPage:
        query = ThreadQuery(**kwargs)
        return await find_threads(self._store(), query, request=actors.request(actor))

    async def _found_ids(self, actors: StoreActors, actor: str, **kwargs: Any) -> list[str]:
        return [hit.meta.thread_id for hit in (await self._find(actors, actor, **kwargs)).hits]

    async def test_search_finds_the_owners_titles_only(self, actors: StoreActors) -> None:
        for owner, intruder in self._owners():
            await self._save(actors, owner, f"{owner}-lisbon", f"Lisbon trip of {owner}")
            await self._save(actors, owner, f"{owner}-porto", "Porto budget")
            await self._save(actors, intruder, f"{intruder}-lisbon", f"Lisbon for {intruder}")
            page = await self._find(actors, owner, text="lisb")
            if not self._lists():
                assert page.hits == []
                continue
            assert [hit.meta.thread_id for hit in page.hits] == [f"{owner}-lisbon"]
            [hit] = page.hits
            assert "Lisbon" in hit.snippet
            assert intruder not in hit.snippet
            assert await self._found_ids(actors, owner, text="nowhere") == []

    async def test_search_finds_message_text_of_the_owner_only(self, actors: StoreActors) -> None:
        full_text = self.supports_full_text
        if full_text is None:
            full_text = store_features(self.make_store()).search
        if not full_text:
            pytest.skip("This store searches titles only.")
        for owner, intruder in self._owners():
            secret = [*sample_messages(f"plans of {owner}"), _said("zebrafish in the pond")]
            other = [*sample_messages("other"), _said(f"zebrafish of {intruder}, private")]
            store = self._store()
            mine = Conversation(thread_id="zoo", messages=secret)
            await store.save(mine, request=actors.request(owner))
            theirs = Conversation(thread_id="zoo", messages=other)
            await store.save(theirs, request=actors.request(intruder))
            page = await self._find(actors, owner, text="zebraf POND")
            [hit] = page.hits
            assert hit.meta.thread_id == "zoo"
            assert "zebrafish in the pond" in hit.snippet
            assert intruder not in hit.snippet
            assert "private" not in hit.snippet

    async def test_pages_walk_every_thread_once(self, actors: StoreActors) -> None:
        for index in range(5):
            await self._save(actors, "alice", f"t{index}", f"thread {index}")
            await asyncio.sleep(0.002)  # distinct timestamps on coarse clocks
        await self._save(actors, "bob", "bobs", "thread of bob")
        for text in ("", "thread"):
            seen: list[str] = []
            after = None
            for _ in range(5):
                page = await self._find(actors, "alice", text=text, limit=2, after=after)
                seen.extend(hit.meta.thread_id for hit in page.hits)
                after = page.next_position
                if after is None:
                    break
            if not self._lists():
                assert seen == []
                continue
            assert after is None
            assert sorted(seen) == [f"t{index}" for index in range(5)]
            if not text:
                assert seen == ["t4", "t3", "t2", "t1", "t0"]

    async def test_archive_hides_a_thread_until_asked_for(self, actors: StoreActors) -> None:
        for thread_id in ("kept", "shelved"):
            await self._save(actors, "alice", thread_id, f"about {thread_id}")
            await asyncio.sleep(0.002)
        store, archives = self._store(), self.supports_archive
        if archives is None:
            archives = store_features(store).archive
        if not (archives and is_persistent(store)):
            with pytest.raises(ArchiveUnsupportedError):
                await archive_thread(store, "shelved", True, request=actors.request("alice"))
            return
        assert await archive_thread(store, "shelved", True, request=actors.request("alice"))
        # Not yours is missing: nothing changes.
        assert not await archive_thread(store, "kept", True, request=actors.request("bob"))
        assert not await archive_thread(store, "ghost", True, request=actors.request("alice"))
        if not self._lists():
            return
        assert await self._found_ids(actors, "alice") == ["kept"]
        assert await self._found_ids(actors, "alice", archived=True) == ["shelved"]
        assert await self._found_ids(actors, "alice", archived=None) == ["shelved", "kept"]
        assert await self._found_ids(actors, "bob", archived=None) == []
        rows = await self._store().list(request=actors.request("alice"))
        assert {row.thread_id: row.archived for row in rows} == {"kept": False, "shelved": True}
        await archive_thread(self._store(), "shelved", False, request=actors.request("alice"))
        assert await self._found_ids(actors, "alice") == ["shelved", "kept"]

    async def test_updated_bounds_filter_by_last_activity(self, actors: StoreActors) -> None:
        await self._save(actors, "alice", "old", "old one")
        await asyncio.sleep(0.01)
        await self._save(actors, "alice", "new", "new one")
        rows = await self._store().list(request=actors.request("alice"))
        stamps = {row.thread_id: row.updated_at for row in rows}
        if not self._lists() or None in stamps.values():
            return
        old = stamps["old"]
        assert old is not None
        assert await self._found_ids(actors, "alice", updated_after=old) == ["new"]
        assert await self._found_ids(actors, "alice", updated_before=stamps["new"]) == ["old"]

    async def test_fork_copies_the_active_branch_up_to_a_message(self, actors: StoreActors) -> None:
        await self._save(actors, "alice", "source", "fork me")
        store, alice = self._store(), actors.request("alice")
        new_id = await fork_thread(store, "source", "msg-assistant-1", request=alice)
        if not is_persistent(store):
            assert new_id is None
            return
        assert new_id is not None
        copy = await store.load(new_id, request=alice)
        assert copy is not None
        # The message, and the tool result answering its call.
        assert copy.messages == sample_messages("fork me")[:3]
        source = await store.load("source", request=alice)
        assert source is not None
        assert source.messages == sample_messages("fork me")
        assert await fork_thread(store, "source", "no-such-id", request=alice) is None
        stranger = actors.request("bob")
        assert await fork_thread(store, "source", "msg-user-1", request=stranger) is None
        assert await self._listed_ids(actors, "bob") == []

    async def test_export_then_import_makes_a_new_thread_of_the_caller(
        self, actors: StoreActors
    ) -> None:
        await self._save(actors, "alice", "exported", "take me along")
        store, alice = self._store(), actors.request("alice")
        document = await export_thread(store, "exported", request=alice)
        if not is_persistent(store):
            assert document is None
            return
        assert document is not None
        check_document(document)
        assert await export_thread(store, "exported", request=actors.request("bob")) is None
        await import_thread(store, document, "imported", request=actors.request("bob"))
        imported = await store.load("imported", request=actors.request("bob"))
        assert imported is not None
        keys = ("id", "role", "content", "toolCallId")
        assert [{k: m.get(k) for k in keys} for m in imported.messages] == [
            {k: m.get(k) for k in keys} for m in sample_messages("take me along")
        ]
        assert await store.load("imported", request=alice) is None

    async def test_a_thread_that_never_branched_has_no_branch_points(
        self, actors: StoreActors
    ) -> None:
        await self._save(actors, "alice", "straight", "one branch")
        store, alice = self._store(), actors.request("alice")
        persistent = is_persistent(store)
        assert await branch_points(store, "straight", request=alice) == {}
        assert await activate_branch(store, "straight", "msg-user-1", request=alice) is persistent
        assert not await activate_branch(store, "straight", "nope", request=alice)
        bob = actors.request("bob")
        assert not await activate_branch(store, "straight", "msg-user-1", request=bob)
        loaded = await store.load("straight", request=alice)
        if persistent:
            assert loaded is not None
            assert loaded.messages == sample_messages("one branch")

    # Branches driven as a run drives them: through the store's chat-history repositories.

    def _branching_store(self) -> ConversationStore:
        store = self._store()
        if not (is_persistent(store) and store_features(store).branches):
            pytest.skip("This store keeps no branches.")
        return store

    @staticmethod
    async def _pair(store: ConversationStore, request: Any, *, create: bool = False) -> Any:
        """``(chat of thread "tree", message repository)`` of a fresh pair, as a run has them."""
        chats, messages = await repositories_for(store, request=request)
        # The uuid the chat repository names, else the owner's (as the run endpoint does).
        user_uuid = repository_user_uuid(chats) or await aresolve_owner_uuid(
            request, allow_anonymous=False
        )
        chat = (
            await chats.create_chat(ChatCreate(thread_id="tree", user_uuid=user_uuid, name="Tree"))
            if create
            else await chats.get_chat_by_thread_id(user_uuid, "tree")
        )
        assert chat is not None
        assert implements(messages, StartsBranches)
        return chat, messages

    async def _tree(self, store: ConversationStore, actors: StoreActors) -> Any:
        """Thread ``tree``: u1 a1 u2 a2, then a2 regenerated as a2b (active)."""
        chat, messages = await self._pair(store, actors.request("alice"), create=True)
        made = {}
        for agui_id, role in (("u1", "user"), ("a1", "assistant"), ("u2", "user")):
            made[agui_id] = await self._said(messages, chat.chat_uuid, agui_id, role)
        made["a2"] = await self._said(messages, chat.chat_uuid, "a2", "assistant")
        await self._branch(store, actors, made["a2"].message_uuid, [("a2b", "assistant")])
        return made

    async def _said(self, messages: Any, chat_uuid: Any, agui_id: str, role: str) -> Any:
        data = MessageCreate(
            chat_uuid=chat_uuid,
            agui_id=agui_id,
            role=role,
            content=f"{agui_id} says",
            in_progress=False,
            status="complete",
        )
        return await messages.create_message(data)

    async def _branch(
        self, store: ConversationStore, actors: StoreActors, at: Any, new: list[tuple[str, str]]
    ) -> None:
        """A fresh pair (as the next run) starts a branch at record ``at`` and writes ``new``."""
        chat, messages = await self._pair(store, actors.request("alice"))
        async with messages.transaction():
            await messages.start_branch(chat.chat_uuid, at)
            for agui_id, role in new:
                await self._said(messages, chat.chat_uuid, agui_id, role)

    async def _active(self, store: ConversationStore, actors: StoreActors, actor: str) -> Any:
        request = actors.request(actor)
        loaded = await store.load("tree", request=request)
        assert loaded is not None
        ids = [m["id"] for m in loaded.messages]
        points = await branch_points(store, "tree", request=request)
        chat, messages = await self._pair(store, request)
        # What a run reads (and its model is sent): the active branch only.
        read = [m.agui_id for m in await messages.get_chat_messages(chat.chat_uuid)]
        assert read == ids
        return ids, {k: (list(p.siblings), p.index) for k, p in points.items()}

    async def test_a_regenerate_keeps_the_old_answer_and_switches_back_and_forth(
        self, actors: StoreActors
    ) -> None:
        store = self._branching_store()
        await self._tree(store, actors)
        alice = actors.request("alice")
        assert await self._active(store, actors, "alice") == (
            ["u1", "a1", "u2", "a2b"],
            {"a2b": (["a2", "a2b"], 1)},
        )
        assert await activate_branch(store, "tree", "a2", request=alice)
        assert await self._active(store, actors, "alice") == (
            ["u1", "a1", "u2", "a2"],
            {"a2": (["a2", "a2b"], 0)},
        )
        assert await activate_branch(store, "tree", "a2", request=alice)  # already active
        # An active message: its branch continues down the newest branch below it.
        assert await activate_branch(store, "tree", "u2", request=alice)
        assert (await self._active(store, actors, "alice"))[0] == ["u1", "a1", "u2", "a2b"]
        assert await activate_branch(store, "tree", "a2b", request=alice)
        assert (await self._active(store, actors, "alice"))[0] == ["u1", "a1", "u2", "a2b"]
        assert not await activate_branch(store, "tree", "no-such-message", request=alice)
        assert (await self._active(store, actors, "alice"))[0] == ["u1", "a1", "u2", "a2b"]

    async def test_another_owner_neither_sees_nor_switches_branches(
        self, actors: StoreActors
    ) -> None:
        store = self._branching_store()
        await self._tree(store, actors)
        bob = actors.request("bob")
        assert implements(store, KeepsBranches)
        assert await store.branch_points("tree", request=bob) is None
        assert await store.branch_points("no-such-thread", request=bob) is None
        assert not await store.activate("tree", "a2", request=bob)
        assert not await store.activate("no-such-thread", "a2", request=bob)
        assert (await self._active(store, actors, "alice"))[0] == ["u1", "a1", "u2", "a2b"]

    async def test_nested_branches_switch_then_export_and_import_every_branch(
        self, actors: StoreActors
    ) -> None:
        store = self._branching_store()
        made = await self._tree(store, actors)
        alice = actors.request("alice")
        assert await activate_branch(store, "tree", "a2", request=alice)
        # An edit of u2 on the a2 branch: a2b is now a branch inside an inactive branch.
        await self._branch(store, actors, made["u2"].message_uuid, [("u2e", "user")])
        chat, messages = await self._pair(store, alice)
        await self._said(messages, chat.chat_uuid, "a2e", "assistant")
        assert await self._active(store, actors, "alice") == (
            ["u1", "a1", "u2e", "a2e"],
            {"u2e": (["u2", "u2e"], 1)},
        )
        assert await activate_branch(store, "tree", "a2b", request=alice)
        assert await self._active(store, actors, "alice") == (
            ["u1", "a1", "u2", "a2b"],
            {"u2": (["u2", "u2e"], 0), "a2b": (["a2", "a2b"], 1)},
        )
        # An edit of the first message keeps the whole thread as the other first branch.
        await self._branch(store, actors, made["u1"].message_uuid, [("u1r", "user")])
        assert await self._active(store, actors, "alice") == (
            ["u1r"],
            {"u1r": (["u1", "u1r"], 1)},
        )
        assert await activate_branch(store, "tree", "a2e", request=alice)
        expected = (
            ["u1", "a1", "u2e", "a2e"],
            {"u1": (["u1", "u1r"], 0), "u2e": (["u2", "u2e"], 1)},
        )
        assert await self._active(store, actors, "alice") == expected
        # A fork holds the active branch only.
        forked = await fork_thread(store, "tree", "a1", request=alice)
        assert forked is not None
        copy = await store.load(forked, request=alice)
        assert copy is not None
        assert [m["id"] for m in copy.messages] == ["u1", "a1"]
        assert await branch_points(store, forked, request=alice) == {}
        # The export holds every message of every branch; the import makes them all again.
        document = await export_thread(store, "tree", request=alice)
        assert document is not None
        check_document(document)
        texts = sorted(
            m.get("content")
            for entry in document["messages"]
            for m in entry.get("wire") or []
            if m.get("role") in ("user", "assistant")
        )
        assert texts == sorted(
            f"{i} says" for i in ("u1", "a1", "u2", "a2", "a2b", "u2e", "a2e", "u1r")
        )
        assert "chatBranches" not in str(document)
        await import_thread(store, document, "tree", request=actors.request("bob"))
        assert await self._active(store, actors, "bob") == expected
        assert await activate_branch(store, "tree", "a2b", request=actors.request("bob"))
        assert (await self._active(store, actors, "bob"))[0] == ["u1", "a1", "u2", "a2b"]
        assert (await self._active(store, actors, "alice")) == expected


def _said(text: str) -> dict[str, Any]:
    """An assistant wire message saying ``text``."""
    return {"id": f"said-{abs(hash(text))}", "role": "assistant", "content": text}

    # -- branches, fork, export and import (persistence.branching, persistence.transfer) ----


class ScopedConversationStoreContract(ConversationStoreContract):
    """The ``ConversationStore`` contract for a ``ScopedConversationStore`` over your store.

    Implement ``make_inner_store``; the contract wraps it with scope ``"admin"`` and adds the
    partition tests (``admin`` next to ``administrators``, a colon refused).
    """

    def make_inner_store(self) -> ConversationStore:
        """Return a new instance of the store to wrap."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement make_inner_store() returning the store to wrap."
        )

    def make_store(self) -> ConversationStore:
        return ScopedConversationStore(self.make_inner_store(), scope="admin")

    async def test_scopes_sharing_a_prefix_partition_cleanly(self, actors: StoreActors) -> None:
        admin = ScopedConversationStore(self.make_inner_store(), scope="admin")
        administrators = ScopedConversationStore(self.make_inner_store(), scope="administrators")
        alice = actors.request
        await admin.save(
            Conversation(thread_id="t1", messages=sample_messages("admin")), request=alice("alice")
        )
        await administrators.save(
            Conversation(thread_id="t1", messages=sample_messages("administrators")),
            request=alice("alice"),
        )
        await administrators.save(
            Conversation(thread_id="only-there", messages=sample_messages("x")),
            request=alice("alice"),
        )
        persistent = is_persistent(admin)
        admin_t1 = await admin.load("t1", request=alice("alice"))
        if not persistent:
            assert admin_t1 is None
            return
        assert admin_t1 is not None
        assert admin_t1.thread_id == "t1"
        assert admin_t1.messages == sample_messages("admin")
        for probe in ("only-there", "istrators:only-there", ":only-there"):
            assert await admin.load(probe, request=alice("alice")) is None
            assert await admin.exists(probe, request=alice("alice")) is False
        if self.supports_list:
            admin_ids = [row.thread_id for row in await admin.list(request=alice("alice"))]
            assert admin_ids == ["t1"]
            others = await administrators.list(request=alice("alice"))
            assert sorted(row.thread_id for row in others) == ["only-there", "t1"]
        await admin.delete("t1", request=alice("alice"))
        assert await administrators.exists("t1", request=alice("alice")) is True

    async def test_storage_keys_carry_the_scope_but_callers_never_see_it(
        self, actors: StoreActors
    ) -> None:
        inner = self.make_inner_store()
        scoped = ScopedConversationStore(inner, scope="admin")
        await scoped.save(
            Conversation(thread_id="t1", messages=sample_messages()),
            request=actors.request("alice"),
        )
        if not (is_persistent(inner) and self.supports_list):
            return
        [stored] = await inner.list(request=actors.request("alice"))
        assert stored.thread_id == "admin:t1"
        [seen] = await scoped.list(request=actors.request("alice"))
        assert seen.thread_id == "t1"

    async def test_a_scope_with_a_colon_is_refused(self) -> None:
        with pytest.raises(ValueError, match="'admin:readonly'"):
            ScopedConversationStore(self.make_inner_store(), scope="admin:readonly")


class AttachmentStoreContract:
    """The ``AttachmentStore`` contract. Implement ``make_store``.

    ``serves_anonymous`` as for conversations. A store whose ``persistent`` flag is ``False``
    (a Null store) must refuse ``save`` with ``PersistenceDisabledError``, open nothing and
    delete silently.
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = _contract_marks

    serves_anonymous: ClassVar[bool] = True

    def make_store(self) -> AttachmentStore:
        """Return a new store instance; called more than once per test."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement make_store() returning an AttachmentStore."
        )

    @pytest.fixture
    def actors(self) -> StoreActors:
        """Two users and two anonymous sessions (override to build them differently)."""
        return StoreActors.create()

    def _store(self) -> AttachmentStore:
        store = self.make_store()
        assert implements(store, AttachmentStore), f"{store!r} is not an AttachmentStore"
        return store

    @staticmethod
    def _upload(data: bytes = b"%PDF-1.4 tiny", name: str = "report.pdf") -> SimpleUploadedFile:
        return SimpleUploadedFile(name, data, content_type="application/pdf")

    async def _read(self, actors: StoreActors, actor: str, attachment_id: str) -> bytes | None:
        opened = await self._store().open(attachment_id, request=actors.request(actor))
        if opened is None:
            return None
        with opened.content as content:
            data = content.read()
        assert opened.ref.id == attachment_id
        return data

    def _skip_if_not_persistent(self) -> None:
        if not is_persistent(self.make_store()):
            pytest.skip("A non-persistent store keeps no files.")

    async def test_is_an_attachment_store(self) -> None:
        assert isinstance(self.make_store(), AttachmentStore)

    async def test_round_trip_through_a_fresh_instance(self, actors: StoreActors) -> None:
        self._skip_if_not_persistent()
        data = bytes(range(256)) * 40
        ref = await self._store().save(self._upload(data), request=actors.request("alice"))
        assert isinstance(ref.id, str)
        assert ref.id
        assert (ref.name, ref.mime, ref.size) == ("report.pdf", "application/pdf", len(data))
        assert await self._read(actors, "alice", ref.id) == data

    async def test_each_upload_gets_its_own_id(self, actors: StoreActors) -> None:
        self._skip_if_not_persistent()
        store = self._store()
        first = await store.save(self._upload(), request=actors.request("alice"))
        second = await store.save(self._upload(), request=actors.request("alice"))
        assert first.id != second.id
        await store.delete(first.id, request=actors.request("alice"))
        assert await self._read(actors, "alice", second.id) == b"%PDF-1.4 tiny"

    async def test_owners_are_isolated(self, actors: StoreActors) -> None:
        self._skip_if_not_persistent()
        pairs = [("alice", "bob")]
        if self.serves_anonymous:
            pairs.append(ANONYMOUS_ACTORS)
        for owner, intruder in pairs:
            secret = f"secret of {owner}".encode()
            ref = await self._store().save(self._upload(secret), request=actors.request(owner))
            assert await self._read(actors, intruder, ref.id) is None
            await self._store().delete(ref.id, request=actors.request(intruder))
            assert await self._read(actors, owner, ref.id) == secret

    async def test_delete_is_idempotent(self, actors: StoreActors) -> None:
        self._skip_if_not_persistent()
        ref = await self._store().save(self._upload(), request=actors.request("alice"))
        for _ in range(2):
            await self._store().delete(ref.id, request=actors.request("alice"))
        await self._store().delete("never-existed", request=actors.request("alice"))
        assert await self._read(actors, "alice", ref.id) is None

    async def test_missing_id_opens_nothing(self, actors: StoreActors) -> None:
        assert await self._read(actors, "alice", "no-such-attachment") is None

    async def test_anonymous_refused_when_not_served(self, actors: StoreActors) -> None:
        if self.serves_anonymous:
            pytest.skip("This store serves anonymous sessions.")
        store = self._store()
        request = actors.request("anon1")
        for call in (
            store.save(self._upload(), request=request),
            store.open("any", request=request),
            store.delete("any", request=request),
        ):
            with pytest.raises(AnonymousOperationError):
                await call

    async def test_a_non_persistent_store_refuses_uploads(self, actors: StoreActors) -> None:
        store = self._store()
        if is_persistent(store):
            pytest.skip("This store keeps files.")
        with pytest.raises(PersistenceDisabledError, match=re.escape("'report.pdf'")):
            await store.save(self._upload(), request=actors.request("alice"))
        await store.delete("anything", request=actors.request("alice"))
