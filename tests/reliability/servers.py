"""A PostgreSQL and a Redis of the test's own, to restart under a running deployment.

The shared services (``POSTGRES_URL``, ``REDIS_URL``) serve every other test, and other
processes: restarting them would cut those. ``OwnPostgres`` is a throwaway cluster (``initdb``
into a temporary directory, run as the ``postgres`` user when the test runs as root, as CI
does) on a free loopback port; ``OwnRedis`` a ``redis-server`` with no persistence, so a
restart comes back empty, as a restarted cache without persistence does. Both skip when their
binaries are missing, and fail instead under ``CI``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.example_project.support import free_port

__all__ = ["OwnPostgres", "OwnRedis", "own_postgres", "own_redis"]


def _missing(what: str) -> None:
    message = f"{what} is not installed here; install it to run this test (CI does)."
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _wait_for_port(port: int, *, up: bool, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                if up:
                    return
        except OSError:
            if not up:
                return
        time.sleep(0.05)
    raise AssertionError(f"port {port} did not go {'up' if up else 'down'} in {seconds} s")


class OwnPostgres:
    """A PostgreSQL cluster of this test: ``url``, ``stop()``, ``start()``, ``restart()``."""

    def __init__(self, bindir: Path, root: Path, port: int, user: str | None) -> None:
        self.bindir, self.root, self.port, self._user = bindir, root, port, user
        self.data = root / "data"
        self.url = f"postgres://postgres@127.0.0.1:{port}/outages"

    def _run(self, *args: str) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"

    def _pg_ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.data), "-l", log, "-o", options, "-w", *args)

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "outages")

    def start(self) -> None:
        """Start the server; return once it accepts connections."""
        self._pg_ctl("start")

    def stop(self) -> None:
        """Stop the server at once (``-m fast``: every client's connection is cut)."""
        self._pg_ctl("stop", "-m", "fast")

    def restart(self) -> None:
        """``pg_ctl restart -m fast``, what a failover or ``pg_ctlcluster restart`` does."""
        self._pg_ctl("restart", "-m", "fast")


def _postgres_bindir() -> Path | None:
    found = shutil.which("pg_config")
    if found:
        bindir = subprocess.run(
            [found, "--bindir"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if bindir and (Path(bindir) / "initdb").exists():
            return Path(bindir)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


@contextmanager
def own_postgres() -> Iterator[OwnPostgres]:
    """A fresh PostgreSQL cluster on a free port with an ``outages`` database; removed after."""
    bindir = _postgres_bindir()
    if bindir is None:
        _missing("PostgreSQL (initdb, pg_ctl)")
        raise AssertionError("unreachable")
    user = None
    root = Path(tempfile.mkdtemp(prefix="dpa-outage-pg-"))
    if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to the postgres user
        user = "postgres"
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    server = OwnPostgres(bindir, root, free_port(), user)
    try:
        server.init()
        yield server
    finally:
        with contextlib.suppress(AssertionError):  # already stopped
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


class OwnRedis:
    """A ``redis-server`` of this test: ``url``, ``stop()``, ``start()``."""

    def __init__(self, binary: str, port: int, log: Path) -> None:
        self.binary, self.port, self.log = binary, port, log
        self.url = f"redis://127.0.0.1:{port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it (empty: no persistence); return once it accepts connections."""
        with self.log.open("a") as log:
            self._process = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        _wait_for_port(self.port, up=True)

    def stop(self) -> None:
        """Stop it; return once the port is closed."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        _wait_for_port(self.port, up=False)


@contextmanager
def own_redis(workdir: Path) -> Iterator[OwnRedis]:
    """A fresh ``redis-server`` on a free port for the block."""
    binary = shutil.which("redis-server")
    if binary is None:
        _missing("redis-server")
        raise AssertionError("unreachable")
    server = OwnRedis(binary, free_port(), workdir / "redis.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
