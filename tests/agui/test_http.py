"""Route-level HTTP behaviour: database errors as JSON, body caps before reading, no-store."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from django.apps import apps
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core.handlers.wsgi import WSGIHandler
from django.db import OperationalError, connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from django.test import Client, RequestFactory

from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.http import (
    DATABASE_BUSY,
    DATABASE_FAILED,
    DEFAULT_MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    NESTED_TOO_DEEPLY,
    is_transient_database_error,
    json_body_limit,
    read_json_object,
)
from tests.agui.conftest import event_types, logged_in, run_body

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


def _store_tables() -> list[str]:
    config = apps.get_containing_app_config("django_pydantic_agent.contrib.store.models")
    assert config is not None
    return [model._meta.db_table for model in config.get_models()]


# Every Django connection this module's tests open, in any thread: async views run their ORM
# calls in a thread of their own (asgiref's per-request thread-sensitive executor), whose
# connection the test cannot reach through ``django.db.connection``.
_OPENED: weakref.WeakSet[BaseDatabaseWrapper] = weakref.WeakSet()


def _track(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    _OPENED.add(connection)


@pytest.fixture(autouse=True)
def _track_connections() -> Iterator[None]:
    connection_created.connect(_track)
    yield
    connection_created.disconnect(_track)


# How long a view waits on the lock before SQLite says "database is locked"; the settings'
# 20 s busy timeout would make every locked request wait that long first.
_LOCKED_BUSY_TIMEOUT = 0.05


@contextmanager
def _sqlite_busy_timeout(seconds: float) -> Iterator[None]:
    """Lower the busy timeout of every open SQLite connection and of those opened meanwhile."""
    options = connection.settings_dict["OPTIONS"]  # shared by every thread's connection
    saved = options.get("timeout", 5)

    def set_all(value: float) -> None:
        for wrapper in list(_OPENED):
            if wrapper.connection is not None:  # check_same_thread=False: any thread may
                wrapper.connection.execute(f"PRAGMA busy_timeout = {int(value * 1000)}")

    options["timeout"] = seconds
    set_all(seconds)
    try:
        yield
    finally:
        options["timeout"] = saved
        set_all(saved)


@contextmanager
def store_tables_locked(*also: str) -> Iterator[None]:
    """Hold a real write lock on every contrib.store table from a second connection.

    SQLite (a file database in rollback-journal mode): an ``EXCLUSIVE`` transaction, so every
    other connection fails with "database is locked" after a busy timeout lowered for the
    duration. PostgreSQL: ``LOCK TABLE ... ACCESS EXCLUSIVE``, and every statement waiting on
    it is cancelled, as a lock or statement timeout would.
    """
    tables = [*_store_tables(), *also]
    if connection.vendor == "sqlite":
        locker = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
        assert locker.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        try:
            locker.execute("BEGIN EXCLUSIVE")
            for table in tables:  # the tables exist: the lock covers what the views use
                locker.execute(f'SELECT 1 FROM "{table}" LIMIT 1')
            with _sqlite_busy_timeout(_LOCKED_BUSY_TIMEOUT):
                yield
        finally:
            locker.execute("ROLLBACK")
            locker.close()
        return
    yield from _postgres_tables_locked(tables)  # pragma: no cover - PostgreSQL leg


def _postgres_tables_locked(tables: list[str]) -> Iterator[None]:  # pragma: no cover
    """PostgreSQL: lock the tables, and cancel every statement that waits on the lock.

    A cancelled statement fails with ``query_canceled`` (SQLSTATE 57014), exactly what a
    ``statement_timeout`` or ``lock_timeout`` would raise, without touching Django's settings.
    """
    import psycopg

    db = connection.settings_dict
    params = {
        "dbname": db["NAME"],
        "user": db["USER"],
        "password": db["PASSWORD"],
        "host": db["HOST"],
        "port": db["PORT"] or None,
    }
    stop = threading.Event()

    def cancel_waiters() -> None:
        with psycopg.connect(**params, autocommit=True) as watcher:
            while not stop.wait(0.02):
                watcher.execute(
                    "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE datname = "
                    "current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                )

    with psycopg.connect(**params) as locker:
        locker.execute(
            "LOCK TABLE " + ", ".join(f'"{t}"' for t in tables) + " IN ACCESS EXCLUSIVE MODE"
        )
        watchdog = threading.Thread(target=cancel_waiters)
        watchdog.start()
        try:
            yield
        finally:
            stop.set()
            watchdog.join()
            locker.rollback()


def problem_records(caplog: Any) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_locked_database_is_a_json_503_with_retry_after_logged_once(
    alice: Any, caplog: Any
) -> None:
    async with await logged_in(alice) as http:
        uploaded = await http.post(
            "/stored/attachments/", files={"file": ("a.txt", b"abc", "text/plain")}
        )
        attachment_id = uploaded.json()["id"]
        caplog.set_level(logging.WARNING)
        with store_tables_locked():
            caplog.clear()
            listing = await http.get("/stored/threads/")
            logged = problem_records(caplog)
            caplog.clear()
            rename = await http.patch("/stored/threads/t1/", json={"title": "x"})
            delete = await http.delete("/stored/threads/t1/")
            run = await http.post("/stored/", json=run_body())
            attachment = await http.delete(f"/stored/attachments/{attachment_id}/")
        after = await http.get("/stored/threads/")
        kept = await http.get(f"/stored/attachments/{attachment_id}/")
    assert kept.status_code == 200  # the refused DELETE deleted nothing
    for response in (listing, rename, delete, run, attachment):
        assert response.status_code == 503, response.content
        assert response.headers["content-type"] == "application/json"
        assert response.headers["retry-after"] == "1"
        assert response.json() == {"error": DATABASE_BUSY}
    [record] = logged  # once, by us; Django's request logger adds nothing
    assert record.name == "django_pydantic_agent.agui"
    assert record.levelno == logging.WARNING
    assert "GET /stored/threads/ failed with a database error" in record.getMessage()
    assert record.exc_info is not None
    assert is_transient_database_error(record.exc_info[1])  # type: ignore[arg-type]
    assert after.status_code == 200  # the lock is gone, the route works again


async def test_any_other_database_error_is_a_json_500_without_detail(
    alice: Any, caplog: Any
) -> None:
    caplog.set_level(logging.WARNING)
    async with await logged_in(alice) as http:
        response = await http.get("/broken-db/threads/")
    assert response.status_code == 500
    assert response.json() == {"error": DATABASE_FAILED}
    assert "s3cr3t" not in response.text
    assert "retry-after" not in response.headers
    [record] = problem_records(caplog)
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith("GET /broken-db/threads/ failed")
    assert record.exc_info is not None
    assert "no_such_table_s3cr3t" in str(record.exc_info[1])


async def test_a_path_with_a_newline_cannot_forge_a_log_line(alice: Any, caplog: Any) -> None:
    caplog.set_level(logging.WARNING)
    async with await logged_in(alice) as http:
        # The session table too: authentication fails before the id is even looked at.
        with store_tables_locked("django_session"):
            response = await http.delete("/stored/threads/t%0AERROR%20forged/")
    assert response.status_code == 503
    [record] = problem_records(caplog)
    assert "\n" not in record.getMessage()
    assert "'/stored/threads/t\\nERROR forged/'" in record.getMessage()


def test_transient_errors_are_recognised_by_message_or_sqlstate() -> None:
    class PgError(Exception):
        sqlstate = "57014"  # query_canceled: statement_timeout

    timeout = OperationalError("canceling statement due to statement timeout")
    timeout.__cause__ = PgError()
    assert is_transient_database_error(timeout)
    assert is_transient_database_error(OperationalError("database is locked"))
    assert not is_transient_database_error(OperationalError("no such table: x"))
    assert not is_transient_database_error(ValueError("database is locked"))


def test_the_json_cap_follows_the_setting(settings: Any) -> None:
    assert json_body_limit(10) == 10
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 123
    assert json_body_limit(None) == 123
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = None
    assert json_body_limit(None) == DEFAULT_MAX_BODY_BYTES


# Body caps in the view: a declared length over the cap is refused before the body is read.


class CountingInput(io.BytesIO):
    """A WSGI ``wsgi.input`` that records how many bytes the application read from it."""

    consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self.consumed += len(chunk)
        return chunk

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        self.consumed += len(line)
        return line


_SHAPE = 'Send a JSON object with a "name".'


@pytest.mark.parametrize(
    ("body", "content_type", "status", "error"),
    [
        (b"{oops", "application/json", 400, "The body is not JSON."),
        (b"\xff\xfe", "application/json", 400, "The body is not JSON."),
        (b"[1, 2]", "application/json", 400, _SHAPE),
        (b'"name"', "application/json", 400, _SHAPE),
        (b"[" * 20_000 + b"]" * 20_000, "application/json", 400, NESTED_TOO_DEEPLY),
        # Past MAX_JSON_DEPTH, on every Python (3.13's json parses 1,100 levels, 3.11's not).
        (
            b'{"a": ' + b"[" * 1_100 + b"]" * 1_100 + b"}",
            "application/json",
            400,
            NESTED_TOO_DEEPLY,
        ),
        (b'{"a": ' + b"[" * 200 + b"]" * 200 + b"}", "application/json", 400, NESTED_TOO_DEEPLY),
        (b'{"name": "' + b"x" * 64_000 + b'"}', "application/json", 413, "send a shorter name."),
        (b'{"name": "x"}', "text/plain", 415, "Content-Type: application/json"),
    ],
)
def test_read_json_object_names_what_is_wrong_with_the_body(
    body: bytes, content_type: str, status: int, error: str, caplog: Any
) -> None:
    request = RequestFactory().generic("POST", "/x/", body, content_type=content_type)
    with (
        caplog.at_level(logging.WARNING, logger="django_pydantic_agent.agui"),
        pytest.raises(Refusal) as refused,
    ):
        read_json_object(
            request,
            limit=48_000,
            too_big="send a shorter name.",
            not_object=_SHAPE,
            not_json="The body is not JSON.",
        )
    answer = refused.value.response()
    assert answer.status_code == status
    assert error in json.loads(answer.content)["error"]
    # A 400 is one WARNING line naming it; the body itself is never echoed.
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == (1 if status == 400 else 0)
    assert all("oops" not in line for line in lines)


def test_a_body_at_the_depth_limit_is_read() -> None:
    body = b'{"name": ' + b"[" * (MAX_JSON_DEPTH - 1) + b"]" * (MAX_JSON_DEPTH - 1) + b"}"
    request = RequestFactory().generic("POST", "/x/", body, content_type="application/json")
    answer = read_json_object(request, limit=48_000, too_big="", not_object=_SHAPE)
    assert isinstance(answer, dict)


def test_read_json_object_answers_the_object_and_defaults_not_json_to_not_object() -> None:
    factory = RequestFactory()
    ok = factory.post("/x/", b'{"name": "x"}', content_type="application/json")
    assert read_json_object(ok, limit=48, too_big="-", not_object=_SHAPE) == {"name": "x"}
    bad = factory.post("/x/", b"{oops", content_type="application/json")
    with pytest.raises(Refusal) as refused:
        read_json_object(bad, limit=48, too_big="-", not_object=_SHAPE)
    answer = refused.value.response()
    assert (answer.status_code, json.loads(answer.content)) == (400, {"error": _SHAPE})


def wsgi_request(
    method: str, path: str, body: bytes, *, declared: int | None, cookie: str = "", **extra: str
) -> tuple[int, dict[str, Any], int]:
    """Serve one request through Django's real WSGI handler: ``(status, json, bytes read)``."""
    stream = CountingInput(body)
    environ = RequestFactory()._base_environ(  # type: ignore[attr-defined]
        PATH_INFO=path,
        REQUEST_METHOD=method,
        CONTENT_TYPE=extra.pop("CONTENT_TYPE", "application/json"),
        HTTP_COOKIE=cookie,
        **{"wsgi.input": stream},
        **extra,
    )
    if declared is None:
        environ.pop("CONTENT_LENGTH", None)
    else:
        environ["CONTENT_LENGTH"] = str(declared)
    status: list[str] = []
    chunks = WSGIHandler()(environ, lambda code, headers: status.append(code))
    content = b"".join(chunks)
    return int(status[0].split()[0]), json.loads(content) if content else {}, stream.consumed


