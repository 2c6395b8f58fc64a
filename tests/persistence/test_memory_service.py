"""The Memory Service stores over real HTTP to the emulator: both contracts, bytes, budget."""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar
from uuid import uuid4

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from django_pydantic_agent.chat_history.memory_service import RetryPolicy
from django_pydantic_agent.contrib.memory_service_emulator import (
    Fault,
    fault_injector,
    request_counter,
)
from django_pydantic_agent.memory_service import DRMemoryServiceClient, DRMemorySpace
from django_pydantic_agent.persistence import (
    AttachmentStore,
    Conversation,
    ConversationStore,
    ScopedConversationStore,
    StoreLimitError,
    owner_user_uuid,
    resolve_owner_id,
)
from django_pydantic_agent.persistence.memory_service import (
    MemoryServiceAttachmentStore,
    MemoryServiceConversationStore,
    StoredAttachment,
)
from django_pydantic_agent.persistence.scoped import _ScopedChats
from django_pydantic_agent.testing import (
    AttachmentStoreContract,
    ConversationStoreContract,
    ScopedConversationStoreContract,
    StoreActors,
    sample_messages,
)
from django_pydantic_agent.testing.agui_script import RF, RS, TMC, TME, TMS
from django_pydantic_agent.testing.chat_history import (
    OTHER_USER,
    USER,
    ChatHistoryContract,
    OpenRepositories,
)
from tests.persistence.owners import routed_pairs
from tests.support.emulator import no_faults_armed

_MARKS = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]
CHUNK = 72 * 1024


@dataclass
class Service:
    client: DRMemoryServiceClient
    key: str

    @property
    def requests(self) -> int:
        return request_counter.count()


@pytest.fixture
async def service(live_server: Any) -> AsyncIterator[Service]:
    with no_faults_armed():
        async with httpx.AsyncClient(timeout=30.0) as pool:
            client = DRMemoryServiceClient(
                endpoint=f"{live_server.url}/api/v2", api_token="token-stores", http_client=pool
            )
            yield Service(client=client, key=f"stores-{uuid4().hex}")


class _OnTheService:
    service: Service

    @pytest.fixture(autouse=True)
    def _bind_service(self, service: Service) -> None:
        self.service = service


class TestConversationStoreContract(_OnTheService, ConversationStoreContract):
    def make_store(self) -> ConversationStore:
        return MemoryServiceConversationStore(
            self.service.client, self.service.key, allow_anonymous=self.serves_anonymous
        )


class TestConversationStoreRefusingAnonymous(TestConversationStoreContract):
    serves_anonymous = False


class TestScopedConversationStoreContract(_OnTheService, ScopedConversationStoreContract):
    def make_inner_store(self) -> ConversationStore:
        return MemoryServiceConversationStore(
            self.service.client, self.service.key, allow_anonymous=True
        )


class TestAttachmentStoreContract(_OnTheService, AttachmentStoreContract):
    def make_store(self) -> AttachmentStore:
        return MemoryServiceAttachmentStore(
            self.service.client, self.service.key, allow_anonymous=self.serves_anonymous
        )


class TestAttachmentStoreRefusingAnonymous(TestAttachmentStoreContract):
    serves_anonymous = False


@pytest.fixture
async def memory_space(service: Service) -> DRMemorySpace:
    return await DRMemorySpace.post(service.client, deduplication_key=service.key)


class TestStoreRepositoriesContract(ChatHistoryContract):
    """``repositories()`` of the store: each fresh pair is a fresh store (cold caches)."""

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = _MARKS
    max_content_chars = 100_000

    def wrap(self, pair: Any) -> Any:
        return pair

    @pytest.fixture
    def open_repositories(self, memory_space: DRMemorySpace) -> OpenRepositories:
        def open_pair():  # type: ignore[no-untyped-def]
            store = MemoryServiceConversationStore(memory_space.client, memory_space)
            return routed_pairs(
                {
                    USER: self.wrap(store.bind_repositories(USER)),
                    OTHER_USER: self.wrap(store.bind_repositories(OTHER_USER)),
                }
            )

        return open_pair


