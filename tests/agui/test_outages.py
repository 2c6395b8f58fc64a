"""Outages seen from the routes: a cache that is down, a storage that refuses, a database gone.

The faults are injected (a local-memory cache that refuses every call while ``down``, a file
storage that fills up or raises); everything else is the real ASGI app, ORM and run path. The
real restarts of PostgreSQL and Redis under two workers are in tests/reliability/test_outages.py.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from asgiref.sync import sync_to_async
from django.core.cache.backends.locmem import LocMemCache
from django.core.files.storage import FileSystemStorage
from django.db import OperationalError
from django.test import RequestFactory, override_settings

from django_pydantic_agent.agui.http import (
    BACKEND_UNAVAILABLE,
    STORAGE_FULL,
    backend_error_response,
)
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.store import transfer
from django_pydantic_agent.contrib.store.models import ATTACHMENT_STORAGE_ALIAS, StoredAttachment
from django_pydantic_agent.contrib.store.runs import DefaultRunStore
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from django_pydantic_agent.persistence import StoreLimitError
from django_pydantic_agent.persistence.outages import (
    DatabaseUnavailableError,
    StorageUnavailableError,
)
from tests.agui.conftest import logged_in, run_body, sse_frames

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]

CACHE_DOWN = "Error 111 connecting to 127.0.0.1:6379. Connection refused."


class RestartingCache(LocMemCache):
    """``LocMemCache`` that refuses every call, as Redis's client does, while ``down``."""

    down = False

    def _refuse(self) -> None:
        if RestartingCache.down:
            raise redis.exceptions.ConnectionError(CACHE_DOWN)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()
        return super().get(*args, **kwargs)

    def get_many(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()
        return super().get_many(*args, **kwargs)

    def set(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()
        return super().set(*args, **kwargs)

    def set_many(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()
        return super().set_many(*args, **kwargs)

    def add(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()
        return super().add(*args, **kwargs)

    def delete_many(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()
        return super().delete_many(*args, **kwargs)


@pytest.fixture
def cache() -> Any:
    RestartingCache.down = False
    backend = f"{__name__}.RestartingCache"
    with override_settings(CACHES={"default": {"BACKEND": backend, "LOCATION": "outages"}}):
        yield RestartingCache
    RestartingCache.down = False


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    logged = [r for r in caplog.records if r.name.startswith("django_pydantic_agent")]
    assert not [r.getMessage() for r in logged if r.exc_info], "an outage logs no traceback"


# Redis down: reattach and cancel of a run on another worker are a 503, then work.


async def test_reattach_and_cancel_on_another_worker_are_a_503_while_the_cache_is_down(
    alice: Any, cache: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = DefaultRunStore()
    owner = str(alice.pk)
    await store.start(owner_id=owner, thread_id="elsewhere", run_id="r9", worker_id="other:1")
    path = "/stored/runs/elsewhere/r9/"
    async with await logged_in(alice) as http:
        cache.down = True
        reattach = await http.get(path)
        cancel = await http.post(f"{path}cancel/")
        cache.down = False
        cancelled = await http.post(f"{path}cancel/")
        await store.finish(
            owner_id=owner, thread_id="elsewhere", run_id="r9", status="interrupted", last_seq=4
        )
        reattached = await http.get(path)
    unavailable = {"error": BACKEND_UNAVAILABLE.format(backend="The cache")}
    for answer in (reattach, cancel):
        assert answer.status_code == 503
        assert answer.json() == unavailable
        assert answer.headers["retry-after"] == "1"
    assert cancelled.status_code == 202
    assert cancelled.json() == {"runId": "r9", "status": "cancelling", "cancelled": True}
    assert reattached.status_code == 200
    types = [event["type"] for _, event in sse_frames(reattached.text)]
    assert types == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    no_traceback(caplog)


# Redis down: a run goes on streaming on its own worker, and is stored whole.


async def test_a_run_streams_and_is_stored_whole_while_the_cache_is_down(
    alice: Any, cache: Any, caplog: pytest.LogCaptureFixture
) -> None:
    cache.down = True
    async with await logged_in(alice) as http:
        response = await http.post("/stored/", json=run_body(thread_id="t-cache"))
        frames = sse_frames(response.text)
        await RunCoordinator.wait_for_all_runs()
        cache.down = False
        thread = (await http.get("/stored/threads/t-cache/")).json()
    assert response.status_code == 200
    assert [frame_id for frame_id, _ in frames] == [f"run-1:{n}" for n in range(1, len(frames) + 1)]
    assert frames[-1][1]["type"] == "RUN_FINISHED"
    answer = "".join(e["delta"] for _, e in frames if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert answer
    assert thread["messages"][-1]["content"] == answer
    assert thread["messages"][-1]["status"] == "complete"
    assert thread.get("activeRun") is None
    relay_lines = [m for m in caplog.messages if m.startswith("Could not relay run")]
    assert len(relay_lines) == 1, "one line per outage, not one per tick"
    no_traceback(caplog)


# Redis down: the sweeper skips its turns, then takes its lease again and sweeps.


async def test_the_sweeper_outlives_a_cache_outage_and_sweeps_once_it_is_back(
    cache: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = DefaultRunStore()
    coordinator = RunCoordinator(
        lambda *args: None, run_store=store, sweep_interval_seconds=0.05, lease_seconds=0.1
    )
    await store.start(owner_id="o", thread_id="t", run_id="dead", worker_id="gone:1")
    cache.down = True
    caplog.set_level(logging.INFO, logger="django_pydantic_agent.agui")
    try:
        assert coordinator.start_sweeper()
        await asyncio.sleep(0.5)  # about ten turns, each refused by the cache
        record = await store.get(owner_id="o", thread_id="t", run_id="dead")
        assert record is not None
        assert record.running, "no lease, no sweep"
        cache.down = False
        for _ in range(100):
            record = await store.get(owner_id="o", thread_id="t", run_id="dead")
            if record is not None and not record.running:
                break
            await asyncio.sleep(0.05)
        for _ in range(100):  # the sweep that ended the run logs its recovery once it returns
            if "Sweeping stale runs works again." in caplog.messages:
                break
            await asyncio.sleep(0.02)
    finally:
        await coordinator.aclose()
    assert record is not None
    assert record.status == "errored"
    assert [m for m in caplog.messages if m.startswith("Sweeping stale runs")] == [
        f"Sweeping stale runs failed (ConnectionError: {CACHE_DOWN}); retrying until the "
        "backend is back.",
        "Sweeping stale runs works again.",
    ]
    no_traceback(caplog)


# The database gone: a route answers 503, with one line in the log.


def test_a_lost_database_connection_is_a_503_logged_as_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost = OperationalError("server closed the connection unexpectedly")
    lost.__cause__ = psycopg.OperationalError("server closed the connection unexpectedly")
    request = RequestFactory().get("/agent/threads/")
    with caplog.at_level(logging.WARNING, logger="django_pydantic_agent.agui"):
        response = backend_error_response(request, lost)
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert (
        response.content
        == b'{"error": "The database is unavailable right now; retry in a moment."}'
    )
    [record] = caplog.records
    assert not record.exc_info
    assert "answered 503" in record.getMessage()


# A storage that fails: 507 (full) or 503, no row, no blob, nothing counted.


class FullDisk(FileSystemStorage):
    """Writes the first bytes of a file, then runs out of space (ENOSPC)."""

    def _save(self, name: str, content: Any) -> str:
        path = Path(self.path(name))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.read(4))
        raise OSError(errno.ENOSPC, "No space left on device")


class Unreachable(FileSystemStorage):
    """A bucket that cannot be reached: every write raises."""

    def _save(self, name: str, content: Any) -> str:
        raise RuntimeError("the bucket could not be reached")


def storages(backend: type[FileSystemStorage], root: Path) -> dict[str, Any]:
    return {
        "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        ATTACHMENT_STORAGE_ALIAS: {
            "BACKEND": f"{__name__}.{backend.__name__}",
            "OPTIONS": {"location": str(root)},
        },
    }


def files_under(root: Path) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file()]


@pytest.mark.parametrize(
    ("backend", "status", "message"),
    [
        (FullDisk, 507, STORAGE_FULL),
        (Unreachable, 503, BACKEND_UNAVAILABLE.format(backend="The file storage")),
    ],
)
async def test_an_upload_whose_storage_write_fails_leaves_no_row_and_no_blob(
    alice: Any, tmp_path: Path, backend: type[FileSystemStorage], status: int, message: str
) -> None:
    with override_settings(STORAGES=storages(backend, tmp_path)):
        async with await logged_in(alice) as http:
            response = await http.post(
                "/stored/attachments/", files={"file": ("notes.txt", b"hello world", "text/plain")}
            )
    assert response.status_code == status
    assert response.json() == {"error": message}
    assert response.headers["retry-after"] == "1"
    assert await StoredAttachment.objects.acount() == 0
    assert files_under(tmp_path) == [], "what was written of the blob is deleted"


async def test_a_failed_upload_counts_nothing_against_the_quota(alice: Any, tmp_path: Path) -> None:
    store = DefaultAttachmentStore(max_files_per_owner=1, max_bytes_per_owner=11)
    request = RequestFactory().post("/")
    request.user = alice

    def upload() -> Any:
        from django.core.files.uploadedfile import SimpleUploadedFile

        return SimpleUploadedFile("notes.txt", b"hello world", content_type="text/plain")

    with (
        override_settings(STORAGES=storages(FullDisk, tmp_path / "full")),
        pytest.raises(StorageUnavailableError),
    ):
        await store.save(upload(), request=request)
    with override_settings(STORAGES=storages(FileSystemStorage, tmp_path / "ok")):
        ref = await store.save(upload(), request=request)  # the one file the quota allows
        with pytest.raises(StoreLimitError):
            await store.save(upload(), request=request)
    assert ref.size == 11
    assert await sync_to_async(StoredAttachment.objects.count)() == 1
    assert files_under(tmp_path / "full") == []


# The thread routes of contrib.store (branches, fork, export, import) go through unit_of_work.


def _lost_connection(*args: Any, **kwargs: Any) -> Any:
    lost = OperationalError("server closed the connection unexpectedly")
    lost.__cause__ = psycopg.OperationalError("server closed the connection unexpectedly")
    raise lost


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.agui.urls")
async def test_an_export_during_a_database_outage_is_a_json_503_logged_as_one_line(
    alice: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with await logged_in(alice) as http:
        created = await http.post("/history/", json=run_body(thread_id="t-out"))
        assert created.status_code == 200
        monkeypatch.setattr(transfer, "export", _lost_connection)
        with caplog.at_level(logging.WARNING, logger="django_pydantic_agent.agui"):
            response = await http.get("/history/threads/t-out/export/?format=json")
        monkeypatch.undo()
        again = await http.get("/history/threads/t-out/export/?format=json")
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert response.json() == {"error": BACKEND_UNAVAILABLE.format(backend="The database")}
    [record] = caplog.records
    assert not record.exc_info
    assert again.status_code == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("hook", ["export", "import_document", "fork", "branch_points"])
async def test_the_thread_routes_of_the_store_raise_an_outage_as_database_unavailable(
    alice: Any, monkeypatch: pytest.MonkeyPatch, hook: str
) -> None:
    request = RequestFactory().get("/")
    request.user = alice
    store = DefaultConversationStore()
    monkeypatch.setattr(transfer, "export", _lost_connection)
    monkeypatch.setattr(transfer, "import_document", _lost_connection)
    monkeypatch.setattr(transfer, "fork", _lost_connection)
    monkeypatch.setattr(store, "_thread_row", _lost_connection)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "export": lambda: store.export("t1", request=request),
        "import_document": lambda: store.import_document({}, "t2", request=request),
        "fork": lambda: store.fork("t1", "m1", "t3", request=request),
        "branch_points": lambda: store.branch_points("t1", request=request),
    }
    # A chat-history caller retries a ConnectionError; a route answers it as a JSON 503.
    with pytest.raises(DatabaseUnavailableError) as caught:
        await calls[hook]()
    assert isinstance(caught.value, ConnectionError)
    assert "The database is unavailable" in str(caught.value)
