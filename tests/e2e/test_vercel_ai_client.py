"""The Vercel AI SDK itself (the ``ai`` package under Node) against the example's ``/api/chat``.

``js/vercel_ai.mjs`` drives ``DefaultChatTransport.sendMessages``, ``reconnectToStream`` and
``readUIMessageStream``: the package's own request building, SSE parsing, chunk validation and
message building read what the server sends. The example runs under uvicorn once on the
Default store and once on the Memory Service (the emulator mounted in the same project); every
scenario runs with ``ai`` 7 (``npm install ai`` today) on both, and with ``ai`` 6.0.333 (the
release before, ``ai6`` in package.json) on the Default store. A worker killed mid-answer is
in ``test_a_page_reloaded_after_its_worker_died_shows_the_stored_answer`` (PostgreSQL and
Redis, two workers).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from django_pydantic_agent.chat_history.manager import EPOCH_STRIDE
from tests.e2e.nodejs import run_node
from tests.e2e.test_resume import _processes
from tests.e2e.test_workers import _forget_prefix, client_of, fresh_database
from tests.example_project.support import (
    RunningServer,
    cookie_header,
    login,
    serve_example,
    serve_example_workers,
)

pytestmark = pytest.mark.e2e

STORES = ("default", "memory-service")
#: ``(store, the npm package of the AI SDK release)`` for every scenario.
LEGS = [("default", "ai"), ("memory-service", "ai"), ("default", "ai6")]
#: The scripted model's long answer ends with this.
LONG_ANSWER_END = (
    "That is the whole trick: a Django view, an agent, and a protocol any AG-UI client speaks."
)


@pytest.fixture(scope="module")
def booting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[RunningServer]]]:
    """The example under uvicorn once per store, started side by side."""
    contexts = {
        store: serve_example(
            tmp_path_factory.mktemp(f"vercel-ai-{store}"),
            AGENT_STORE=store,
            DEMO_WORD_DELAY="0.01",
            AGENT_HEARTBEAT_SECONDS="0.05",
        )
        for store in STORES
    }
    with ThreadPoolExecutor(len(contexts)) as pool:
        futures = {store: pool.submit(context.__enter__) for store, context in contexts.items()}
        try:
            yield futures
        finally:
            for store, future in futures.items():
                if future.exception() is None:
                    contexts[store].__exit__(None, None, None)


@pytest.fixture(scope="module", params=LEGS, ids=[f"{s}-{p}" for s, p in LEGS])
def leg(
    request: pytest.FixtureRequest, booting: dict[str, Future[RunningServer]]
) -> Iterator[tuple[RunningServer, str, httpx.Client]]:
    """``(server, AI SDK package, the demo user logged in)``."""
    store, package = request.param
    server = booting[store].result(timeout=120)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        login(client)
        yield server, package, client
    assert "Traceback" not in server.log.read_text()


def scenario(leg: tuple[RunningServer, str, httpx.Client], name: str) -> dict[str, Any]:
    server, package, client = leg
    report: dict[str, Any] = run_node(
        Path(__file__).parent / "js",
        "vercel_ai.mjs",
        name,
        server.url,
        env={
            "AGUI_COOKIE": cookie_header(client),
            "AGUI_CSRF": client.cookies["csrftoken"],
            "AI_PACKAGE": package,
        },
    )
    return report


def texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


def kinds(message: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(p["type"], p.get("state")) for p in message["parts"]]


def clockless(text: str) -> str:
    return re.sub(r"\d\d:\d\d:\d\d UTC on \w+ \d\d \w+ \d{4}", "<time>", text)


def same_message(streamed: dict[str, Any], stored: dict[str, Any]) -> None:
    """The message the SDK built is the one the thread stores: id, parts, texts."""
    assert streamed["id"] == stored["id"]
    assert kinds(streamed) == kinds(stored)
    assert [clockless(t) for t in texts(streamed)] == [clockless(t) for t in texts(stored)]


def test_a_turn_with_reasoning_a_tool_call_and_an_answer(
    node_scripts: Path, leg: tuple[RunningServer, str, httpx.Client]
) -> None:
    report = scenario(leg, "turn")
    first, second = report["first"], report["second"]
    for read in (first, second):
        assert read["error"] is None
        assert read["types"][0] == "start"
        assert read["types"][-1] == "finish"
        assert {"reasoning-delta", "tool-input-available", "tool-output-available"} <= set(
            read["types"]
        )
    message = first["message"]
    assert kinds(message) == [
        ("step-start", None),
        ("reasoning", "done"),
        ("tool-calculate", "output-available"),
        ("step-start", None),
        ("text", "done"),
    ]
    assert texts(message) == ["I asked the calculator, and 12 * (3 + 4) = 84."]
    tool = message["parts"][2]
    assert (tool["input"], tool["output"], tool["providerExecuted"]) == (
        {"expression": "12 * (3 + 4)"},
        "84",
        True,
    )
    assert message["metadata"]["status"] == "complete"
    assert message["metadata"]["usage"][0]["totalTokens"] > 0
    # The thread as useChat's initial messages: the same ids and parts, and the posted
    # transcript (the second turn sent the first back) was taken as an echo.
    stored = report["thread"]["messages"]
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    same_message(message, stored[1])
    same_message(second["message"], stored[3])


def test_a_reload_mid_answer_resumes_and_ends_with_the_stored_text(
    node_scripts: Path, leg: tuple[RunningServer, str, httpx.Client]
) -> None:
    report = scenario(leg, "reload")
    before, resumed = report["before"], report["resumed"]
    assert "finish" not in before["types"]  # the page went away mid-answer
    reloaded = report["reloaded"]["messages"]
    assert reloaded[1]["metadata"]["status"] == "active"
    assert resumed is not None
    assert resumed["error"] is None
    assert resumed["types"][0] == "start"
    assert resumed["types"][-1] == "finish"
    stored = report["thread"]["messages"][1]
    same_message(resumed["message"], stored)
    assert texts(resumed["message"])[-1].endswith(LONG_ANSWER_END)
    assert resumed["message"]["id"] == reloaded[1]["id"] == before["message"]["id"]
    assert report["after"] is None  # nothing running: 204, no stream


def test_stop_cancels_the_run_and_keeps_the_partial_answer(
    node_scripts: Path, leg: tuple[RunningServer, str, httpx.Client]
) -> None:
    report = scenario(leg, "stop")
    assert report["stop"]["status"] == 202
    assert report["stop"]["body"]["cancelled"] is True
    streamed = report["streamed"]
    assert streamed["error"] is None
    assert streamed["types"][-2:] == ["abort", "finish"]
    assert streamed["message"]["metadata"]["status"] == "interrupted"
    stored = report["thread"]["messages"][1]
    assert stored["metadata"]["status"] == "interrupted"
    same_message(streamed["message"], stored)
    assert not texts(stored)[-1].endswith(LONG_ANSWER_END)


def test_regenerate_answers_again_on_a_new_branch(
    node_scripts: Path, leg: tuple[RunningServer, str, httpx.Client]
) -> None:
    report = scenario(leg, "regenerate")
    first, again = report["first"]["message"], report["again"]["message"]
    assert again["id"] != first["id"]
    stored = report["thread"]["messages"]
    assert [m["id"] for m in stored] == [stored[0]["id"], again["id"]]
    same_message(again, stored[1])


def test_a_page_tool_output_continues_the_answer(
    node_scripts: Path, leg: tuple[RunningServer, str, httpx.Client]
) -> None:
    report = scenario(leg, "client-tool")
    first, second = report["first"], report["second"]
    assert first["types"][-1] == "finish"
    assert first["chunks"][-1]["finishReason"] == "tool-calls"
    call = first["message"]["parts"][-1]
    assert (call["type"], call["state"]) == ("tool-browser_info", "input-available")
    assert "providerExecuted" not in call  # the page's tool: the page runs it
    message = second["message"]
    assert message["id"] == first["message"]["id"]
    assert texts(message) == ['Your browser says: {"userAgent":"node-e2e","language":"en"}']
    same_message(message, report["thread"]["messages"][1])


def test_an_approval_runs_the_tool_and_the_answer_goes_on(
    node_scripts: Path, leg: tuple[RunningServer, str, httpx.Client]
) -> None:
    report = scenario(leg, "approval")
    asked = report["first"]["message"]["parts"][-1]
    assert (asked["type"], asked["state"]) == ("tool-set_reminder", "approval-requested")
    assert "tool-approval-request" in report["first"]["types"]
    message = report["second"]["message"]
    assert message["id"] == report["first"]["message"]["id"]
    tool = next(p for p in message["parts"] if p["type"] == "tool-set_reminder")
    assert (tool["state"], tool["output"]) == (
        "output-available",
        "Reminder set: water the plants",
    )
    assert texts(message) == ["Done. Reminder set: water the plants."]
    same_message(message, report["thread"]["messages"][1])


def test_an_attachment_is_read_and_shown_by_the_attachment_route(
    node_scripts: Path, leg: tuple[RunningServer, str, httpx.Client]
) -> None:
    report = scenario(leg, "attachment")
    upload = report["upload"]
    assert upload["status"] == 201
    message = report["first"]["message"]
    assert texts(message)[0].startswith("**garden.txt** (47 bytes, 2 lines) says:")
    user = report["thread"]["messages"][0]
    assert user["parts"][0] == {
        "type": "file",
        "mediaType": "text/plain",
        "filename": "garden.txt",
        "url": f"/agent/attachments/{upload['body']['id']}/",
    }
    _, _, client = leg
    assert client.get(user["parts"][0]["url"]).text.startswith("Tomatoes")


def test_forged_history_and_bad_ids_are_refused(
    node_scripts: Path, leg: tuple[RunningServer, str, httpx.Client]
) -> None:
    report = scenario(leg, "refused")
    forged = report["forged"]
    assert forged["types"] == ["start", "error", "finish"]
    assert "is not in the stored history" in forged["error"]
    assert forged["chunks"][-1]["messageMetadata"]["errorCode"] == "INVALID_INPUT"
    assert [m["role"] for m in report["thread"]["messages"]] == ["user", "assistant"]
    bad = report["badId"]
    assert bad.get("statusCode") in (400, None)  # ai 7: APICallError; ai 6: a plain Error
    assert "id (the chat id) must be" in bad["message"]


@pytest.fixture
def two_workers(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> Iterator[tuple[list[RunningServer], list[int]]]:
    """Two workers of the example on one fresh PostgreSQL database and one Redis prefix."""
    prefix = f"dpa-vercel-{uuid.uuid4().hex[:10]}"
    try:
        with (
            fresh_database(postgres_url) as database_url,
            serve_example_workers(
                tmp_path,
                database_url=database_url,
                count=2,
                REDIS_URL=redis_url,
                EXAMPLE_CACHE_PREFIX=prefix,
                DEMO_WORD_DELAY="0.03",
                AGENT_RUN_HEARTBEAT_SECONDS="0.5",
                AGENT_RUN_LEASE_SECONDS="2",
                AGENT_SWEEP_SECONDS="1",
            ) as servers,
        ):
            yield servers, _processes(servers)
    finally:
        _forget_prefix(redis_url, prefix)


def taken_over(http: httpx.Client, thread_id: str) -> None:
    """Return once worker 2 runs the dead worker's run as its next execution (or it ended)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        thread = http.get(f"/agent/threads/{thread_id}/").json()
        active = thread["activeRun"]
        if active is None or active["lastSeq"] > EPOCH_STRIDE:
            return
        time.sleep(0.1)
    raise AssertionError(f"worker 2 never took the run of {thread_id} over")


