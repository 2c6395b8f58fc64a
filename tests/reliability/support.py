"""Serve the reliability site under uvicorn, and talk to it over raw asyncio sockets.

``serve_site`` starts a worker (a uvicorn subprocess) on a prepared database; ``stored_state``
reads back what the database holds. ``SSEConnection`` is an HTTP/1.1 client on
``asyncio.open_connection``: it reads the status, the headers and the chunked SSE body event by
event, so a test can drop the connection at an exact point and the server sees a real
disconnect (``abort()`` resets the socket, ``close()`` sends FIN).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.example_project.support import free_port

REPO_DIR = Path(__file__).resolve().parents[2]
BIN_DIR = Path(sys.executable).parent
USERS = ("alice", "bob")


def site_env(database: str, **extra: str) -> dict[str, str]:
    """The environment of a site process: ``database`` is a SQLite path or a database URL."""
    env = {k: v for k, v in os.environ.items() if k not in {"DJANGO_SETTINGS_MODULE"}}
    env.update(
        DJANGO_SETTINGS_MODULE="tests.reliability.project.settings",
        PYTHONPATH=str(REPO_DIR),
        PYTHONUNBUFFERED="1",
    )
    env.pop("RELIABILITY_DATABASE_URL", None)
    env.pop("RELIABILITY_SQLITE", None)
    if "://" in database:
        env["RELIABILITY_DATABASE_URL"] = database
    else:
        env["RELIABILITY_SQLITE"] = database
    env.update(extra)
    return env


def site_python(module: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <module> <args>`` in the repository root; fail loudly if it fails."""
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{module} {args} failed:\n{result.stderr}"
    return result


def prepare_site(database: str) -> None:
    """Migrate ``database`` and create the users in ``USERS``."""
    site_python("tests.reliability.project.prepare", *USERS, env=site_env(database))


def stored_state(database: str) -> dict[str, Any]:
    """``{"runs": [...], "messages": [...]}`` as the database holds them (see ``dump.py``)."""
    result = site_python("tests.reliability.project.dump", env=site_env(database))
    state: dict[str, Any] = json.loads(result.stdout)
    return state


def sweep(database: str, lease: float) -> str:
    """Run ``manage.py agent_store_sweep_runs --lease <lease>`` on ``database``; its output."""
    result = site_python(
        "django", "agent_store_sweep_runs", "--lease", str(lease), env=site_env(database)
    )
    return result.stdout.strip()


