"""ModelConversationStore / ModelAttachmentStore over the test-only models in tests.testapp."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from importlib import import_module

import pytest
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.contrib.sessions.models import Session
from django.core.files.uploadedfile import SimpleUploadedFile, UploadedFile
from django.db import DataError, IntegrityError, OperationalError, connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_pydantic_agent.persistence import (
    AnonymousOperationError,
    AttachmentRef,
    AttachmentStore,
    Conversation,
    ConversationMetaList,
    ConversationStore,
    OpenedAttachment,
    StoreDataError,
    StoreError,
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
    supports_archive = False

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
    supports_archive = False

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


# -- regression: data the database refuses is the caller's fault, not a server error ----------

# SQLite accepts NUL characters and over-long strings, so it refuses nothing here.
needs_postgresql = pytest.mark.postgresql


@needs_postgresql
@pytest.mark.django_db(transaction=True)
async def test_a_message_postgresql_cannot_hold_is_a_store_error(actors: StoreActors) -> None:
    store = ThreadStore()
    bad = Conversation(
        thread_id="t-nul", messages=[{"id": "m1", "role": "user", "content": "a\x00b"}]
    )
    with pytest.raises(StoreDataError, match="'t-nul'") as raised:
        await store.save(bad, request=actors.request("alice"))
    assert isinstance(raised.value, StoreError)
    assert isinstance(raised.value.__cause__, DataError)
    assert "NUL" in str(raised.value)
    assert await store.exists("t-nul", request=actors.request("alice")) is False
    # The connection is still usable for the next, valid request.
    good = Conversation(thread_id="t-ok", messages=[{"role": "user", "content": "ab"}])
    await store.save(good, request=actors.request("alice"))
    assert await store.exists("t-ok", request=actors.request("alice")) is True


@needs_postgresql
@pytest.mark.django_db(transaction=True)
async def test_a_title_too_long_for_its_column_is_a_store_error(actors: StoreActors) -> None:
    store = ThreadStore()
    await store.save(Conversation(thread_id="t1", messages=[]), request=actors.request("alice"))
    with pytest.raises(StoreDataError, match="'t1'"):
        await store.rename("t1", "x" * 300, request=actors.request("alice"))


@needs_postgresql
@pytest.mark.django_db(transaction=True)
async def test_an_upload_name_postgresql_cannot_hold_is_a_store_error(
    actors: StoreActors,
) -> None:
    upload = SimpleUploadedFile("a\x00b.txt", b"abc", content_type="text/plain")
    with pytest.raises(StoreDataError, match="upload"):
        await UploadStore().save(upload, request=actors.request("alice"))
    assert await Upload.objects.acount() == 0


class RefusingThreadStore(ThreadStore):
    """Every hook fails as a database refusing the caller's data (or its own bug) would."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def _fetch(self, thread_id: str, owner_id: str) -> Conversation | None:
        raise self.error

    def _store(self, conversation: Conversation, owner_id: str) -> None:
        raise self.error

    def _remove(self, thread_id: str, owner_id: str) -> None:
        raise self.error

    def _list(self, owner_id: str, limit: int | None) -> ConversationMetaList:
        raise self.error

    def _exists(self, thread_id: str, owner_id: str) -> bool:
        raise self.error

    def _rename(self, thread_id: str, title: str, owner_id: str) -> None:
        raise self.error


class RefusingUploadStore(UploadStore):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def _save(self, upload: UploadedFile[bytes], owner_id: str) -> AttachmentRef:
        raise self.error

    def _open(self, attachment_id: str, owner_id: str) -> OpenedAttachment | None:
        raise self.error

    def _remove(self, attachment_id: str, owner_id: str) -> None:
        raise self.error


@pytest.mark.django_db(transaction=True)
async def test_every_hook_wraps_data_errors_and_only_those(actors: StoreActors) -> None:
    request = actors.request("alice")
    store = RefusingThreadStore(DataError("value too long for type character varying(255)"))
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "load": lambda: store.load("t1", request=request),
        "save": lambda: store.save(Conversation(thread_id="t1"), request=request),
        "delete": lambda: store.delete("t1", request=request),
        "list": lambda: store.list(request=request),
        "exists": lambda: store.exists("t1", request=request),
        "rename": lambda: store.rename("t1", "T", request=request),
    }
    for name, call in calls.items():
        with pytest.raises(StoreDataError, match=r"conversation ('t1'|list)") as raised:
            await call()
        assert isinstance(raised.value.__cause__, DataError), name
    uploads = RefusingUploadStore(DataError("invalid byte sequence"))
    upload = SimpleUploadedFile("notes.txt", b"abc")
    upload_calls: list[Callable[[], Awaitable[object]]] = [
        lambda: uploads.save(upload, request=request),
        lambda: uploads.open("a1", request=request),
        lambda: uploads.delete("a1", request=request),
    ]
    for call in upload_calls:
        with pytest.raises(StoreDataError, match=r"'notes\.txt'|'a1'"):
            await call()
    # An integrity error (or any other database error) is the store's business: unchanged.
    for error in (IntegrityError("duplicate key"), OperationalError("server closed")):
        with pytest.raises(type(error)) as plain:
            await RefusingThreadStore(error).save(Conversation(thread_id="t1"), request=request)
        assert not isinstance(plain.value, StoreError)