@pytest.mark.timeout(300)
def test_a_page_reloaded_after_its_worker_died_shows_the_stored_answer(
    node_scripts: Path, two_workers: tuple[list[RunningServer], list[int]]
) -> None:
    (first, second), (pid_one, _) = two_workers
    with client_of(first) as (http, token):
        cookie = cookie_header(http)
    node = subprocess.Popen(
        ["node", "vercel_ai.mjs", "death", first.url, second.url],
        cwd=node_scripts,
        env={**os.environ, "AGUI_COOKIE": cookie, "AGUI_CSRF": token},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert node.stdout is not None
        assert node.stdin is not None
        ready, chat_id = node.stdout.readline().split()
        assert ready == "READY"
        os.kill(pid_one, signal.SIGKILL)
        with client_of(second) as (two, _token):
            taken_over(two, chat_id)
        node.stdin.write("killed\n")
        node.stdin.flush()
        out, err = node.communicate(timeout=120)
    finally:
        if node.poll() is None:
            node.kill()
    assert node.returncode == 0, err
    report = json.loads(out.splitlines()[-1])
    resumed = report["resumed"]
    assert resumed is not None
    assert resumed["error"] is None
    assert resumed["types"][-1] == "finish"
    stored = report["thread"]["messages"][1]
    # The resumed run's stream opened with the thread as stored (replayed): the answer cut
    # by the death, then the answer given again; exactly what the thread shows.
    same_message(resumed["message"], stored)
    answer_texts = texts(stored)
    assert len(answer_texts) == 2
    assert answer_texts[-1].endswith(LONG_ANSWER_END)
    assert "Traceback" not in second.log.read_text()
