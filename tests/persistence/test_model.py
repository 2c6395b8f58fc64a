"""ModelConversationStore / ModelAttachmentStore over the test-only models in tests.testapp."""

from __future__ import annotations

import threading
from importlib import import_module

import pytest
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.contrib.sessions.models import Session
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pydantic_agent.persistence import (
    AnonymousOperationError,
    AttachmentStore,
    Conversation,
    ConversationStore,
    model,
)
from django_pydantic_agent.testing import (
    AttachmentStoreContract,
    ConversationStoreContract,
    ScopedConversationStoreContract,
    StoreActors,
)
from tests.testapp.models import Thread, Upload
from tests.testapp.stores import MinimalThreadStore, ThreadStore, UploadStore

# -- the contract, for every variant ------------------------------------------------------------


class TestThreadStoreContract(ConversationStoreContract):
    def make_store(self) -> ConversationStore:
        return ThreadStore(allow_anonymous=True)


class TestThreadStoreRefusingAnonymousContract(ConversationStoreContract):
    serves_anonymous = False

    def make_store(self) -> ConversationStore:
        return ThreadStore()


class TestMinimalThreadStoreContract(ConversationStoreContract):
    """Only the required hooks: no listing, no titles, exists through _fetch."""

    supports_list = False
    supports_rename = False

    def make_store(self) -> ConversationStore:
        return MinimalThreadStore(allow_anonymous=True)

    async def test_exists_loads_no_message_bodies(self) -> None:  # type: ignore[override]
        pytest.skip("The default _exists probes _fetch; override _exists to avoid that.")


class TestScopedThreadStoreContract(ScopedConversationStoreContract):
    def make_inner_store(self) -> ConversationStore:
        return ThreadStore(allow_anonymous=True)


class TestScopedMinimalThreadStoreContract(ScopedConversationStoreContract):
    supports_list = False
    supports_rename = False

    def make_inner_store(self) -> ConversationStore:
        return MinimalThreadStore(allow_anonymous=True)

    async def test_exists_loads_no_message_bodies(self) -> None:  # type: ignore[override]
        pytest.skip("The default _exists probes _fetch; override _exists to avoid that.")


class TestUploadStoreContract(AttachmentStoreContract):
    def make_store(self) -> AttachmentStore:
        return UploadStore(allow_anonymous=True)


class TestUploadStoreRefusingAnonymousContract(AttachmentStoreContract):
    serves_anonymous = False

    def make_store(self) -> AttachmentStore:
        return UploadStore()


# -- what the contract cannot see ---------------------------------------------


class ForgetfulStore(ThreadStore):
    """Overrides __init__ and forgets super().__init__(): must still refuse anonymous."""

    def __init__(self, *, allow_anonymous: bool = True) -> None:
        self.note = "forgot super()"


async def test_a_subclass_that_skips_super_init_fails_closed(actors: StoreActors) -> None:
    store = ForgetfulStore(allow_anonymous=True)
    assert store.allow_anonymous is False
    with pytest.raises(AnonymousOperationError):
        await store.list(request=actors.request("anon1"))


def test_allow_anonymous_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="allow_anonymous='yes'"):
        ThreadStore(allow_anonymous="yes")  # type: ignore[arg-type]


def test_model_stores_report_that_they_persist() -> None:
    assert ThreadStore().persistent is True
    assert UploadStore(allow_anonymous=True).allow_anonymous is True


class ThreadRecordingStore(ThreadStore):
    """Records which thread resolved the owner and which ran the hook."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[str, int] = {}

    def _owner(self, request: object) -> str:
        self.threads["owner"] = threading.get_ident()
        return super()._owner(request)  # type: ignore[arg-type]

    def _fetch(self, thread_id: str, owner_id: str) -> Conversation | None:
        self.threads["fetch"] = threading.get_ident()
        return super()._fetch(thread_id, owner_id)


async def test_owner_and_row_operation_share_one_worker_hop(
    actors: StoreActors, monkeypatch: pytest.MonkeyPatch
) -> None:
    hops: list[object] = []
    real = model.sync_to_async  # type: ignore[attr-defined]

    def counting(func: object) -> object:
        hops.append(func)
        return real(func)  # type: ignore[call-overload]

    monkeypatch.setattr(model, "sync_to_async", counting)
    store = ThreadRecordingStore()
    assert await store.load("t1", request=actors.request("alice")) is None
    assert len(hops) == 1
    assert store.threads["owner"] == store.threads["fetch"]
    assert store.threads["owner"] != threading.get_ident()  # never on the event loop


@pytest.mark.django_db(transaction=True)
async def test_anonymous_without_a_session_is_refused_and_no_session_is_created() -> None:
    request = RequestFactory().get("/")
    request.user = AnonymousUser()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore()
    before = await Session.objects.acount()
    with pytest.raises(AnonymousOperationError, match="ensure_session_key"):
        await ThreadStore(allow_anonymous=True).save(
            Conversation(thread_id="t1", messages=[]), request=request
        )
    assert await Session.objects.acount() == before
    assert await Thread.objects.acount() == 0


@pytest.mark.django_db(transaction=True)
async def test_a_forged_session_cookie_owns_nothing(actors: StoreActors) -> None:
    store = ThreadStore(allow_anonymous=True)
    await store.save(
        Conversation(thread_id="t1", messages=[{"role": "user", "content": "mine"}]),
        request=actors.request("anon1"),
    )
    request = RequestFactory().get("/")
    request.user = AnonymousUser()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore("forged" * 6)
    with pytest.raises(AnonymousOperationError):
        await store.list(request=request)
    assert await Thread.objects.filter(owner_id__startswith="anon:forged").aexists() is False


@pytest.mark.django_db
def test_the_reference_exists_hook_does_not_select_message_bodies() -> None:
    store = ThreadStore()
    Thread.objects.create(
        owner_id="1", thread_id="t1", messages=["x" * 100], updated_at=timezone.now()
    )
    with CaptureQueriesContext(connection) as queries:
        assert store._exists("t1", "1") is True
    [query] = queries.captured_queries
    assert "messages" not in query["sql"]


@pytest.mark.django_db(transaction=True)
async def test_attachment_rows_and_blobs_are_owner_scoped(actors: StoreActors) -> None:
    store = UploadStore()
    ref = await store.save(
        SimpleUploadedFile("a.txt", b"abc", content_type="text/plain"),
        request=actors.request("alice"),
    )
    row = await Upload.objects.aget(attachment_id=ref.id)
    assert row.owner_id == str(actors.user("alice").pk)
    await store.delete(ref.id, request=actors.request("alice"))
    assert row.file.name
    assert row.file.storage.exists(row.file.name) is False