class TestScopedStoreRepositoriesContract(TestStoreRepositoriesContract):
    """``ScopedConversationStore.repositories()`` over the store's own: the prefix both ways."""

    def wrap(self, pair: Any) -> Any:
        chats, messages = pair
        return _ScopedChats(chats, "admin:"), messages

    async def test_s01_plain_text_on_a_new_thread(
        self, open_repositories: OpenRepositories
    ) -> None:
        # The one difference: the deduplication key is the storage key's, prefix included.
        from django_pydantic_agent.chat_history import chat_deduplication_key

        await self.play(open_repositories, RS(), TMS("m1"), TMC("m1", "Hi"), TME("m1"), RF())
        chat, messages = await self.stored(open_repositories)
        assert chat is not None
        assert (chat.thread_id, chat.user_uuid) == ("t1", USER)
        assert chat.dedup_key == chat_deduplication_key(USER, "admin:t1")
        assert [m.content for m in messages] == ["Hello", "Hi"]


async def test_scoped_repositories_prefix_thread_ids_in_storage_only(
    service: Service, actors: StoreActors
) -> None:
    from django_pydantic_agent.chat_history import ChatCreate

    inner = MemoryServiceConversationStore(service.client, service.key)
    admin = ScopedConversationStore(inner, scope="admin")
    other = ScopedConversationStore(inner, scope="administrators")
    owner = owner_user_uuid(str(actors.user("alice").pk))
    chats, _ = await admin.repositories(request=actors.request("alice"))
    chat = await chats.create_chat(ChatCreate(thread_id="t1", user_uuid=owner))
    assert chat.thread_id == "t1"
    stored = [row.thread_id for row in await inner.list(request=actors.request("alice"))]
    assert stored == ["admin:t1"]
    sibling, _ = await other.repositories(request=actors.request("alice"))
    assert await sibling.get_chat_by_thread_id(owner, "t1") is None
    assert await sibling.get_all_chats(owner) == []
    assert await sibling.update_chat_name(chat.chat_uuid, "x") is None
    assert await sibling.delete_chat(chat.chat_uuid) is None
    assert [c.thread_id for c in await chats.get_all_chats(owner)] == ["t1"]


# -- what differs from other stores ------------------------------------------------------------


@pytest.fixture
def actors(transactional_db: None) -> StoreActors:
    return StoreActors.create(prefix="ms")


pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_run_through_repositories_loads_with_its_statuses(
    service: Service, actors: StoreActors
) -> None:
    from django_pydantic_agent.chat_history import AGUIStorageAgent, StreamPersistenceManager
    from django_pydantic_agent.testing.agui_script import RS, TMC, TMS, ScriptedAgent, run_input

    store = MemoryServiceConversationStore(service.client, service.key)
    request = actors.request("alice")
    chats, messages = await store.repositories(request=request)
    owner = owner_user_uuid(str(actors.user("alice").pk))
    inner = ScriptedAgent(RS(), TMS("m1"), TMC("m1", "Half an ans"), RuntimeError("boom"))
    async with StreamPersistenceManager(
        lambda: AGUIStorageAgent("assistant", owner, chats, messages, inner)
    ) as manager:
        handle = await manager.run(run_input())
        [event async for event in handle.events()]
        await handle.wait()

    fresh = MemoryServiceConversationStore(service.client, service.key)
    loaded = await fresh.load("t1", request=actors.request("alice"))
    assert loaded is not None
    assert [(m["role"], m["id"], m["status"]) for m in loaded.messages] == [
        ("user", "u1", "complete"),
        ("assistant", "m1", "errored"),
    ]
    assert loaded.messages[1]["content"] == "Half an ans"
    assert await fresh.exists("t1", request=actors.request("bob")) is False
    [row] = await fresh.list(request=actors.request("alice"))
    assert (row.thread_id, row.preview) == ("t1", "Half an ans")


