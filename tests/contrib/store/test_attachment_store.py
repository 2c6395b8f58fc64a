"""DefaultAttachmentStore: Storage-backed bytes, per-owner dedup, blob lifetime, storage alias."""

from __future__ import annotations

import hashlib
import io
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.storage import InMemoryStorage, default_storage, storages
from django.core.files.storage.handler import InvalidStorageError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.db import connections
from django.http import HttpRequest
from django.test import override_settings
from django.utils import timezone

from django_pydantic_agent.contrib.store.models import (
    ATTACHMENT_STORAGE_ALIAS,
    StoredAttachment,
    attachment_storage,
    resolve_attachment_storage,
)
from django_pydantic_agent.contrib.store.stores import DefaultAttachmentStore
from django_pydantic_agent.persistence import AnonymousOperationError, StoreLimitError
from tests.contrib.store.conftest import race_to_the_quota

pytestmark = pytest.mark.django_db

Upload = Callable[..., SimpleUploadedFile]
OnCommit = Callable[..., Any]

WITH_ALIAS = {
    "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    ATTACHMENT_STORAGE_ALIAS: {"BACKEND": "django.core.files.storage.InMemoryStorage"},
}
BROKEN_ALIAS = {
    **WITH_ALIAS,
    ATTACHMENT_STORAGE_ALIAS: {"BACKEND": "no.such.Storage"},
}


@pytest.fixture
def store() -> DefaultAttachmentStore:
    return DefaultAttachmentStore()


def first_blob() -> str:
    """The blob name of the oldest attachment row."""
    return str(StoredAttachment.objects.order_by("pk")[0].file.name)


def read(store: DefaultAttachmentStore, attachment_id: str, owner: str) -> bytes | None:
    opened = store._open(attachment_id, owner)
    if opened is None:
        return None
    with opened.content as content:
        return content.read()


def test_save_and_open_round_trip(store: DefaultAttachmentStore, upload: Upload) -> None:
    ref = store._save(upload(b"%PDF-1.7 body", "C:\\Users\\me\\report.pdf", "application/pdf"), "1")

    assert ref.name == "report.pdf"
    assert ref.mime == "application/pdf"
    assert ref.size == len(b"%PDF-1.7 body")
    assert ref.url is None
    row = StoredAttachment.objects.get()
    assert row.sha256 == hashlib.sha256(b"%PDF-1.7 body").hexdigest()
    assert ref.id == row.attachment_id.hex
    assert ref.id not in str(row.file.name)  # the public id says nothing about the blob's name
    opened = store._open(ref.id, "1")
    assert opened is not None
    assert opened.ref == ref
    with opened.content as content:
        assert content.read() == b"%PDF-1.7 body"


def test_hashing_streams_large_uploads(store: DefaultAttachmentStore, upload: Upload) -> None:
    payload = bytes(range(256)) * 1024 + b"tail"  # several 64 KiB chunks
    ref = store._save(upload(payload, "big.bin", ""), "1")
    row = StoredAttachment.objects.get()
    assert row.sha256 == hashlib.sha256(payload).hexdigest()
    assert ref.size == len(payload)
    assert ref.mime == "application/octet-stream"
    assert read(store, ref.id, "1") == payload


@pytest.mark.parametrize("raw", [None, "   ", "dir\\\\"])
def test_nameless_uploads_get_a_default_name(
    store: DefaultAttachmentStore, raw: str | None
) -> None:
    upload = SimpleUploadedFile("x", b"data")
    upload.name = raw
    assert store._save(upload, "1").name == "attachment"


def test_same_owner_dedups_but_every_upload_keeps_its_row_and_name(
    store: DefaultAttachmentStore, upload: Upload
) -> None:
    first = store._save(upload(b"same bytes", "a.txt"), "1")
    second = store._save(upload(b"same bytes", "b.txt"), "1")

    assert first.id != second.id
    assert [first.name, second.name] == ["a.txt", "b.txt"]
    files = set(StoredAttachment.objects.values_list("file", flat=True))
    assert len(files) == 1
    assert read(store, second.id, "1") == b"same bytes"


