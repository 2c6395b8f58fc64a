"""Run the example project the way ``make demo`` does: its own settings, in subprocesses.

Used by ``tests/example_project`` and ``tests/e2e``. Every process gets a fresh SQLite file, the
example settings module and no ``DJANGO_SETTINGS_MODULE`` of the test suite.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO_DIR = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = REPO_DIR / "example_project"
BIN_DIR = Path(sys.executable).parent

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo-password"
#: The example's default upload cap (``AGENT_ATTACHMENT_MAX_BYTES``), 5 MiB.
EXAMPLE_ATTACHMENT_MAX_BYTES = 5 * 1024 * 1024


def example_env(database: Path, **extra: str) -> dict[str, str]:
    """The environment ``make demo`` gives the example project, with ``database`` as its DB.

    Uploads go to ``media/`` beside the database, never into ``example_project/media/``. The
    throttle is set high enough never to fire unless ``extra`` lowers it.
    """
    env = {
        key: value
        for key, value in os.environ.items()
        if key
        not in {
            "DJANGO_SETTINGS_MODULE",
            "AGENT_MODEL",
            "AGENT_ATTACHMENT_MAX_BYTES",
            "AGENT_REQUESTS_PER_MINUTE",
            "AGENT_RUN_HEARTBEAT_SECONDS",
            "AGENT_RUN_LEASE_SECONDS",
            "AGENT_SWEEP_SECONDS",
            "AGENT_DRAIN_SECONDS",
            "AGENT_ON_WORKER_LOSS",
            "AGENT_MAX_THREADS",
            "AGENT_MAX_FILES",
            "AGENT_MAX_UPLOAD_BYTES",
            "DEMO_USERNAME",
            "DEMO_PASSWORD",
            "AGENT_STORE",
            "AGENT_MEMORY_SPACE",
            "DATAROBOT_ENDPOINT",
            "DATAROBOT_API_TOKEN",
            # The suite's own database and the Redis of the multi-worker tests: an example
            # server uses them only when a test says so (``serve_example_workers``).
            "DATABASE_URL",
            "REDIS_URL",
            "EXAMPLE_CACHE_PREFIX",
        }
    }
    env.update(
        DJANGO_SETTINGS_MODULE="example_project.settings",
        EXAMPLE_DATABASE_PATH=str(database),
        EXAMPLE_MEDIA_ROOT=str(database.parent / "media"),
        PYTHONUNBUFFERED="1",
        # Many tests share one demo user: the example's throttle must not get in their way.
        AGENT_REQUESTS_PER_MINUTE="100000",
    )
    env.update(extra)
    return env


def manage(
    *args: str, env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``python manage.py <args>`` in ``example_project/`` and return the finished process."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=EXAMPLE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def prepare_database(database: Path) -> None:
    """Migrate ``database`` and create the demo user, as the first two steps of ``make demo``."""
    env = example_env(database)
    for command in (("migrate", "--noinput"), ("ensure_demo_user",)):
        result = manage(*command, env=env)
        assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stderr}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class RunningServer:
    """An example project served by uvicorn; ``url`` has no trailing slash."""

    url: str
    log: Path
    database: Path
    #: The environment the server runs with, when not ``example_env(database)`` alone.
    env: dict[str, str] = field(default_factory=dict)
    #: The uvicorn process's id (to signal it: ``SIGKILL``, ``SIGSTOP``).
    pid: int = 0

    def add_user(self, username: str, password: str) -> None:
        """Create (or refresh) a user in the served project's database."""
        result = manage(
            "ensure_demo_user",
            "--username",
            username,
            "--password",
            password,
            env=self.env or example_env(self.database),
        )
        assert result.returncode == 0, f"ensure_demo_user failed:\n{result.stderr}"


@contextmanager
def serve_example(workdir: Path, **env: str) -> Iterator[RunningServer]:
    """Serve the example project under uvicorn on a free loopback port, with a fresh database.

    The database is migrated and the demo user created first. The server is stopped (and
    waited for) on exit; its output is in ``RunningServer.log``.
    """
    database = workdir / "example.sqlite3"
    prepare_database(database)
    log_path = workdir / "uvicorn.log"
    process, url = _start_uvicorn(example_env(database, **env), log_path)
    try:
        _wait_until_up(url, process, log_path)
        yield RunningServer(url=url, log=log_path, database=database, pid=process.pid)
    finally:
        _stop(process)