async def test_the_owner_is_a_deterministic_user_and_participant(
    service: Service, actors: StoreActors
) -> None:
    from asgiref.sync import sync_to_async

    from django_pydantic_agent.chat_history import participant_id

    store = MemoryServiceConversationStore(service.client, service.key)
    await store.save(
        Conversation(thread_id="t1", messages=sample_messages()), request=actors.request("alice")
    )
    owner_id = await sync_to_async(resolve_owner_id)(actors.request("alice"), allow_anonymous=False)
    space = await store.memory_space()
    [session] = (
        await service.client.request("GET", f"{space.path}sessions/", params={"limit": 100})
    ).json()["items"]
    assert session["participants"] == [participant_id(owner_user_uuid(owner_id))]
    assert session["metadata"]["user_uuid"] == str(owner_user_uuid(owner_id))


async def test_save_keeps_appends_cheap_and_rewrites_exact(
    service: Service, actors: StoreActors
) -> None:
    store = MemoryServiceConversationStore(service.client, service.key)
    alice = actors.request
    messages = sample_messages()
    await store.save(Conversation(thread_id="t1", messages=messages[:2]), request=alice("alice"))
    await store.save(Conversation(thread_id="t1", messages=messages), request=alice("alice"))
    loaded = await store.load("t1", request=alice("alice"))
    assert loaded is not None
    assert loaded.messages == messages
    await store.rename("t1", "Kept", request=alice("alice"))
    edited = [*messages[:3], {"id": "u9", "role": "user", "content": "different"}]
    await store.save(Conversation(thread_id="t1", messages=edited), request=alice("alice"))
    reread = await MemoryServiceConversationStore(service.client, service.key).load(
        "t1", request=alice("alice")
    )
    assert reread is not None
    assert reread.messages == edited
    [row] = await store.list(request=alice("alice"))
    assert row.title == "Kept"


async def test_request_budget(service: Service, actors: StoreActors) -> None:
    store = MemoryServiceConversationStore(service.client, service.key)
    alice = actors.request
    await store.memory_space()
    budget: dict[str, int] = {}

    async def measure(name: str, call: Any) -> None:
        request_counter.reset()
        await call
        budget[name] = request_counter.count()

    messages = sample_messages()
    await measure(
        "save new",
        store.save(Conversation(thread_id="t1", messages=messages[:3]), request=alice("alice")),
    )
    await measure(
        "save appending",
        store.save(Conversation(thread_id="t1", messages=messages), request=alice("alice")),
    )
    await measure(
        "save rewriting",
        store.save(Conversation(thread_id="t1", messages=messages[:1]), request=alice("alice")),
    )
    cold = MemoryServiceConversationStore(service.client, service.key)
    await cold.memory_space()
    await measure("load", cold.load("t1", request=alice("alice")))
    await measure("exists", store.exists("t1", request=alice("alice")))
    await measure("rename", store.rename("t1", "x", request=alice("alice")))
    await store.save(Conversation(thread_id="t2", messages=messages), request=alice("alice"))
    await measure("list (2 threads)", store.list(request=alice("alice")))
    await measure("delete", store.delete("t1", request=alice("alice")))
    files = MemoryServiceAttachmentStore(service.client, service.key)
    data = os.urandom(CHUNK * 11 + 5)  # 12 chunks
    ref = None

    async def upload() -> None:
        nonlocal ref
        ref = await files.save(SimpleUploadedFile("f.bin", data), request=alice("alice"))

    await files._space.get()
    await measure("attachment save (12 chunks)", upload())
    assert ref is not None
    await measure("attachment open (12 chunks)", files.open(ref.id, request=alice("alice")))
    await measure("attachment delete", files.delete(ref.id, request=alice("alice")))
    assert budget == {
        "save new": 3,
        "save appending": 3,
        "save rewriting": 5,
        "load": 2,
        "exists": 1,
        "rename": 2,
        "list (2 threads)": 3,
        "delete": 2,
        "attachment save (12 chunks)": 3,
        "attachment open (12 chunks)": 2,
        "attachment delete": 2,
    }


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK, 11 * CHUNK + 7])
async def test_attachment_bytes_round_trip_exactly(
    service: Service, actors: StoreActors, size: int
) -> None:
    rng = random.Random(size)
    data = bytes(rng.randrange(256) for _ in range(size))
    if size > 2:
        data = b"\x00\xff\xfe" + data[3:]  # NUL and bytes that are not UTF-8
    store = MemoryServiceAttachmentStore(service.client, service.key)
    upload = SimpleUploadedFile("blob.bin", data, content_type="application/x-blob")
    ref = await store.save(upload, request=actors.request("alice"))
    assert ref.size == size
    opened = await MemoryServiceAttachmentStore(service.client, service.key).open(
        ref.id, request=actors.request("alice")
    )
    assert opened is not None
    with opened.content as content:
        assert content.read() == data
    assert (opened.ref.name, opened.ref.mime) == ("blob.bin", "application/x-blob")


