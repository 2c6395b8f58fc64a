"""What the drain tests share: a long answer streaming when the server gets ``SIGTERM``, a
request held on its way, and the run rows of the example project's SQLite file.

``tests/e2e/test_drain.py`` signals a uvicorn worker, ``tests/e2e/test_drain_gunicorn.py``
gunicorn's master; both stream the same answer and hold the same late request.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.test_sweeper import RUNS_TABLE, Worker
from tests.example_project.support import login, run_input

#: A prompt the demo agent answers at length (word by word, ``DEMO_WORD_DELAY`` apart).
LONG_PROMPT = "Tell me a long story, please."


def run_rows(database: Path) -> list[tuple[str, str, str]]:
    """``(run_id, status, worker_id)`` of every run in ``database``, oldest first."""
    with sqlite3.connect(database) as db:
        return db.execute(
            f"SELECT run_id, status, worker_id FROM {RUNS_TABLE} ORDER BY started_at"
        ).fetchall()


def held_post(
    url: str, path: str, cookies: dict[str, str], body: dict[str, Any]
) -> tuple[socket.socket, bytes]:
    """A POST whose headers are sent and whose body is not yet (returned): the server has the
    request."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    payload = json.dumps(body).encode()
    head = [
        f"POST {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Cookie: " + "; ".join(f"{k}={v}" for k, v in cookies.items()),
        f"X-CSRFToken: {cookies['csrftoken']}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        "",
        "",
    ]
    sock.sendall("\r\n".join(head).encode())
    return sock, payload


def answer(sock: socket.socket, payload: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send the held request's body and read the whole answer: ``(status, headers, body)``."""
    sock.sendall(payload)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {n.strip().lower(): v.strip() for n, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def text(events: list[dict[str, Any]]) -> str:
    """The answer's text: every ``TEXT_MESSAGE_CONTENT`` delta, joined."""
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def read_until(stream: Iterator[str], lines: list[str], contents: int) -> None:
    """Append the lines of ``stream`` to ``lines`` until it holds ``contents`` text deltas."""
    for line in stream:
        lines.append(line)
        if sum('"TEXT_MESSAGE_CONTENT"' in seen for seen in lines) == contents:
            break


@dataclass
class Signalled:
    """A ``SIGTERM`` sent mid-answer: the streamed ``lines`` so far (the rest of the answer is
    appended when ``sigterm_mid_answer`` exits), the ``late`` request held on its way, the
    session's ``token`` and ``cookies``, and when the signal was sent (``time.monotonic``)."""

    lines: list[str]
    late: tuple[socket.socket, bytes]
    token: str
    cookies: dict[str, str]
    at: float


@contextmanager
def sigterm_mid_answer(
    served: Worker, http: httpx.Client, *, run: tuple[str, str], late: tuple[str, str]
) -> Iterator[Signalled]:
    """Log in, stream a long answer on ``run`` (thread id, run id) and, five text deltas in,
    hold a request for ``late`` (thread id, run id) on its way and send ``SIGTERM`` to
    ``served``; the block runs while the answer streams on, and the rest of the answer is read
    into ``lines`` when it ends."""
    token = login(http)
    cookies = dict(http.cookies.items())
    body = run_input(LONG_PROMPT, thread_id=run[0], run_id=run[1])
    lines: list[str] = []
    with http.stream("POST", "/agent/", json=body, headers={"X-CSRFToken": token}) as response:
        assert response.status_code == 200
        stream = response.iter_lines()
        read_until(stream, lines, 5)
        held = held_post(
            served.url,
            "/agent/",
            cookies,
            run_input("Are you there?", thread_id=late[0], run_id=late[1]),
        )
        time.sleep(0.3)  # the server has read the late request's headers
        at = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        yield Signalled(lines=lines, late=held, token=token, cookies=cookies, at=at)
        lines.extend(stream)
