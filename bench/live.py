"""Live servers for the HTTP suites, and a client that times one SSE stream.

``served(...)`` starts uvicorn subprocesses of ``bench.site`` on loopback ports (sharing the
database of ``bench.settings``, so the parent process must have migrated it), each its own
process so the client's work is not the server's. ``stream(...)`` posts one run and returns
when the first byte, the first event, the terminal event and the end of the stream arrived.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

__all__ = ["Live", "Stream", "free_port", "run_body", "served", "stream", "wait_ready"]

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(origin: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Wait until ``origin`` accepts connections (``RuntimeError`` if the process died)."""
    host, port = origin.removeprefix("http://").split(":")
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"The server for {origin} exited with {process.returncode}.")
        try:
            with socket.create_connection((host, int(port)), 0.5):
                return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"The server for {origin} did not start in {timeout} s."
                ) from exc
            time.sleep(0.05)


@dataclass(frozen=True, kw_only=True)
class Live:
    """One server process: its origin and pid (for ``/proc/<pid>/status``)."""

    origin: str
    pid: int


def _uvicorn(
    app: str, env: Mapping[str, str], *, cwd: Path, python: str = sys.executable
) -> tuple[Live, subprocess.Popen[bytes]]:
    port = free_port()
    command = [python, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--lifespan", "off", "--log-level", "warning", "--no-access-log"]
    if app.endswith(":get_asgi_application"):
        command.append("--factory")
    process = subprocess.Popen(command, cwd=cwd, env=dict(env))
    origin = f"http://127.0.0.1:{port}"
    try:
        wait_ready(origin, process)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return Live(origin=origin, pid=process.pid), process


def _env(extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["DJANGO_SETTINGS_MODULE"] = "bench.site"
    env.update(extra)
    return env


@contextmanager
def served(
    workers: int = 1, *, env: Mapping[str, str] | None = None, emulator: bool = True
) -> Iterator[list[Live]]:
    """``workers`` processes of ``bench.site`` (plus one emulator process); yields them."""
    from bench.settings import BENCH_DIR

    # The database options of the example project, WAL included (bench.settings).
    base = {"BENCH_DIR": str(BENCH_DIR), "BENCH_SQLITE_WAL": "1", **(env or {})}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        if emulator:
            # The emulator keeps its events in a database file of its own, as a real Memory
            # Service is another system: its writes never queue behind this package's.
            emulator_env = _env({**base, "BENCH_DB": "emulator.sqlite3"})
            emulator_env.pop("DATABASE_URL", None)
            migrate = [sys.executable, "-m", "django", "migrate", "--verbosity", "0"]
            subprocess.run(migrate, cwd=ROOT, env=emulator_env, check=True)
            live, process = _uvicorn("bench.asgi:application", emulator_env, cwd=ROOT)
            processes.append(process)
            base["BENCH_EMULATOR"] = f"{live.origin}/api/v2"
        servers = []
        for _ in range(workers):
            live, process = _uvicorn("bench.asgi:application", _env(base), cwd=ROOT)
            processes.append(process)
            servers.append(live)
        yield servers
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def served_app(app: str, *, python: str, cwd: Path, env: Mapping[str, str]) -> Iterator[Live]:
    """One uvicorn process of ``app`` under another interpreter (a predecessor's venv)."""
    live, process = _uvicorn(app, {**os.environ, **env}, cwd=cwd, python=python)
    try:
        yield live
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_body(thread_id: str, run_id: str, text: str = "Hello") -> dict[str, Any]:
    """A ``RunAgentInput`` with one new user message."""
    return {
        "threadId": thread_id,
        "runId": run_id,
        "state": {},
        "messages": [{"id": f"u-{run_id}", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


@dataclass(frozen=True, kw_only=True)
class Stream:
    """Timings of one SSE response, in seconds from the request being sent."""

    status: int
    first_byte: float
    first_event: float
    terminal: float
    closed: float
    events: int
    terminal_type: str
    outcome: str
    first_text: float = 0.0
    """When the first ``TEXT_MESSAGE_*`` event arrived: the model's first output."""

    @property
    def events_per_second(self) -> float:
        return self.events / self.closed

    @property
    def finished_to_close_ms(self) -> float:
        return (self.closed - self.terminal) * 1000


async def stream(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    body: Any = None,
    stop_after: int | None = None,
    on_event: Any = None,
) -> Stream:
    """Send the request and read its SSE body to the end (or ``stop_after`` events).

    ``body`` is JSON-encoded by httpx, inside the timing, or posted as it is when it is
    ``bytes``. Frames are split, not parsed, except the terminal one; ``on_event(n)`` is
    awaited after the ``n``-th event (to act while the stream is live).
    """
    start = time.perf_counter()
    first_byte = first_event = first_text = terminal = 0.0
    events = 0
    terminal_type = outcome = ""
    buffer = b""
    kwargs: dict[str, Any] = {} if body is None else {"json": body}
    if isinstance(body, bytes):  # encoded before the clock started: the client's own work
        kwargs = {"content": body, "headers": {"Content-Type": "application/json"}}
    async with client.stream(method, url, **kwargs) as response:
        async for chunk in response.aiter_raw():
            now = time.perf_counter() - start
            first_byte = first_byte or now
            buffer += chunk
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                data = frame.rpartition(b"data: ")[2] if b"data: " in frame else None
                if data is None:
                    continue
                events += 1
                first_event = first_event or now
                if not first_text and b'"TEXT_MESSAGE_' in data:
                    first_text = now
                if b'"RUN_FINISHED"' in data or b'"RUN_ERROR"' in data:
                    terminal = now
                    decoded = json.loads(data)
                    terminal_type = decoded["type"]
                    outcome = (decoded.get("outcome") or {}).get("type", "")
                if on_event is not None:
                    await on_event(events)
            if stop_after is not None and events >= stop_after:
                break
        closed = time.perf_counter() - start
        status = response.status_code
    return Stream(
        status=status,
        first_byte=first_byte,
        first_event=first_event,
        terminal=terminal,
        closed=closed,
        events=events,
        terminal_type=terminal_type,
        outcome=outcome,
        first_text=first_text,
    )
