"""Durable runs seen by the real ``@ag-ui/client`` under Node, against the example project.

The example runs under uvicorn as ``make demo`` runs it, once on the default store and once with
``AGENT_STORE=memory-service`` (the Memory Service emulator mounted in the same project). Its
settings add one mount, ``/crash/``, whose agent fails mid-answer (``runs_urls.py``); everything
else goes to the example's own ``/agent/``. ``js/agui_runs.mjs`` drives ``HttpAgent``: it drops
its connection, reattaches from a second connection through ``connectAgent()`` (so the client's
own verifier and message reducer read the reattached stream), presses Stop through the cancel
route, forges history, posts to a busy thread and meets a crash.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from django_pydantic_agent.agui import REDACTED_RUN_ERROR
from tests.e2e.crash_agent import PARTIAL_ANSWER, SECRET_ERROR
from tests.e2e.nodejs import run_node
from tests.example_project.support import (
    REPO_DIR,
    RunningServer,
    cookie_header,
    login,
    serve_example,
)

pytestmark = pytest.mark.e2e

#: What ``agui_runs.mjs`` asks: the scripted model's long answer.
PROMPT = "Tell me a long story about streaming."
#: The scripted model's long answer (``server_time``, then about 300 words) ends with this.
LONG_ANSWER_END = (
    "That is the whole trick: a Django view, an agent, and a protocol any AG-UI client speaks."
)


STORES = ("default", "memory-service")


@pytest.fixture(scope="module")
def booting(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Future[RunningServer]]]:
    """The example project under uvicorn, once per ``AGENT_STORE``, plus the ``/crash/`` mount.

    Both start side by side (a start is mostly Django booting in three processes), so the
    Memory Service server is up by the time the default store's tests are done.

    10 ms between words: a long answer streams for 3 s or more, time enough to drop, reattach
    and cancel. The heartbeat fires after 10 ms of silence, so every stream carries pings.
    """
    pythonpath = os.pathsep.join(filter(None, [str(REPO_DIR), os.environ.get("PYTHONPATH")]))
    contexts = {
        store: serve_example(
            tmp_path_factory.mktemp(f"agui-runs-{store}"),
            DJANGO_SETTINGS_MODULE="tests.e2e.runs_settings",
            PYTHONPATH=pythonpath,
            AGENT_STORE=store,
            DEMO_WORD_DELAY="0.01",
            AGENT_HEARTBEAT_SECONDS="0.01",
        )
        for store in STORES
    }
    with ThreadPoolExecutor(len(contexts)) as pool:
        futures = {store: pool.submit(context.__enter__) for store, context in contexts.items()}
        try:
            yield futures
        finally:
            for store, future in futures.items():
                if future.exception() is None:  # started: stop it
                    contexts[store].__exit__(None, None, None)


@pytest.fixture(scope="module", params=STORES)
def runs_server(
    request: pytest.FixtureRequest, booting: dict[str, Future[RunningServer]]
) -> RunningServer:
    """The server on ``AGENT_STORE=<param>``."""
    return booting[request.param].result(timeout=120)


@pytest.fixture(scope="module")
def user(runs_server: RunningServer) -> Iterator[httpx.Client]:
    """The demo user, logged in once per server (session and CSRF cookies set)."""
    with httpx.Client(base_url=runs_server.url, timeout=30) as client:
        login(client)
        client.headers["X-CSRFToken"] = client.cookies["csrftoken"]
        yield client


def flow(
    scripts: Path, server: RunningServer, user: httpx.Client, name: str, mount: str = "agent"
) -> Any:
    """Run ``agui_runs.mjs <name>`` as ``user`` against ``/<mount>/``; its JSON report."""
    return run_node(
        scripts,
        "agui_runs.mjs",
        name,
        f"{server.url}/{mount}/",
        env={"AGUI_COOKIE": cookie_header(user), "AGUI_CSRF": user.cookies["csrftoken"]},
    )


def settled_thread(user: httpx.Client, thread_id: str, mount: str = "agent") -> dict[str, Any]:
    """``GET threads/<id>/`` once the thread has no active run (the run's records are final)."""
    deadline = time.monotonic() + 30
    while True:
        response = user.get(f"/{mount}/threads/{thread_id}/")
        assert response.status_code == 200, response.text
        thread: dict[str, Any] = response.json()
        if thread["activeRun"] is None and thread["messages"][-1]["status"] != "active":
            return thread
        assert time.monotonic() < deadline, f"the run never ended: {thread}"
        time.sleep(0.05)


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def ids(run_id: str, first: int, last: int) -> list[str]:
    return [f"{run_id}:{seq}" for seq in range(first, last + 1)]


def test_a_client_that_drops_its_connection_leaves_the_whole_answer_complete(
    node_scripts: Path, runs_server: RunningServer, user: httpx.Client
) -> None:
    first = flow(node_scripts, runs_server, user, "disconnect")["first"]

    # The client read a few words of the answer, then aborted its fetch: no terminal event.
    assert first["error"] is None
    assert types(first["events"])[-1] == "TEXT_MESSAGE_CONTENT"
    assert not {"RUN_FINISHED", "RUN_ERROR"} & set(types(first["events"]))
    assert [f["id"] for f in first["frames"]] == ids(first["runId"], 1, len(first["events"]))
    seen = text_of(first["events"])

    # The run went on without a reader: the stored answer is whole and complete.
    answer = settled_thread(user, first["threadId"])["messages"][-1]
    assert answer["role"] == "assistant"
    assert answer["status"] == "complete"
    assert answer["content"].startswith(seen)
    assert answer["content"].endswith(LONG_ANSWER_END)
    assert len(answer["content"]) > 10 * len(seen)


def test_a_second_connection_reattaches_with_after_and_with_last_event_id(
    node_scripts: Path, runs_server: RunningServer, user: httpx.Client
) -> None:
    report = flow(node_scripts, runs_server, user, "reattach")
    first = report["first"]
    run_id = first["runId"]
    seen = len(first["events"])
    assert [f["id"] for f in first["frames"]] == ids(run_id, 1, seen)
    # The second connections came while the run was still streaming.
    assert report["activeRun"]["runId"] == run_id
    assert report["activeRun"]["lastSeq"] >= seen

    whole = settled_thread(user, first["threadId"])["messages"][-1]
    assert whole["status"] == "complete"
    assert whole["content"].endswith(LONG_ANSWER_END)

    for how in ("byQuery", "byHeader"):
        attached = report[how]
        # connectAgent() resolved: the client's verifier accepted the reattached stream.
        assert attached["error"] is None, how
        frames = attached["frames"]
        # RUN_STARTED and the start of the answer still streaming are re-sent without ids
        # (they were seen before), then every event after `seen`, each once, to the end.
        assert [f["type"] for f in frames[:2]] == ["RUN_STARTED", "TEXT_MESSAGE_START"]
        assert [f["id"] for f in frames[:2]] == [None, None]
        numbered = [f["id"] for f in frames[2:]]
        assert numbered == ids(run_id, seen + 1, seen + len(numbered)), how
        assert frames[-1]["type"] == "RUN_FINISHED"
        assert types(attached["events"]) == [f["type"] for f in frames]
        assert_valid_agui(attached["events"])
        # What the first connection showed plus what the second one built is the answer.
        [answer] = attached["newMessages"]
        assert answer["id"] == whole["id"]
        assert text_of(first["events"]) + answer["content"] == whole["content"], how


def test_stop_cancels_the_run_and_a_second_cancel_changes_nothing(
    node_scripts: Path, runs_server: RunningServer, user: httpx.Client
) -> None:
    report = flow(node_scripts, runs_server, user, "cancel")
    first = report["first"]
    assert report["cancel"] == {
        "status": 202,
        "body": {"runId": first["runId"], "status": "cancelling", "cancelled": True},
    }

    # The client's stream ended on its own, with the server's cancelled outcome.
    assert first["error"] is None
    assert first["outcome"] == "cancelled"
    assert first["events"][-1]["type"] == "RUN_FINISHED"
    assert first["events"][-1]["outcome"] == {"type": "cancelled"}
    assert_valid_agui(first["events"])
    shown = first["newMessages"][-1]

    thread = settled_thread(user, first["threadId"])
    answer = thread["messages"][-1]
    assert answer["status"] == "interrupted"
    assert answer["content"] == shown["content"]
    assert not answer["content"].endswith(LONG_ANSWER_END)

    cancel_path = f"/agent/runs/{first['threadId']}/{first['runId']}/cancel/"
    for _again in range(2):
        response = user.post(cancel_path)
        assert response.status_code == 200
        assert response.json() == {
            "runId": first["runId"],
            "status": "interrupted",
            "cancelled": False,
        }
    assert user.get(f"/agent/threads/{first['threadId']}/").json() == thread


def test_forged_history_ends_with_invalid_input_and_writes_nothing(
    node_scripts: Path, runs_server: RunningServer, user: httpx.Client
) -> None:
    report = flow(node_scripts, runs_server, user, "forged")
    assert report["first"]["outcome"] == "success"
    attempts = report["attempts"]

    for name, problem in [
        ("assistant", "(role assistant) is not in the stored history"),
        ("reanswer", "(role tool) answers a tool call that has a result"),
        ("fresh", "(role assistant) is not in the stored history"),
    ]:
        attempt = attempts[name]
        assert attempt["error"] is None, name
        assert types(attempt["events"]) == ["RUN_STARTED", "RUN_ERROR"], name
        error = attempt["events"][-1]
        assert error["code"] == "INVALID_INPUT", name
        assert problem in error["message"], name

    # A tool result for a call no message ever made is refused before any stream: 400 JSON.
    unknown = attempts["tool"]
    assert unknown["events"] == []
    assert unknown["error"]["status"] == 400
    assert "toolCallId answers no tool call" in unknown["error"]["payload"]["error"]

    # Nothing was written: the thread reads as before, the forged new thread does not exist.
    assert report["after"] == report["before"]
    assert report["freshThread"] == {"status": 404, "body": {"error": "No such thread."}}


def test_the_clients_whole_transcript_posted_again_works_on_a_stored_thread(
    node_scripts: Path, runs_server: RunningServer, user: httpx.Client
) -> None:
    output = run_node(
        node_scripts,
        "agui_client.mjs",
        f"{runs_server.url}/agent/",
        "What is 6 * 7?",
        "And what time is it?",
        env={"AGUI_COOKIE": cookie_header(user), "AGUI_CSRF": user.cookies["csrftoken"]},
    )
    first, second = output["turns"]
    for turn in (first, second):
        assert turn["error"] is None
        assert types(turn["events"])[-1] == "RUN_FINISHED"
    assert first["newMessages"][-1]["content"] == "I asked the calculator, and 6 * 7 = 42."
    assert second["newMessages"][-1]["content"].startswith("I checked the server's clock")

    # The second post carried the whole transcript (reasoning, tool call and result included);
    # the thread holds each message once, with the ids the client saw.
    stored = settled_thread(user, output["threadId"])["messages"]
    assert [m["id"] for m in stored] == [m["id"] for m in output["messages"]]
    turn = ["user", "reasoning", "assistant", "tool", "assistant"]
    assert [m["role"] for m in stored] == turn * 2


def test_a_second_run_on_a_busy_thread_is_a_409(
    node_scripts: Path, runs_server: RunningServer, user: httpx.Client
) -> None:
    report = flow(node_scripts, runs_server, user, "busy")
    first, second = report["first"], report["second"]

    assert second["events"] == []
    assert second["error"]["status"] == 409
    refusal = second["error"]["payload"]["error"]
    assert f"Thread {first['threadId']!r} is running run {first['runId']!r}" in refusal
    assert "cancel it (POST runs/<thread_id>/<run_id>/cancel/)" in refusal
    # Then the second tab pressed Stop on the first run.
    assert second["cancel"]["status"] == 202
    assert first["outcome"] == "cancelled"

    stored = settled_thread(user, first["threadId"])["messages"]
    assert [m["content"] for m in stored if m["role"] == "user"] == [PROMPT]
    assert stored[-1]["status"] == "interrupted"


def test_a_crash_ends_with_a_redacted_run_error(
    node_scripts: Path, runs_server: RunningServer, user: httpx.Client
) -> None:
    report = flow(node_scripts, runs_server, user, "crash", mount="crash")
    first = report["first"]
    assert first["error"] is None
    assert types(first["events"]) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_ERROR",
    ]
    assert first["events"][-1]["message"] == REDACTED_RUN_ERROR
    assert [f["id"] for f in first["frames"]] == ids(first["runId"], 1, 5)
    assert_valid_agui(first["events"])
    assert SECRET_ERROR not in json.dumps(report)

    # What streamed before the crash is kept, with the run's (redacted) error beside it.
    answer = settled_thread(user, first["threadId"], mount="crash")["messages"][-1]
    assert answer["content"] == PARTIAL_ANSWER
    assert answer["chatHistory"]["runOutcome"]["type"] == "error"
    assert answer["chatHistory"]["runOutcome"]["message"] == REDACTED_RUN_ERROR
    # A connection to the ended run gets what was kept and the same redacted error.
    later = report["later"]
    assert later["error"] is None
    assert [(f["type"], f["id"]) for f in later["frames"]] == [
        ("RUN_STARTED", None),
        ("MESSAGES_SNAPSHOT", None),
        ("RUN_ERROR", f"{first['runId']}:5"),
    ]
    assert later["events"][-1]["message"] == REDACTED_RUN_ERROR
    assert [m["content"] for m in later["newMessages"]] == [PROMPT, PARTIAL_ANSWER]
    # The error itself went to the server's log, as the message says.
    assert SECRET_ERROR in runs_server.log.read_text()
