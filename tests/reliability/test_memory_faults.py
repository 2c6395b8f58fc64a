"""Memory Service faults: 10 % of the emulator's answers fail, and no run loses or repeats a word.

The emulator and the AG-UI server are served by uvicorn on a loopback port; the Memory
Service store talks to the emulator over that socket. The emulator answers about one request
in ten with a 429 (with and without ``Retry-After``), a 503, a timeout (the client's read
timeout passes; sometimes after the write happened) or a dropped connection (sometimes after
the write happened). Fifteen threads take four turns each (60 runs, half with a tool call); every
frame's arrival is timed on the client. Then, with the faults disarmed, the stored threads are
compared with what was streamed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.test import override_settings
from django.urls import path
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions, RunOptions
from django_pydantic_agent.agui.errors import REDACTED_RUN_ERROR, REDACTED_SAVE_ERROR
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.memory_service_emulator import Fault, fault_injector
from django_pydantic_agent.memory_service import DRMemoryServiceClient
from django_pydantic_agent.persistence.memory_service import (
    MemoryServiceAttachmentStore,
    MemoryServiceConversationStore,
)
from tests.agui.conftest import run_body, session_cookie
from tests.reliability.stack import echo_agent, serve, user_texts
from tests.support.emulator import no_faults_armed

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

THREADS = 15
TURNS = 4
HEARTBEAT = 0.25
#: The Memory Service client's read timeout, and how long a timeout fault holds a request.
CLIENT_TIMEOUT = 1.0
HELD = 1.3
#: A stream that is silent for this many heartbeat intervals counts as stalled.
STALL_INTERVALS = 12


#: Run records and the relay's event batches share Django's cache; a roomy one, as deployed
#: (the test at the end checks the default 300 entries hold too, now that the relay retires
#: finished runs' batches).
ROOMY_CACHE = {
    "default": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "reliability-faults",
        "OPTIONS": {"MAX_ENTRIES": 100_000},
    }
}


def _faults() -> list[Fault]:
    """About 10 % of requests: each rule fires for 1-2 % of them (the first that fires wins)."""
    return [
        Fault.rate_limited(retry_after=1, rate=0.02),
        Fault.rate_limited(rate=0.02),
        Fault.unavailable(rate=0.02),
        Fault.timeout(HELD, rate=0.01),
        Fault.timeout(HELD, after_processing=True, rate=0.01),
        Fault.dropped_connection(rate=0.01),
        Fault.dropped_connection(after_processing=True, rate=0.01),
    ]


async def _model(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
    """Answer the last prompt word by word, pausing past a heartbeat; "tool" calls ``lookup``."""
    last = messages[-1]
    prompt = user_texts(messages)[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        yield "Looked it up: "
        await asyncio.sleep(3 * HEARTBEAT)
        yield f"found {prompt.split()[-1]}."
        return
    if prompt.startswith("tool"):
        args = json.dumps({"key": prompt.split()[-1]})
        yield {0: DeltaToolCall(name="lookup", json_args=args, tool_call_id=f"call-{prompt}")}
        return
    words = f"Answer to {prompt}, in several words streamed one by one".split()
    for index, word in enumerate(words):
        yield word + " "
        await asyncio.sleep(3 * HEARTBEAT if index == 3 else 0.01)


def fault_agent() -> Agent[None, str]:
    agent: Agent[None, str] = Agent(FunctionModel(stream_function=_model))

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Look ``key`` up."""
        return f"value of {key}"

    return agent


