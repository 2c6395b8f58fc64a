"""PostgreSQL and Redis for the multi-worker tests: ``POSTGRES_URL`` and ``REDIS_URL``.

``.ci/run`` starts both on 127.0.0.1 and exports the two variables for the e2e and reliability
legs (their own database stays SQLite). Locally a test that needs one skips when the variable is
unset or the service does not answer; under ``CI`` it fails instead, so CI never passes a
multi-worker test by skipping it.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest


def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    address = (parts.hostname or "127.0.0.1", parts.port or default_port)
    try:
        with socket.create_connection(address, 2):
            return True
    except OSError:
        return False


def _missing(what: str) -> None:
    message = (
        f"{what} is not set or not answering: start the service and export it (.ci/run does both)."
    )
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """``REDIS_URL`` (a Redis on loopback), or a skip (a failure under ``CI``)."""
    url = os.environ.get("REDIS_URL", "")
    if not url or not _reachable(url, 6379):
        _missing("REDIS_URL")
    return url


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """``POSTGRES_URL`` (a server on loopback), or a skip (a failure under ``CI``)."""
    url = os.environ.get("POSTGRES_URL", "")
    if not url or not _reachable(url, 5432):
        _missing("POSTGRES_URL")
    return url


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test; its URL. Dropped afterwards."""
    import psycopg

    name = f"dpa_{uuid.uuid4().hex[:12]}"
    admin = urlunsplit(urlsplit(postgres_url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(postgres_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
