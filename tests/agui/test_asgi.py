"""``UploadLimitMiddleware``: oversized uploads are refused before Django reads the body."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import pytest

from django_pydantic_agent.agui import UploadLimitMiddleware
from django_pydantic_agent.agui.asgi import _upload_limit
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


def test_limit_lookup_ignores_non_uploads() -> None:
    assert _upload_limit({"type": "lifespan"}) is None
    assert _upload_limit(scope("/stored/attachments/", method="GET")) is None
    assert _upload_limit(scope("/no/such/route/")) is None
    assert _upload_limit(scope("/stored/")) is None
    assert _upload_limit(scope("/stored/attachments/")) == UPLOAD_CAP


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
    await UploadLimitMiddleware(app)({"type": "lifespan"}, Exchange([]).receive, Exchange([]).send)
    assert seen[0][UPLOAD_LIMIT_SCOPE_KEY] is True
    assert UPLOAD_LIMIT_SCOPE_KEY not in original  # the server's scope is not mutated
    assert UPLOAD_LIMIT_SCOPE_KEY not in seen[1]