@pytest.fixture
def alice_cookie() -> str:
    user = get_user_model().objects.create_user("alice-wsgi", password="pw")
    client = Client()
    client.force_login(user)
    name = django_settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}"


HUGE = 200 * 1024 * 1024


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/stored/"), ("PATCH", "/stored/threads/t1/"), ("POST", "/small-body/")],
)
def test_a_declared_huge_body_is_413_before_a_byte_is_read(
    method: str, path: str, alice_cookie: str
) -> None:
    body = json.dumps(run_body()).encode()
    status, payload, consumed = wsgi_request(method, path, body, declared=HUGE, cookie=alice_cookie)
    assert status == 413
    assert "larger than this route's limit" in payload["error"]
    assert consumed == 0


def test_the_server_cap_replaces_the_setting(alice_cookie: str) -> None:
    body = json.dumps(run_body(text="x" * 400)).encode()
    status, payload, consumed = wsgi_request(
        "POST", "/small-body/", body, declared=len(body), cookie=alice_cookie
    )
    assert status == 413
    assert "limit of 300 bytes" in payload["error"]
    assert consumed == 0


def test_a_stranger_is_refused_without_reading_the_body() -> None:
    status, _, consumed = wsgi_request("POST", "/stored/", b"{}" * 100, declared=HUGE)
    assert status == 401
    assert consumed == 0