@contextmanager
def serve_example_workers(
    workdir: Path, *, database_url: str, count: int = 2, **env: str
) -> Iterator[list[RunningServer]]:
    """Serve the example project as ``count`` uvicorn processes on one database.

    Every process gets ``DATABASE_URL=database_url`` and one shared ``EXAMPLE_MEDIA_ROOT``
    (``workdir/media``), plus ``env`` (``REDIS_URL`` for a shared cache). The database is
    migrated and the demo user created once, before the processes start; they are stopped on
    exit. Each server's output is in its own ``RunningServer.log``.
    """
    shared = example_env(workdir / "unused.sqlite3", DATABASE_URL=database_url, **env)
    for command in (("migrate", "--noinput"), ("ensure_demo_user",)):
        result = manage(*command, env=shared)
        assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stderr}"
    started: list[tuple[subprocess.Popen[bytes], RunningServer]] = []
    try:
        for index in range(1, count + 1):
            log_path = workdir / f"uvicorn-{index}.log"
            process, url = _start_uvicorn(shared, log_path)
            server = RunningServer(
                url=url,
                log=log_path,
                database=workdir / "unused.sqlite3",
                env=shared,
                pid=process.pid,
            )
            started.append((process, server))
        for process, server in started:
            _wait_until_up(server.url, process, server.log)
        yield [server for _, server in started]
    finally:
        for process, _ in started:
            _stop(process)


def _start_uvicorn(env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                str(BIN_DIR / "uvicorn"),
                "example_project.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                # As make demo runs it: the sweeper starts with the process, and SIGTERM drains.
                "--lifespan",
                "on",
            ],
            cwd=EXAMPLE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return process, f"http://127.0.0.1:{port}"


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _wait_until_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"uvicorn exited with {process.returncode}:\n{log.read_text()}")
        try:
            httpx.get(f"{url}/accounts/login/", timeout=1)
        except httpx.TransportError:
            time.sleep(0.1)
            continue
        return
    raise AssertionError(f"uvicorn did not answer within 30 s:\n{log.read_text()}")


def login(
    client: httpx.Client, username: str = DEMO_USERNAME, password: str = DEMO_PASSWORD
) -> str:
    """Log ``client`` in through the login form; return the CSRF token for ``X-CSRFToken``."""
    client.get("/accounts/login/").raise_for_status()
    response = client.post(
        "/accounts/login/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
        },
    )
    assert response.status_code == 302, f"login failed: {response.status_code} {response.text}"
    assert "sessionid" in client.cookies
    return client.cookies["csrftoken"]


def cookie_header(client: httpx.Client) -> str:
    """The ``Cookie`` header value that carries ``client``'s session and CSRF cookies."""
    return "; ".join(f"{name}={value}" for name, value in client.cookies.items())


def parse_sse(body: str) -> list[dict[str, Any]]:
    """Decode an SSE body into its events (LF LF frames; comment lines such as ``: ping`` skipped).

    Raises ``AssertionError`` on a frame without ``data:`` or a truncated last frame.
    """
    assert body.endswith("\n\n"), "the stream does not end with a complete frame"
    events = []
    for frame in body.split("\n\n")[:-1]:
        data = [line[5:].lstrip(" ") for line in frame.split("\n") if line.startswith("data:")]
        if not data:
            assert all(line.startswith(":") for line in frame.split("\n")), frame
            continue
        events.append(json.loads("\n".join(data)))
    return events


def run_input(prompt: str, *, thread_id: str = "thread-1", run_id: str = "run-1") -> dict[str, Any]:
    """A minimal camelCase ``RunAgentInput`` with one user message."""
    return {
        "threadId": thread_id,
        "runId": run_id,
        "state": {},
        "messages": [{"id": f"{run_id}-user", "role": "user", "content": prompt}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
