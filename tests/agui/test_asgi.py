"""``BodyLimitMiddleware``: oversized bodies are refused before Django reads them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest

from django_pydantic_agent.agui import BodyLimitMiddleware, UploadLimitMiddleware
from django_pydantic_agent.agui.asgi import _route_limit
from django_pydantic_agent.agui.attachments import MULTIPART_OVERHEAD_BYTES
from django_pydantic_agent.agui.http import binary_size
from tests.agui.conftest import asgi_app, run_body
from tests.agui.urls import UPLOAD_CAP

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]

LIMIT = UPLOAD_CAP + MULTIPART_OVERHEAD_BYTES


class Exchange:
    """Drive one HTTP request through an ASGI app, counting the body bytes it pulls."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)
        self.pulled = 0
        self.sent: list[MutableMapping[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if not self.chunks:
            await asyncio.sleep(30)  # a client that has sent everything just waits
        chunk = self.chunks.pop(0)
        self.pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        assert len(starts) == 1
        return int(starts[0]["status"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")


def scope(
    path: str,
    *,
    method: str = "POST",
    headers: list[tuple[bytes, bytes]] | None = None,
    root_path: str = "",
) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": root_path,
        "headers": [(b"host", b"testserver"), *(headers or [])],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


async def serve(exchange: Exchange, request_scope: dict[str, Any]) -> None:
    app = UploadLimitMiddleware(asgi_app())
    await asyncio.wait_for(app(request_scope, exchange.receive, exchange.send), timeout=10)


async def test_declared_oversized_upload_is_refused_without_reading() -> None:
    exchange = Exchange([b"x" * 10])
    headers = [
        (b"content-length", str(LIMIT + 1).encode()),
        (b"content-type", b"multipart/form-data; boundary=x"),
    ]
    await serve(exchange, scope("/stored/attachments/", headers=headers))
    assert exchange.status == 413
    assert exchange.pulled == 0
    error = json.loads(exchange.body)["error"]
    assert error == "Uploads are limited to 1024 bytes (1 KiB); this request is larger."
    assert str(LIMIT) not in error  # the envelope allowance stays internal


async def test_chunked_oversized_upload_is_cut_off_at_the_cap() -> None:
    chunk = b"x" * 4096
    exchange = Exchange([chunk] * 64)  # 256 KiB, no Content-Length
    headers = [(b"content-type", b"multipart/form-data; boundary=x")]
    await serve(exchange, scope("/stored/attachments/", headers=headers))
    assert exchange.status == 413
    assert exchange.pulled <= LIMIT + len(chunk)
    assert len(exchange.chunks) > 0  # the rest was never read
    assert f"limited to {UPLOAD_CAP} bytes" in json.loads(exchange.body)["error"]


async def test_root_path_is_stripped_before_resolving() -> None:
    exchange = Exchange([b""])
    headers = [(b"content-length", str(LIMIT + 1).encode())]
    await serve(
        exchange, scope("/prefix/stored/attachments/", headers=headers, root_path="/prefix")
    )
    assert exchange.status == 413


async def test_other_requests_pass_through(alice: Any) -> None:
    body = json.dumps(run_body()).encode()
    exchange = Exchange([body])
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await serve(exchange, scope("/open/", headers=headers))
    assert exchange.status == 200
    assert b"RUN_FINISHED" in exchange.body


async def test_small_upload_reaches_the_view() -> None:
    exchange = Exchange([b"x" * 100, b"y" * 100])
    headers = [(b"content-type", b"multipart/form-data; boundary=x")]
    await serve(exchange, scope("/stored/attachments/", headers=headers))
    assert exchange.status == 401  # the view ran: it authenticates first


def test_each_route_has_its_own_cap(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 5000
    assert _route_limit(scope("/stored/attachments/"), None) == (UPLOAD_CAP, True)
    assert _route_limit(scope("/stored/attachments/", method="GET"), None) == (UPLOAD_CAP, True)
    assert _route_limit(scope("/stored/"), None) == (5000, False)
    assert _route_limit(scope("/stored/threads/t/", method="PATCH"), None) == (5000, False)
    assert _route_limit(scope("/small-body/"), None) == (300, False)
    assert _route_limit(scope("/no/such/route/"), None) is None
    assert _route_limit(scope("/no/such/route/"), 7) == (7, False)


@pytest.mark.parametrize(
    ("limit", "text"),
    [
        (5 * 1024 * 1024, "5 MiB"),
        (1536, "1.5 KiB"),
        (3 * 1024**3, "3 GiB"),
        (1000, "1000 bytes"),
    ],
)
def test_limits_are_named_in_binary_units(limit: int, text: str) -> None:
    assert binary_size(limit) == text


async def test_a_limit_under_a_kibibyte_is_named_once() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("an oversized upload never reaches the app")

    def view() -> None: ...

    view.agui_upload_max_bytes = 100  # type: ignore[attr-defined]
    exchange = Exchange([])
    headers = [(b"content-length", str(100 + MULTIPART_OVERHEAD_BYTES + 1).encode())]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            "django_pydantic_agent.agui.asgi.resolve", lambda path: type("M", (), {"func": view})
        )
        await UploadLimitMiddleware(app)(
            scope("/anything/", headers=headers), exchange.receive, exchange.send
        )
    assert exchange.status == 413
    assert json.loads(exchange.body)["error"] == (
        "Uploads are limited to 100 bytes; this request is larger."
    )


async def test_malformed_content_length_falls_back_to_counting() -> None:
    exchange = Exchange([b"x" * 4096] * 64)
    await serve(exchange, scope("/stored/attachments/", headers=[(b"content-length", b"lots")]))
    assert exchange.status == 413
    assert exchange.pulled <= LIMIT + 4096


async def test_an_app_reading_past_the_refusal_only_sees_disconnects() -> None:
    seen: list[str] = []

    async def reader(scope: Any, receive: Any, send: Any) -> None:
        for _ in range(3):
            seen.append((await receive())["type"])

    exchange = Exchange([b"x" * (LIMIT + 1), b"more"])
    app = UploadLimitMiddleware(reader)
    await app(scope("/stored/attachments/"), exchange.receive, exchange.send)
    assert seen == ["http.disconnect", "http.disconnect", "http.disconnect"]
    assert exchange.status == 413
    assert exchange.chunks == [b"more"]


async def test_a_client_disconnect_passes_through() -> None:
    seen: list[Any] = []

    async def reader(scope: Any, receive: Any, send: Any) -> None:
        seen.append(await receive())

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        raise AssertionError("nothing may be sent")

    await UploadLimitMiddleware(reader)(scope("/stored/attachments/"), receive, send)
    assert seen == [{"type": "http.disconnect"}]


async def test_the_wrapper_marks_every_http_scope() -> None:
    from django_pydantic_agent.agui.attachments import UPLOAD_LIMIT_SCOPE_KEY

    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope)

    original = scope("/open/", method="GET")
    await UploadLimitMiddleware(app)(original, Exchange([]).receive, Exchange([]).send)
    await UploadLimitMiddleware(app, lifespan=False)(
        {"type": "lifespan"}, Exchange([]).receive, Exchange([]).send
    )
    assert seen[0][UPLOAD_LIMIT_SCOPE_KEY] is True
    assert UPLOAD_LIMIT_SCOPE_KEY not in original  # the server's scope is not mutated
    assert UPLOAD_LIMIT_SCOPE_KEY not in seen[1]


class LazyExchange(Exchange):
    """A client with ``total`` bytes to send in ``chunk``-sized pieces, made only when read."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        super().__init__([])
        self.remaining = total
        self.chunk = chunk

    async def receive(self) -> dict[str, Any]:
        size = min(self.chunk, self.remaining)
        self.remaining -= size
        self.pulled += size
        return {"type": "http.request", "body": b" " * size, "more_body": self.remaining > 0}


HUGE = 200 * 1024 * 1024
JSON = (b"content-type", b"application/json")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/stored/"),
        ("POST", "/open/"),
        ("PATCH", "/stored/threads/t1/"),
        ("DELETE", "/stored/threads/t1/"),
        ("GET", "/stored/attachments/"),
    ],
)
@pytest.mark.parametrize("authenticated", [False, True])
async def test_a_declared_200_mb_body_is_refused_on_every_route_unread(
    method: str, path: str, authenticated: bool, alice: Any
) -> None:
    from tests.agui.conftest import session_cookie

    headers = [JSON, (b"content-length", str(HUGE).encode())]
    if authenticated:
        headers.append((b"cookie", f"sessionid={await session_cookie(alice)}".encode()))
    exchange = LazyExchange(HUGE)
    await serve(exchange, scope(path, method=method, headers=headers))
    assert exchange.status == 413
    assert exchange.pulled == 0
    assert "limited to" in json.loads(exchange.body)["error"]


async def test_a_chunked_200_mb_run_body_is_cut_off_at_the_cap(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100_000
    exchange = LazyExchange(HUGE)
    await serve(exchange, scope("/stored/", headers=[JSON]))
    assert exchange.status == 413
    assert exchange.pulled <= 100_000 + exchange.chunk
    assert json.loads(exchange.body)["error"] == (
        "Request bodies on this route are limited to 100000 bytes (97.7 KiB); "
        "this request is larger."
    )


async def test_the_json_cap_defaults_to_the_setting_and_follows_the_server(
    settings: Any,
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    small = LazyExchange(1001)
    await serve(small, scope("/small-body/", headers=[JSON, (b"content-length", b"301")]))
    assert small.status == 413
    assert "limited to 300 bytes;" in json.loads(small.body)["error"]
    default = Exchange([b"{}"])
    await serve(default, scope("/stored/", headers=[JSON, (b"content-length", b"1001")]))
    assert default.status == 413
    assert "limited to 1000 bytes;" in json.loads(default.body)["error"]


async def test_other_routes_are_capped_only_when_asked() -> None:
    reached: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append((await receive())["type"] == "http.request")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    headers = [(b"content-length", b"11")]
    passed = Exchange([b"x" * 11])
    await BodyLimitMiddleware(app)(
        scope("/elsewhere/", headers=headers), passed.receive, passed.send
    )
    refused = Exchange([b"x" * 11])
    await BodyLimitMiddleware(app, max_body_bytes=10)(
        scope("/elsewhere/", headers=headers), refused.receive, refused.send
    )
    assert passed.status == 204
    assert reached == [True]
    assert refused.status == 413
    assert refused.pulled == 0
    assert json.loads(refused.body)["error"] == (
        "Request bodies on this route are limited to 10 bytes; this request is larger."
    )


@pytest.mark.parametrize("value", [-1, 1.5, True, "10"])
def test_a_bad_cap_is_refused_at_construction(value: Any) -> None:
    with pytest.raises(ValueError, match="max_body_bytes="):
        BodyLimitMiddleware(asgi_app(), max_body_bytes=value)


def test_the_old_name_is_the_same_middleware() -> None:
    assert UploadLimitMiddleware is BodyLimitMiddleware


# A write whose client left after sending it in full is carried out.


async def test_a_run_whose_client_left_right_after_sending_it_is_started_and_kept() -> None:
    from django_pydantic_agent.agui.runs import RunCoordinator
    from django_pydantic_agent.contrib.store.models import StoredAgentRun

    body = json.dumps(run_body()).encode()
    messages: list[dict[str, Any]] = [
        {"type": "http.request", "body": body, "more_body": False},
        {"type": "http.disconnect"},  # the client is gone before any answer
    ]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        return {"type": "http.disconnect"}

    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    app = BodyLimitMiddleware(asgi_app())
    await asyncio.wait_for(app(scope("/anon/", headers=headers), receive, send), timeout=10)
    await RunCoordinator.wait_for_all_runs()
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [200]
    statuses = [run.status async for run in StoredAgentRun.objects.filter(run_id="run-1")]
    assert statuses == ["complete"]


async def test_a_read_or_another_route_hears_of_a_disconnect_at_once() -> None:
    heard: list[str] = []

    async def app(request_scope: Any, receive: Any, send: Any) -> None:
        await receive()
        heard.append((await receive())["type"])  # nothing answered yet

    async def receive() -> dict[str, Any]:
        if not heard and not getattr(receive, "sent", False):
            receive.sent = True  # type: ignore[attr-defined]
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:  # pragma: no cover - the app answers nothing
        raise AssertionError(message)

    wrapped = BodyLimitMiddleware(app, max_body_bytes=100)
    for method, path in (("GET", "/anon/threads/"), ("POST", "/admin/")):
        receive.sent = False  # type: ignore[attr-defined]
        await asyncio.wait_for(wrapped(scope(path, method=method), receive, send), timeout=5)
    assert heard == ["http.disconnect", "http.disconnect"]
