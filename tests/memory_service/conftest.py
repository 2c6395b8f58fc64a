"""Fixtures for the Memory Service client tests.

``scripted`` is a tiny HTTP/1.1 server on a free loopback port whose answers each test scripts
(status, headers, body, or a hang / a dropped connection); it records every request it receives.
``wire`` points clients at the emulator app served by pytest-django's ``live_server``; ``space``
is a fresh memory space on it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from django_pydantic_agent.memory_service import DRMemoryServiceClient, DRMemorySpace


@dataclass(frozen=True, kw_only=True)
class Recorded:
    """One request as the scripted server received it."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(kw_only=True)
class Reply:
    """One scripted answer. ``action`` is ``"answer"``, ``"hang"`` or ``"drop"``."""

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b"{}"
    action: str = "answer"

    @classmethod
    def json(cls, status: int, payload: Any, *headers: tuple[str, str]) -> Reply:
        return cls(
            status=status,
            headers=[("Content-Type", "application/json"), *headers],
            body=json.dumps(payload).encode(),
        )


@dataclass
class ScriptedServer:
    """Answers requests from ``replies`` in order (the last one repeats)."""

    replies: list[Reply] = field(default_factory=lambda: [Reply.json(200, {})])
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _hung: list[asyncio.StreamWriter] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v2"

    def script(self, *replies: Reply) -> None:
        self.replies = list(replies)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        for writer in self._hung:
            writer.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if line:
                        name, value = line.split(":", 1)
                        headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append(
                    Recorded(method=method, target=target, headers=headers, body=body)
                )
                index = min(len(self.requests) - 1, len(self.replies) - 1)
                reply = self.replies[index]
                if reply.action == "hang":
                    self._hung.append(writer)
                    return
                if reply.action == "drop":
                    writer.close()
                    return
                out = [f"HTTP/1.1 {reply.status} X"]
                out += [f"{k}: {v}" for k, v in reply.headers]
                out.append(f"Content-Length: {len(reply.body)}")
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + reply.body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.fixture
async def scripted() -> AsyncIterator[ScriptedServer]:
    server = ScriptedServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def scripted_client(scripted: ScriptedServer) -> AsyncIterator[DRMemoryServiceClient]:
    async with DRMemoryServiceClient(endpoint=scripted.endpoint, api_token="tok-a") as client:
        yield client


@dataclass
class Wire:
    """Clients for the emulator over one shared pool, plus what went over the wire.

    ``sent`` holds every request the clients sent (recorded by an httpx event hook on the real
    pool); ``raw()`` sends a request with the client's headers and returns any response.
    """

    endpoint: str
    pool: httpx.AsyncClient
    sent: list[httpx.Request]

    def client(self, token: str = "token-a") -> DRMemoryServiceClient:
        return DRMemoryServiceClient(endpoint=self.endpoint, api_token=token, http_client=self.pool)

    async def raw(
        self,
        method: str,
        path: str,
        *,
        token: str | None = "token-a",
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        sent_headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            sent_headers["Authorization"] = f"Bearer {token}"
        sent_headers.update(headers or {})
        url = self.endpoint + "/memory/" + path.lstrip("/")
        return await self.pool.request(method, url, headers=sent_headers, **kwargs)

    def last(self, method: str | None = None) -> httpx.Request:
        matching = [r for r in self.sent if method is None or r.method == method]
        return matching[-1]

    def clear(self) -> None:
        self.sent.clear()


@pytest.fixture
async def wire(live_server: Any) -> AsyncIterator[Wire]:
    sent: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        sent.append(request)

    pool = httpx.AsyncClient(timeout=10.0, event_hooks={"request": [record]})
    yield Wire(endpoint=f"{live_server.url}/api/v2", pool=pool, sent=sent)
    await pool.aclose()


@pytest.fixture
async def space(wire: Wire) -> DRMemorySpace:
    return await DRMemorySpace.post(wire.client(), deduplication_key="client-tests")


def body_of(request: httpx.Request) -> Any:
    """The JSON body a recorded request carried."""
    return json.loads(request.content)


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATAROBOT_ENDPOINT", raising=False)
    monkeypatch.delenv("DATAROBOT_API_TOKEN", raising=False)