def test_dedup_never_crosses_owners(
    store: DefaultAttachmentStore, upload: Upload, on_commit: OnCommit
) -> None:
    mine = store._save(upload(b"identical", "a.txt"), "1")
    theirs = store._save(upload(b"identical", "a.txt"), "2")

    rows = {row.owner_id: row.file.name for row in StoredAttachment.objects.all()}
    assert rows["1"] != rows["2"]
    # Deleting one owner's copy leaves the other's bytes alone.
    with on_commit(execute=True):
        store._remove(mine.id, "1")
    assert read(store, theirs.id, "2") == b"identical"


def test_dedup_heals_when_the_shared_blob_was_lost(
    store: DefaultAttachmentStore, upload: Upload
) -> None:
    lost = store._save(upload(b"payload"), "1")
    store._save(upload(b"payload"), "1")  # a second row naming the same blob
    default_storage.delete(first_blob())

    fresh = store._save(upload(b"payload"), "1")

    assert read(store, fresh.id, "1") == b"payload"
    assert read(store, lost.id, "1") is None


def test_blob_goes_with_the_last_row(
    store: DefaultAttachmentStore, upload: Upload, on_commit: OnCommit
) -> None:
    a = store._save(upload(b"shared"), "1")
    b = store._save(upload(b"shared"), "1")
    name = first_blob()

    with on_commit(execute=True):
        store._remove(a.id, "1")
    assert default_storage.exists(name)
    assert read(store, b.id, "1") == b"shared"

    with on_commit(execute=True):
        store._remove(b.id, "1")
        store._remove(b.id, "1")  # idempotent
    assert not default_storage.exists(name)
    assert StoredAttachment.objects.count() == 0


def test_cross_owner_and_malformed_ids_look_missing(
    store: DefaultAttachmentStore, upload: Upload
) -> None:
    ref = store._save(upload(b"private"), "1")

    assert store._open(ref.id, "2") is None
    store._remove(ref.id, "2")
    store._remove("not-a-uuid", "1")
    assert store._open("not-a-uuid", "1") is None
    assert store._open("00000000000000000000000000000000", "1") is None
    assert read(store, ref.id, "1") == b"private"


def test_missing_blob_returns_none_and_warns_without_the_owner(
    store: DefaultAttachmentStore, upload: Upload, caplog: pytest.LogCaptureFixture
) -> None:
    owner = "anon:sessionkeythatisacredential"
    ref = store._save(upload(b"gone soon"), owner)
    default_storage.delete(first_blob())

    with caplog.at_level(logging.WARNING, logger="django_pydantic_agent.contrib.store"):
        assert store._open(ref.id, owner) is None

    assert ref.id in caplog.text
    assert "sessionkeythatisacredential" not in caplog.text


def test_row_without_a_blob_opens_as_none(
    store: DefaultAttachmentStore, caplog: pytest.LogCaptureFixture
) -> None:
    row = StoredAttachment.objects.create(owner_id="1", name="x")
    with caplog.at_level(logging.WARNING):
        assert store._open(row.attachment_id.hex, "1") is None
    assert row.attachment_id.hex in caplog.text