@dataclass
class Streamed:
    """What one run's client saw: its events, heartbeats and the longest silence."""

    thread: str
    run: str
    user_id: str
    prompt: str
    events: list[dict[str, Any]] = field(default_factory=list)
    pings: int = 0
    busy: int = 0
    max_gap: float = 0.0

    def texts(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for event in self.events:
            if event["type"] == "TEXT_MESSAGE_CONTENT":
                found[event["messageId"]] = found.get(event["messageId"], "") + event["delta"]
        return found

    def tool_calls(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for event in self.events:
            if event["type"] == "TOOL_CALL_ARGS":
                found[event["toolCallId"]] = found.get(event["toolCallId"], "") + event["delta"]
        return found


async def _stream(http: httpx.AsyncClient, record: Streamed) -> None:
    body = {
        "threadId": record.thread,
        "runId": record.run,
        "state": {},
        "messages": [{"id": record.user_id, "role": "user", "content": record.prompt}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    buffer = ""
    async with contextlib.AsyncExitStack() as stack:
        while True:
            response = await stack.enter_async_context(http.stream("POST", "/faults/", json=body))
            if response.status_code != 409:
                break
            # The previous run streamed its end, and its final flush is still being retried.
            record.busy += 1
            await response.aclose()
            await asyncio.sleep(0.2)
        assert response.status_code == 200, await response.aread()
        last = time.monotonic()
        async for chunk in response.aiter_text():
            now = time.monotonic()
            record.max_gap = max(record.max_gap, now - last)
            last = now
            buffer += chunk
            *frames, buffer = buffer.split("\n\n")
            for frame in frames:
                if frame.startswith(":"):
                    record.pings += 1
                for line in frame.split("\n"):
                    if line.startswith("data: "):
                        record.events.append(json.loads(line.removeprefix("data: ")))


async def _converse(http: httpx.AsyncClient, thread: str) -> list[Streamed]:
    runs = []
    for turn in range(TURNS):
        prompt = f"{'tool' if turn % 2 else 'text'} {thread} turn {turn}"
        record = Streamed(thread, f"run-{turn}", f"user-{thread}-{turn}", prompt)
        await _stream(http, record)
        runs.append(record)
    return runs


def _problems(runs: list[Streamed], stored: list[dict[str, Any]]) -> tuple[int, int]:
    """``(lost, duplicated)`` pieces of a thread: user turns, answer texts, tool calls."""
    lost = duplicated = 0
    ids = Counter(message.get("id") for message in stored)
    duplicated += sum(n - 1 for n in ids.values() if n > 1)
    users = Counter(m["id"] for m in stored if m.get("role") == "user")
    texts = Counter(
        (m["id"], m["content"]) for m in stored if m.get("role") == "assistant" and m.get("content")
    )
    calls = Counter(
        (call["id"], call["function"]["arguments"])
        for m in stored
        if m.get("role") == "assistant"
        for call in m.get("toolCalls") or []
    )
    for run in runs:
        lost += users[run.user_id] == 0
        for key in run.texts().items():
            lost += texts[key] == 0
        for key in run.tool_calls().items():
            lost += calls[key] == 0
    duplicated += sum(n - 1 for counter in (users, texts, calls) for n in counter.values() if n > 1)
    expected_texts = sum(len(run.texts()) for run in runs)
    duplicated += max(0, sum(texts.values()) - expected_texts)
    return lost, duplicated


@pytest.fixture
async def alice() -> Any:
    return await get_user_model().objects.acreate_user("alice", password="pw-alice")


@override_settings(CACHES=ROOMY_CACHE)
async def test_runs_lose_and_repeat_nothing_when_the_memory_service_fails_one_request_in_ten(
    alice: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="django_pydantic_agent")
    with no_faults_armed():
        async with (
            serve() as served,
            httpx.AsyncClient(timeout=CLIENT_TIMEOUT) as pool,
            httpx.AsyncClient(base_url=served.origin, timeout=60) as http,
        ):
            client = DRMemoryServiceClient(
                endpoint=f"{served.origin}/api/v2", api_token="token-faults", http_client=pool
            )
            store = MemoryServiceConversationStore(client, f"faults-{uuid.uuid4().hex}")
            await store.memory_space()  # a warm space: the runs' own requests meet the faults
            server = AGUIServer(
                fault_agent(),
                conversation_store=store,
                access=AccessPolicy(csrf_exempt=True),
                runs=RunOptions(heartbeat_seconds=HEARTBEAT),
                mount=MountOptions(namespace="faults"),
            )
            served.mount([path("faults/", server.urls)])
            http.cookies.set(settings.SESSION_COOKIE_NAME, await session_cookie(alice))
            threads = [f"thread-{n}" for n in range(THREADS)]
            fault_injector.seed(20261201)
            started = time.monotonic()
            with fault_injector.inject(*_faults()):
                conversations = await asyncio.gather(*(_converse(http, t) for t in threads))
                await RunCoordinator.wait_for_all_runs()
            elapsed = time.monotonic() - started
            fired = {
                kind: fault_injector.fired(kind)  # type: ignore[arg-type]
                for kind in ("rate_limit", "unavailable", "timeout", "drop")
            }
            from django_pydantic_agent.contrib.memory_service_emulator import request_counter

            requests = request_counter.count()

            lost = duplicated = 0
            endings: Counter[str] = Counter()
            unclear: list[str] = []
            for thread, runs in zip(threads, conversations, strict=True):
                answer = await http.get(f"/faults/threads/{thread}/")
                assert answer.status_code == 200, answer.text
                stored = answer.json()
                assert stored["activeRun"] is None
                thread_lost, thread_duplicated = _problems(runs, stored["messages"])
                lost += thread_lost
                duplicated += thread_duplicated
                for run in runs:
                    terminal = run.events[-1]
                    endings[terminal["type"]] += 1
                    record = await server.run_store.get(  # type: ignore[union-attr]
                        owner_id=str(alice.pk), thread_id=thread, run_id=run.run
                    )
                    assert record is not None
                    expected = "complete" if terminal["type"] == "RUN_FINISHED" else "errored"
                    if terminal["type"] not in ("RUN_FINISHED", "RUN_ERROR") or (
                        terminal["type"] == "RUN_ERROR"
                        and terminal["message"] not in (REDACTED_RUN_ERROR, REDACTED_SAVE_ERROR)
                    ):
                        unclear.append(f"{thread}/{run.run}: {terminal}")
                    if record.status != expected:
                        unclear.append(f"{thread}/{run.run}: record {record.status}, {terminal}")
            all_runs = [run for runs in conversations for run in runs]
            max_gap = max(run.max_gap for run in all_runs)
            pings = sum(run.pings for run in all_runs)
            busy = sum(run.busy for run in all_runs)
            retries = sum("retry" in r.getMessage() for r in caplog.records)
            # The emulator's own 503s are logged by django.request: only the package's count.
            errors = [
                r.getMessage()
                for r in caplog.records
                if r.levelno >= logging.ERROR and r.name.startswith("django_pydantic_agent")
            ]
            print(
                f"FIGURE memory-service faults: {len(all_runs)} runs ({THREADS} threads x "
                f"{TURNS} turns), {requests} emulator requests, faults fired {sum(fired.values())} "
                f"({', '.join(f'{k}={v}' for k, v in fired.items())}), "
                f"{100 * sum(fired.values()) / max(requests, 1):.1f} % of requests; "
                f"endings {dict(endings)}; lost={lost} duplicated={duplicated}; "
                f"max gap between frames {max_gap:.2f} s (heartbeat {HEARTBEAT} s, "
                f"{pings} heartbeats); {busy} follow-ups refused 409 while the previous run's "
                f"final flush was retried; {retries} client retries logged, {len(errors)} ERROR "
                f"records; {elapsed:.1f} s"
            )
            for message in errors:
                print("ERROR RECORD", message[:300])
            assert sum(fired.values()) > 0
            assert unclear == []
            assert (lost, duplicated) == (0, 0)
            assert all(run.pings > 0 for run in all_runs)
            assert max_gap <= STALL_INTERVALS * HEARTBEAT


DRAWER_ROUNDS = 30


async def test_the_thread_drawer_and_attachments_answer_json_under_the_same_faults(
    alice: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Every answer is a success or a JSON 503 with ``Retry-After``; what succeeded is stored."""
    caplog.set_level(logging.INFO, logger="django_pydantic_agent")
    with no_faults_armed():
        async with (
            serve() as served,
            httpx.AsyncClient(timeout=CLIENT_TIMEOUT) as pool,
            httpx.AsyncClient(base_url=served.origin, timeout=60) as http,
        ):
            client = DRMemoryServiceClient(
                endpoint=f"{served.origin}/api/v2", api_token="token-drawer", http_client=pool
            )
            space = f"drawer-{uuid.uuid4().hex}"
            store = MemoryServiceConversationStore(client, space)
            await store.memory_space()
            attachments = MemoryServiceAttachmentStore(client, space)
            server = AGUIServer(
                fault_agent(),
                conversation_store=store,
                attachment_store=attachments,
                access=AccessPolicy(csrf_exempt=True),
                runs=RunOptions(heartbeat_seconds=HEARTBEAT),
                mount=MountOptions(namespace="drawer"),
            )
            served.mount([path("drawer/", server.urls)])
            http.cookies.set(settings.SESSION_COOKIE_NAME, await session_cookie(alice))
            for n in range(3):
                body = run_body(thread_id=f"thread-{n}", run_id="run-0", text=f"text {n}")
                assert (await http.post("/drawer/", json=body)).status_code == 200
            await RunCoordinator.wait_for_all_runs()
            statuses: Counter[tuple[str, int]] = Counter()
            unclear: list[str] = []
            uploaded: dict[str, bytes] = {}
            titles: dict[str, str] = {}

            def judge(route: str, response: httpx.Response, ok: int) -> bool:
                statuses[(route, response.status_code)] += 1
                if response.status_code == ok:
                    return True
                if response.status_code != 503 or not response.headers.get("Retry-After"):
                    unclear.append(f"{route}: {response.status_code} {response.text[:200]}")
                elif response.headers["content-type"] != "application/json":
                    unclear.append(f"{route}: 503 {response.headers['content-type']}")
                return False

            fault_injector.seed(7)
            with fault_injector.inject(*_faults()):
                for n in range(DRAWER_ROUNDS):
                    thread = f"thread-{n % 3}"
                    judge("list", await http.get("/drawer/threads/"), 200)
                    judge("get", await http.get(f"/drawer/threads/{thread}/"), 200)
                    title = f"Title {n}"
                    renamed = await http.patch(f"/drawer/threads/{thread}/", json={"title": title})
                    if judge("rename", renamed, 200):
                        titles[thread] = title
                    data = f"file {n} ".encode() * 50
                    upload = await http.post(
                        "/drawer/attachments/", files={"file": (f"{n}.txt", data, "text/plain")}
                    )
                    if judge("upload", upload, 201):
                        uploaded[upload.json()["id"]] = data
                        got = await http.get(f"/drawer/attachments/{upload.json()['id']}/")
                        if judge("download", got, 200) and got.content != data:
                            unclear.append(f"download {n}: other bytes")
            fired = fault_injector.fired()
            # With the faults gone: every rename and upload that was answered as done is stored.
            listed = (await http.get("/drawer/threads/")).json()["threads"]
            stored_titles = {row["threadId"]: row["title"] for row in listed}
            lost_renames = [t for t, title in titles.items() if stored_titles.get(t) != title]
            lost_files = []
            for attachment_id, data in uploaded.items():
                got = await http.get(f"/drawer/attachments/{attachment_id}/")
                if got.status_code != 200 or got.content != data:
                    lost_files.append(attachment_id)
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.ERROR and r.name.startswith("django_pydantic_agent")
    ]
    answered = sum(statuses.values())
    busy = sum(n for (_, status), n in statuses.items() if status == 503)
    print(
        f"FIGURE memory-service faults, drawer and attachments: {answered} requests "
        f"({DRAWER_ROUNDS} rounds of list, get, rename, upload, download), {fired} faults "
        f"fired; answered 503 with Retry-After: {busy} "
        f"({', '.join(f'{r}={n}' for (r, s), n in sorted(statuses.items()) if s == 503)}); "
        f"other failures {len(unclear)}; lost renames {len(lost_renames)}, lost files "
        f"{len(lost_files)} of {len(uploaded)}; ERROR records {len(errors)}"
    )
    assert unclear == []
    assert (lost_renames, lost_files) == ([], [])
    assert errors == []


EVICTION_RUNS = 150


async def test_run_records_survive_many_runs_in_the_default_local_memory_cache(
    alice: Any,
) -> None:
    from django_pydantic_agent.persistence import DjangoSessionConversationStore

    async with serve() as served, httpx.AsyncClient(base_url=served.origin, timeout=60) as http:
        server = AGUIServer(
            echo_agent(),
            conversation_store=DjangoSessionConversationStore(max_threads=EVICTION_RUNS + 1),
            access=AccessPolicy(csrf_exempt=True),
            mount=MountOptions(namespace="evict"),
        )
        served.mount([path("evict/", server.urls)])
        http.cookies.set(settings.SESSION_COOKIE_NAME, await session_cookie(alice))
        # The cache as a fresh worker has it: earlier tests' entries would share its 300.
        locmem = caches["default"]
        assert isinstance(locmem, LocMemCache)
        await locmem.aclear()
        peak = 0
        for n in range(EVICTION_RUNS):
            body = run_body(thread_id=f"thread-{n}", run_id="run-0", text=f"text {n}")
            assert (await http.post("/evict/", json=body)).status_code == 200
            peak = max(peak, len(locmem._cache))
        await RunCoordinator.wait_for_all_runs()
        missing = [
            n
            for n in range(EVICTION_RUNS)
            if (await http.get(f"/evict/runs/thread-{n}/run-0/")).status_code != 200
        ]
    print(
        f"FIGURE run records in the default LocMemCache: {len(missing)} of {EVICTION_RUNS} "
        f"finished runs answer reattach with 404; at most {peak} cache entries after a run"
    )
    assert missing == []