@dataclass
class Worker:
    """One uvicorn process serving the site; ``url`` has no trailing slash."""

    url: str
    host: str
    port: int
    log: Path
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        """SIGKILL the worker (no shutdown, no finalisation) and reap it."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self) -> None:
        """SIGTERM the worker (a deploy: it drains), without waiting for it."""
        self.process.send_signal(signal.SIGTERM)


@contextmanager
def serve_site(database: str, log: Path, *, lifespan: str = "off", **env: str) -> Iterator[Worker]:
    """A uvicorn worker serving the site on ``database`` (already prepared) for the block;
    ``lifespan="on"`` for one that drains at ``SIGTERM``."""
    port = free_port()
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                str(BIN_DIR / "uvicorn"),
                "tests.reliability.project.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--lifespan",
                lifespan,
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            cwd=REPO_DIR,
            env=site_env(database, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    worker = Worker(
        url=f"http://127.0.0.1:{port}", host="127.0.0.1", port=port, log=log, process=process
    )
    try:
        _wait_until_up(worker)
        yield worker
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _wait_until_up(worker: Worker) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if worker.process.poll() is not None:
            raise AssertionError(f"uvicorn exited:\n{worker.log.read_text()}")
        try:
            httpx.get(f"{worker.url}/agent/threads/", timeout=1)
        except httpx.TransportError:
            time.sleep(0.1)
            continue
        return
    raise AssertionError(f"uvicorn did not answer within 30 s:\n{worker.log.read_text()}")


def run_body(thread_id: str, run_id: str, marker: str, *, asks: str = "") -> dict[str, Any]:
    """A ``RunAgentInput`` posting one new user message, ``"<asks> ask <marker>"`` (words
    the scripted model reads, ``agent.py``)."""
    content = f"{asks} ask {marker}".lstrip()
    return {
        "threadId": thread_id,
        "runId": run_id,
        "state": {},
        "messages": [{"id": f"{run_id}-user", "role": "user", "content": content}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


@dataclass
class Frame:
    """One SSE event: its ``id:`` sequence number (``None`` for a re-sent opening) and body."""

    seq: int | None
    event: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.event.get("type", ""))


@dataclass
class SSEConnection:
    """One HTTP/1.1 exchange on a raw socket; read the head, then ``frames()``, or drop."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    _buffer: str = ""

    @classmethod
    async def open(
        cls,
        worker: Worker,
        method: str,
        path: str,
        *,
        user: str,
        body: dict[str, Any] | None = None,
    ) -> SSEConnection:
        """Connect and send the request (the response is not read yet)."""
        reader, writer = await asyncio.open_connection(worker.host, worker.port)
        payload = b"" if body is None else json.dumps(body).encode()
        head = [
            f"{method} {path} HTTP/1.1",
            f"Host: {worker.host}:{worker.port}",
            f"X-User: {user}",
            "Accept: text/event-stream",
            "Connection: close",
            f"Content-Length: {len(payload)}",
        ]
        if body is not None:
            head.append("Content-Type: application/json")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        return cls(reader, writer)

    async def read_head(self) -> int:
        """Read the status line and headers; return the status."""
        head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        status_line, *lines = head.split("\r\n")
        self.status = int(status_line.split()[1])
        for line in lines:
            if ":" in line:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
        return self.status

    async def _chunks(self) -> AsyncIterator[bytes]:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int((await self.reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    return
                data = await self.reader.readexactly(size)
                await self.reader.readexactly(2)
                yield data
        elif "content-length" in self.headers:
            yield await self.reader.readexactly(int(self.headers["content-length"]))
        else:
            while data := await self.reader.read(65536):
                yield data

    async def body(self) -> bytes:
        """The whole (non-streamed) body."""
        return b"".join([chunk async for chunk in self._chunks()])

    async def frames(self) -> AsyncIterator[Frame]:
        """The SSE events of the body, one at a time (``: ping`` comments skipped)."""
        async for chunk in self._chunks():
            self._buffer += chunk.decode()
            while "\n\n" in self._buffer:
                raw, self._buffer = self._buffer.split("\n\n", 1)
                frame = _parse_frame(raw)
                if frame is not None:
                    yield frame
        assert not self._buffer.strip(), f"the stream ended mid-frame: {self._buffer!r}"

    def drop(self, *, reset: bool) -> None:
        """Go away: a TCP reset (``abort``) or an orderly close (FIN)."""
        if reset:
            self.writer.transport.abort()
        else:
            self.writer.close()

    async def close(self) -> None:
        """Close after a complete exchange."""
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def _parse_frame(raw: str) -> Frame | None:
    seq: int | None = None
    data: list[str] = []
    for line in raw.split("\n"):
        if line.startswith("id:"):
            seq = int(line[3:].strip().rpartition(":")[2])
        elif line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        else:
            assert line.startswith(":") or not line, f"unexpected SSE line {line!r}"
    if not data:
        return None
    return Frame(seq, json.loads("\n".join(data)))


async def read_all(connection: SSEConnection) -> list[Frame]:
    """Every frame until the stream ends, then close."""
    try:
        return [frame async for frame in connection.frames()]
    finally:
        await connection.close()


#: What asyncio logs when a server goes on writing to a socket its client has closed.
_WRITES_AFTER_CLOSE = "socket.send() raised exception"


def log_problems(log: Path) -> list[str]:
    """Lines of a worker's log that name a traceback, a server error, or writes to a socket
    its client closed (the stream did not notice the client leave)."""
    return [
        line
        for line in log.read_text().splitlines()
        if "Traceback" in line
        or "Internal Server Error" in line
        or " 500 " in line
        or _WRITES_AFTER_CLOSE in line
    ]