def test_a_failed_row_write_removes_the_fresh_blob(
    store: DefaultAttachmentStore, upload: Upload, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []
    real_save = InMemoryStorage.save

    def spy(self: InMemoryStorage, name: Any, content: Any, max_length: Any = None) -> str:
        stored = real_save(self, name, content, max_length)
        written.append(stored)
        return stored

    def fail(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("database went away")

    monkeypatch.setattr(InMemoryStorage, "save", spy)
    monkeypatch.setattr(StoredAttachment, "save", fail)
    with pytest.raises(RuntimeError):
        store._save(upload(b"bytes"), "1")
    assert written
    assert not default_storage.exists(written[0])


def test_bytes_go_to_the_alias_when_defined(store: DefaultAttachmentStore, upload: Upload) -> None:
    with override_settings(STORAGES=WITH_ALIAS):
        ref = store._save(upload(b"private bucket"), "1")
        name = first_blob()
        assert storages[ATTACHMENT_STORAGE_ALIAS].exists(name)
        assert not default_storage.exists(name)
        assert read(store, ref.id, "1") == b"private bucket"
        assert resolve_attachment_storage() is storages[ATTACHMENT_STORAGE_ALIAS]


def test_a_broken_alias_raises_instead_of_falling_back(
    store: DefaultAttachmentStore, upload: Upload
) -> None:
    with override_settings(STORAGES=BROKEN_ALIAS), pytest.raises(InvalidStorageError):
        store._save(upload(b"must not leak to the default bucket"), "1")
    assert StoredAttachment.objects.count() == 0


def test_storage_proxy_forwards_to_the_resolved_storage() -> None:
    proxy = attachment_storage()
    name = proxy.save("django_pydantic_agent/attachments/x.txt", SimpleUploadedFile("x", b"123"))
    assert proxy.exists(name)
    assert proxy.size(name) == 3
    assert proxy.listdir("django_pydantic_agent/attachments")[1] == ["x.txt"]
    assert proxy.url(name).endswith("x.txt")
    assert proxy.get_valid_name("a b.txt") == "a_b.txt"
    assert proxy.get_alternative_name("a", ".txt").startswith("a_")
    assert proxy.get_available_name(name) != name
    assert proxy.generate_filename("d/y.txt") == "d/y.txt"
    assert proxy.get_accessed_time(name) == default_storage.get_accessed_time(name)
    assert proxy.get_created_time(name) == default_storage.get_created_time(name)
    assert proxy.get_modified_time(name) == default_storage.get_modified_time(name)
    assert proxy.base_url == default_storage.base_url  # type: ignore[attr-defined]
    assert proxy.path(name) == default_storage.path(name)
    proxy.delete(name)
    assert not proxy.exists(name)


@pytest.mark.django_db(transaction=True)
async def test_async_api_is_owner_scoped(
    request_as: Callable[[Any], HttpRequest], alice: User, bob: User, upload: Upload
) -> None:
    store = DefaultAttachmentStore()
    ref = await store.save(upload(b"alice's"), request=request_as(alice))

    assert await store.open(ref.id, request=request_as(bob)) is None
    await store.delete(ref.id, request=request_as(bob))
    opened = await store.open(ref.id, request=request_as(alice))
    assert opened is not None
    with opened.content as content:
        assert content.read() == b"alice's"
    await store.delete(ref.id, request=request_as(alice))
    assert await store.open(ref.id, request=request_as(alice)) is None
    with pytest.raises(AnonymousOperationError):
        await store.save(upload(), request=request_as(None))


def _backdate(ref_id: str) -> None:
    StoredAttachment.objects.filter(attachment_id=ref_id).update(
        created_at=timezone.now() - timedelta(days=1)
    )


def _prune() -> None:
    call_command("agent_store_prune_attachments", "--older-than", "1h", stdout=io.StringIO())


def test_a_dedup_upload_racing_a_prune_of_the_last_sibling_keeps_its_bytes(
    store: DefaultAttachmentStore,
    upload: Upload,
    on_commit: OnCommit,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: the prune ran between the dedup lookup and the INSERT, saw no row naming
    the blob any more and deleted it; the new upload then opened as ``None``."""
    old = store._save(upload(b"payload", "a.txt"), "1")
    _backdate(old.id)
    real_lookup = DefaultAttachmentStore._reusable_blob

    def lookup_then_prune(self: DefaultAttachmentStore, *args: Any) -> str | None:
        name = real_lookup(self, *args)
        _prune()  # the interleaving: the old orphan row goes before our row exists
        return name

    monkeypatch.setattr(DefaultAttachmentStore, "_reusable_blob", lookup_then_prune)
    with on_commit(execute=True):
        new = store._save(upload(b"payload", "b.txt"), "1")

    assert not StoredAttachment.objects.filter(attachment_id=old.id).exists()
    assert read(store, new.id, "1") == b"payload"


def test_a_blob_deletion_rechecks_the_rows_at_commit(
    store: DefaultAttachmentStore, upload: Upload, on_commit: OnCommit
) -> None:
    """A row naming the blob again by the time the prune commits keeps the blob."""
    old = store._save(upload(b"payload", "a.txt"), "1")
    _backdate(old.id)
    blob = first_blob()
    with on_commit(execute=True):
        _prune()
        StoredAttachment.objects.create(owner_id="1", file=blob, size=7, sha256="0" * 64)
    assert default_storage.exists(blob)
    with on_commit(execute=True):
        StoredAttachment.objects.all().delete()
        _prune()
    assert default_storage.exists(blob)  # no row to prune, nothing deleted behind its back


@pytest.mark.django_db(transaction=True)
def test_a_dedup_upload_and_a_prune_in_parallel_keep_the_bytes(
    store: DefaultAttachmentStore, upload: Upload
) -> None:
    """Regression, with real concurrency: the lookup's row lock makes the prune wait."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Event

    old = store._save(upload(b"payload", "a.txt"), "1")
    _backdate(old.id)
    looked_up = Event()
    real_lookup = DefaultAttachmentStore._reusable_blob

    class Racing(DefaultAttachmentStore):
        def _reusable_blob(self, *args: Any) -> str | None:
            name = real_lookup(self, *args)
            looked_up.set()
            time.sleep(0.5)  # the prune deletes (or waits to delete) the old row meanwhile
            return name

    def in_thread(work: Callable[[], Any]) -> Any:
        try:
            return work()
        finally:
            connections.close_all()

    def prune_after_lookup() -> None:
        assert looked_up.wait(5)
        _prune()

    with ThreadPoolExecutor(2) as pool:
        saving = pool.submit(in_thread, lambda: Racing()._save(upload(b"payload", "b.txt"), "1"))
        pruning = pool.submit(in_thread, prune_after_lookup)
        new = saving.result()
        pruning.result()

    assert not StoredAttachment.objects.filter(attachment_id=old.id).exists()
    assert read(store, new.id, "1") == b"payload"


def test_nul_characters_in_the_upload_name_and_type_are_dropped(
    store: DefaultAttachmentStore,
) -> None:
    """Regression: PostgreSQL raised DataError (text cannot contain NUL) for such an upload."""
    ref = store._save(SimpleUploadedFile("a\x00.pdf", b"x", content_type="\x00"), "1")
    assert (ref.name, ref.mime) == ("a.pdf", "application/octet-stream")
    assert read(store, ref.id, "1") == b"x"


def blob_files() -> set[str]:
    """The file names in attachment storage (shared by every test of the process)."""
    return set(resolve_attachment_storage().listdir("django_pydantic_agent/attachments")[1])


@pytest.mark.parametrize("name", ["max_bytes_per_owner", "max_files_per_owner"])
@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "10"])
def test_bad_quotas_are_refused_at_construction(name: str, bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"^{name}={bad!r} is not valid: pass a positive"):
        DefaultAttachmentStore(**{name: bad})


def _refusal(store: DefaultAttachmentStore) -> str:
    store._save(SimpleUploadedFile("a.txt", b"a"), "refusal")
    with pytest.raises(StoreLimitError) as refused:
        store._save(SimpleUploadedFile("b.txt", b"b"), "refusal")
    return str(refused.value)


def test_the_files_quota_refuses_the_next_upload_and_writes_nothing(upload: Upload) -> None:
    assert "at most 1 file per owner" in _refusal(DefaultAttachmentStore(max_files_per_owner=1))
    store = DefaultAttachmentStore(max_files_per_owner=2)
    store._save(upload(b"one"), "1")
    store._save(upload(b"two"), "1")
    blobs = set(StoredAttachment.objects.filter(owner_id="1").values_list("file", flat=True))

    with pytest.raises(StoreLimitError) as refused:
        store._save(upload(b"three"), "1")
    with pytest.raises(StoreLimitError):
        store._save(upload(b"one"), "1")  # a deduplicated upload is one more file too

    assert str(refused.value) == (
        "This attachment store keeps at most 2 files per owner (max_files_per_owner=2), and "
        "that many are stored already: delete an attachment to upload another."
    )
    assert StoredAttachment.objects.filter(owner_id="1").count() == 2
    assert (
        set(StoredAttachment.objects.filter(owner_id="1").values_list("file", flat=True)) == blobs
    )
    storage = resolve_attachment_storage()
    assert all(storage.exists(name) for name in blobs)
    store._save(upload(b"three"), "2")  # the quota is per owner
    StoredAttachment.objects.filter(owner_id="1").first().delete()  # type: ignore[union-attr]
    store._save(upload(b"three"), "1")  # room again after a deletion


def test_the_bytes_quota_counts_stored_blobs_so_a_dedup_upload_is_free(upload: Upload) -> None:
    store = DefaultAttachmentStore(max_bytes_per_owner=10)
    store._save(upload(b"123456"), "1")
    store._save(upload(b"123456", name="again.txt"), "1")  # same bytes: no new blob
    before = blob_files()

    with pytest.raises(StoreLimitError) as refused:
        store._save(upload(b"12345"), "1")

    assert str(refused.value) == (
        "This upload of 5 bytes would take the owner's attachments to 11 bytes, over the "
        "limit of 10 bytes (max_bytes_per_owner=10): delete attachments or upload a smaller "
        "file."
    )
    assert StoredAttachment.objects.count() == 2
    # The refused upload left no blob behind.
    assert blob_files() == before
    store._save(upload(b"1234"), "1")  # exactly at the limit
    assert StoredAttachment.objects.filter(owner_id="1").count() == 3


def test_the_bytes_quota_is_checked_again_after_the_bytes_are_written(
    upload: Upload, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload that passed the first check but lost the race writes no row, keeps no blob."""
    store = DefaultAttachmentStore(max_bytes_per_owner=10)
    real_check = store._refuse_over_quota
    checks: list[int] = []

    def racing_check(owner_id: str, new_bytes: int) -> None:
        checks.append(new_bytes)
        real_check(owner_id, new_bytes)
        if len(checks) == 1:  # another upload of the owner commits while the bytes are written
            DefaultAttachmentStore()._save(upload(b"x" * 8, name="winner.txt"), owner_id)

    monkeypatch.setattr(store, "_refuse_over_quota", racing_check)
    before = blob_files()

    with pytest.raises(StoreLimitError, match="would take the owner's attachments to 13 bytes"):
        store._save(upload(b"12345"), "1")

    assert checks == [5, 5]
    assert list(StoredAttachment.objects.values_list("name", flat=True)) == ["winner.txt"]
    assert len(blob_files() - before) == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_uploads_never_overshoot_the_quotas(upload: Upload) -> None:
    store = DefaultAttachmentStore(max_files_per_owner=3, max_bytes_per_owner=1000)
    outcomes = race_to_the_quota(lambda i: store._save(upload(f"file {i}".encode()), "1"))

    assert outcomes == ["refused"] * 5 + ["saved"] * 3
    assert StoredAttachment.objects.filter(owner_id="1").count() == 3


@pytest.mark.urls("tests.contrib.store.urls")
@pytest.mark.django_db(transaction=True)
async def test_an_upload_over_a_quota_is_a_413_json_through_the_route(alice: User) -> None:
    from tests.agui.conftest import logged_in

    async with await logged_in(alice) as http:
        sent = [
            await http.post("/quota/attachments/", files={"file": (f"{i}.txt", data, "text/plain")})
            for i, data in enumerate([b"123456", b"12345", b"abc", b"xyz"])
        ]
        listing = await StoredAttachment.objects.filter(owner_id=str(alice.pk)).acount()
    assert [response.status_code for response in sent] == [201, 413, 201, 413]
    assert sent[1].headers["content-type"] == "application/json"
    assert "over the limit of 10 bytes (max_bytes_per_owner=10)" in sent[1].json()["error"]
    assert "at most 2 files per owner (max_files_per_owner=2)" in sent[3].json()["error"]
    assert listing == 2