async def test_an_attachment_over_the_cap_is_refused_before_anything_is_sent(
    service: Service, actors: StoreActors
) -> None:
    store = MemoryServiceAttachmentStore(service.client, service.key, max_bytes=1000)
    await store._space.get()
    request_counter.reset()
    with pytest.raises(StoreLimitError, match=r"max_bytes=1000"):
        await store.save(
            SimpleUploadedFile("big.bin", b"x" * 1001), request=actors.request("alice")
        )
    assert request_counter.count() == 0
    ref = await store.save(
        SimpleUploadedFile("ok.bin", b"x" * 1000), request=actors.request("alice")
    )
    assert ref.size == 1000


async def test_a_damaged_attachment_opens_as_missing(service: Service, actors: StoreActors) -> None:
    from django_pydantic_agent.persistence.memory_service import (
        StoredAttachment,
        StoredAttachmentChunk,
    )

    store = MemoryServiceAttachmentStore(service.client, service.key)
    ref = await store.save(
        SimpleUploadedFile("f.bin", os.urandom(CHUNK + 1)), request=actors.request("alice")
    )
    space = await store._space.get()
    [session] = await StoredAttachment.list(space, attachment_id=ref.id)
    [first, _] = await StoredAttachmentChunk.list(session)
    await first.delete()
    assert await store.open(ref.id, request=actors.request("alice")) is None
    assert await store.open("a/b", request=actors.request("alice")) is None


async def test_constructor_refusals() -> None:
    client = DRMemoryServiceClient(endpoint="http://127.0.0.1:1/api/v2", api_token="t")
    await client.aclose()
    with pytest.raises(ValueError, match="space=''"):
        MemoryServiceConversationStore(client, "")
    with pytest.raises(TypeError, match="DRMemoryServiceClient"):
        MemoryServiceConversationStore(object(), "k")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_bytes=0"):
        MemoryServiceAttachmentStore(client, "k", max_bytes=0)
    with pytest.raises(TypeError, match="allow_anonymous"):
        MemoryServiceAttachmentStore(client, "k", allow_anonymous="yes")  # type: ignore[arg-type]
    store = MemoryServiceConversationStore(client, "k")
    with pytest.raises(RuntimeError, match="memory_space"):
        store.bind_repositories(USER)
    assert "space='k'" in repr(store)
    assert "max_bytes=" in repr(MemoryServiceAttachmentStore(client, "k"))