def test_the_upload_precheck_refuses_before_reading_the_body(alice_cookie: str) -> None:
    from tests.agui.urls import UPLOAD_CAP

    body = b"--x\r\n" + b"y" * (256 * 1024)
    status, payload, consumed = wsgi_request(
        "POST",
        "/stored/attachments/",
        body,
        declared=len(body),
        cookie=alice_cookie,
        CONTENT_TYPE="multipart/form-data; boundary=x",
    )
    assert status == 413
    assert f"{UPLOAD_CAP}-byte limit" in payload["error"]
    assert consumed == 0  # not parsed, not even the first chunk


async def test_a_chunked_json_body_over_the_cap_is_413_without_the_middleware(
    alice: Any,
) -> None:
    # Plain get_asgi_application(): Django spools the body, the view still reads at most cap+1.
    from tests.agui.conftest import asgi_app, session_cookie

    cookie = f"{django_settings.SESSION_COOKIE_NAME}={await session_cookie(alice)}"
    chunks = [b" " * 100] * 5
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if not chunks:
            await asyncio.sleep(30)  # a client that has sent everything just waits
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/small-body/",
        "raw_path": b"/small-body/",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"cookie", cookie.encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    await asyncio.wait_for(asgi_app()(scope, receive, send), timeout=10)
    [start] = [m for m in sent if m["type"] == "http.response.start"]
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert start["status"] == 413
    assert "limit of 300 bytes" in json.loads(body)["error"]