async def test_saving_the_same_conversation_again_writes_nothing(
    service: Service, actors: StoreActors
) -> None:
    store = MemoryServiceConversationStore(service.client, service.key, allow_anonymous=True)
    assert store.allow_anonymous is True
    posted = [
        {"id": "u1", "role": "user", "content": "Why?"},
        {"id": "r1", "role": "reasoning", "content": "Because", "encryptedValue": "e"},
        {"id": "m1", "role": "assistant", "content": "So."},
    ]
    conversation = Conversation(thread_id="t1", messages=posted)
    await store.save(conversation, request=actors.request("alice"))
    request_counter.reset()
    await store.save(conversation, request=actors.request("alice"))
    assert request_counter.count() == 2  # the lookup and the freshness check only
    loaded = await store.load("t1", request=actors.request("alice"))
    assert loaded is not None
    assert loaded.messages == posted
    await store.rename("missing", "x", request=actors.request("alice"))
    await store.delete("missing", request=actors.request("alice"))
    assert [row.thread_id for row in await store.list(request=actors.request("alice"))] == ["t1"]


async def test_the_owners_pair_refuses_other_users(service: Service, actors: StoreActors) -> None:
    from django_pydantic_agent.chat_history import ChatCreate

    space = await DRMemorySpace.post(service.client, deduplication_key=service.key)
    store = MemoryServiceConversationStore(service.client, space)
    alice = owner_user_uuid(str(actors.user("alice").pk))
    bob_chats, _ = store.bind_repositories(OTHER_USER)
    theirs = await bob_chats.create_chat(ChatCreate(thread_id="t1", user_uuid=OTHER_USER))
    chats, _ = await store.repositories(request=actors.request("alice"))
    with pytest.raises(ValueError, match="request's owner"):
        await chats.create_chat(ChatCreate(thread_id="t1", user_uuid=OTHER_USER))
    assert await chats.get_chat_by_thread_id(OTHER_USER, "t1") is None
    assert await chats.get_all_chats(OTHER_USER) == []
    assert await chats.update_chat_name(theirs.chat_uuid, "mine now") is None
    assert await chats.delete_chat(theirs.chat_uuid) is None
    assert await bob_chats.get_chat_by_thread_id(OTHER_USER, "t1") is not None
    mine = await chats.create_chat(ChatCreate(thread_id="t1", user_uuid=alice))
    assert mine.chat_uuid != theirs.chat_uuid
    files = MemoryServiceAttachmentStore(service.client, space, max_bytes=10)
    assert (files.max_bytes, files.allow_anonymous) == (10, False)


@pytest.mark.parametrize(
    "fault",
    [
        Fault.unavailable(times=1),
        Fault.rate_limited(times=1),
        Fault.dropped_connection(times=1),
        Fault.dropped_connection(after_processing=True, times=1),
    ],
    ids=["503", "429", "dropped", "dropped-after-processing"],
)
@pytest.mark.parametrize("route", ["session-list", "event-list", "event-batch", "session-detail"])
async def test_attachments_survive_one_transient_failure_on_any_request(
    service: Service, actors: StoreActors, fault: Fault, route: str
) -> None:
    quick = RetryPolicy(base_delay=0.0)
    store = MemoryServiceAttachmentStore(service.client, service.key, retry=quick)
    data = b"\x00" + bytes(range(256)) * 300  # two chunks
    alice = actors.request("alice")
    await _space(service)  # the space exists before the fault is armed
    armed = replace(fault, routes=frozenset({route}))
    with fault_injector.inject(armed):
        ref = await store.save(SimpleUploadedFile("f.bin", data), request=alice)
        opened = await store.open(ref.id, request=alice)
        await store.delete(ref.id, request=alice)
        gone = await store.open(ref.id, request=alice)
    assert opened is not None
    with opened.content as content:
        assert content.read() == data
    assert gone is None
    sessions = await StoredAttachment.list(await _space(service), attachment_id=ref.id)
    assert sessions == []


async def _space(service: Service) -> DRMemorySpace:
    return await DRMemorySpace.post(service.client, deduplication_key=service.key)