async def test_json_answers_are_private_and_never_stored(alice: Any) -> None:
    async with await logged_in(alice) as http:
        run = await http.post("/stored/", json=run_body())
        responses = [
            await http.get("/stored/threads/"),
            await http.get("/stored/threads/thread-1/"),
            await http.patch("/stored/threads/thread-1/", json={"title": "Sums"}),
            await http.get("/stored/threads/missing/"),
            await http.delete("/stored/threads/thread-1/"),
            await http.post(
                "/stored/attachments/", files={"file": ("a.txt", b"abc", "text/plain")}
            ),
            await http.get("/stored/attachments/missing/"),
        ]
    assert event_types(run.text)[-1] == "RUN_FINISHED"
    assert run.headers["cache-control"] == "no-cache"  # the stream keeps its own header
    for response in responses:
        assert response.headers["cache-control"] == "private, no-store", response.request.url


async def test_unauthenticated_answers_are_private_too(client: httpx.AsyncClient) -> None:
    response = await client.get("/stored/threads/")
    assert response.status_code == 401
    assert response.headers["cache-control"] == "private, no-store"


async def test_a_lock_after_streaming_started_loses_nothing(alice: Any) -> None:
    # Once the stream is open, persistence runs behind it: a database lock mid-run does not end
    # the client's stream, and the answer is written once the lock is gone.
    from tests.agui.agents import GATE

    GATE.reset()
    async with await logged_in(alice) as http:
        task = asyncio.ensure_future(http.post("/gated/", json=run_body(thread_id="locked")))
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        # The new thread's chat and user message are written as the run starts; the lock
        # comes after them, while the answer streams.
        for _ in range(200):
            if (await http.get("/gated/threads/locked/")).status_code == 200:
                break
            await asyncio.sleep(0.02)
        with store_tables_locked():
            GATE.released.set()
            response = await task
        events = event_types(response.text)
        assert response.status_code == 200
        assert events[-1] == "RUN_FINISHED"
        stored: list[dict[str, Any]] = []
        for _ in range(200):
            reply = await http.get("/gated/threads/locked/")
            if reply.status_code == 200:
                stored = reply.json()["messages"]
                if any(m.get("role") == "assistant" for m in stored):
                    break
            await asyncio.sleep(0.05)
    assert [m["role"] for m in stored][:1] == ["user"]
    assert any(m.get("role") == "assistant" and m.get("content") for m in stored)
