"""Durable runs on the Memory Service stores, over real HTTP to the emulator."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from uuid import uuid4

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui
from django.http import StreamingHttpResponse
from django.test import RequestFactory

from django_pydantic_agent.agui import AccessPolicy, AGUIServer
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.memory_service import DRMemoryServiceClient
from django_pydantic_agent.persistence.memory_service import MemoryServiceConversationStore
from tests.agui.agents import scripted_agent
from tests.agui.conftest import run_body, sse_frames
from tests.support.emulator import no_faults_armed

pytestmark = [pytest.mark.django_db(transaction=True)]


@asynccontextmanager
async def served_on_memory_service(live_server: Any, agent: Any) -> AsyncIterator[AGUIServer]:
    """``agent`` served on a Memory Service store of its own, over HTTP to the emulator; its
    runs are waited for before the client closes."""
    with no_faults_armed():
        async with httpx.AsyncClient(timeout=30.0) as pool:
            client = DRMemoryServiceClient(
                endpoint=f"{live_server.url}/api/v2", api_token="token-runs", http_client=pool
            )
            store = MemoryServiceConversationStore(client, f"runs-{uuid4().hex}")
            yield AGUIServer(agent, conversation_store=store, access=AccessPolicy(csrf_exempt=True))
            await RunCoordinator.wait_for_all_runs()


@pytest.fixture
async def server(live_server: Any) -> AsyncIterator[AGUIServer]:
    async with served_on_memory_service(live_server, scripted_agent()) as served:
        yield served


def as_user(request: Any, user: Any) -> Any:
    async def auser() -> Any:
        return user

    request.auser = auser
    request.user = user
    return request


async def body_of(response: Any) -> str:
    assert isinstance(response, StreamingHttpResponse)
    return "".join([bytes(chunk).decode() async for chunk in response])


async def test_a_run_on_the_memory_service_is_stored_and_reattaches_from_storage(
    server: AGUIServer, alice: Any, bob: Any
) -> None:
    factory = RequestFactory()
    posted = as_user(factory.post("/", data=run_body(), content_type="application/json"), alice)
    frames = sse_frames(await body_of(await server.run_view(posted)))
    await RunCoordinator.wait_for_all_runs()
    thread = await server.thread_view(as_user(factory.get("/"), alice), thread_id="thread-1")
    reattach = await server.run_reattach_view(
        as_user(factory.get("/"), alice), thread_id="thread-1", run_id="run-1"
    )
    stranger = await server.run_reattach_view(
        as_user(factory.get("/"), bob), thread_id="thread-1", run_id="run-1"
    )
    assert [frame_id for frame_id, _ in frames][:2] == ["run-1:1", "run-1:2"]
    events = [event for _, event in frames]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert_valid_agui(events)
    stored = json.loads(thread.content)
    assert stored["messages"][-1]["content"] == "The sum is 5."
    assert stored["activeRun"] is None
    replayed = [event for _, event in sse_frames(await body_of(reattach))]
    assert [e["type"] for e in replayed] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert replayed[1]["messages"][-1]["content"] == "The sum is 5."
    assert stranger.status_code == 404


async def test_a_follow_up_sent_as_the_stream_ends_waits_for_the_last_writes(
    server: AGUIServer, alice: Any
) -> None:
    from django_pydantic_agent.contrib.memory_service_emulator import Fault, fault_injector

    factory = RequestFactory()
    first = as_user(factory.post("/", data=run_body(), content_type="application/json"), alice)
    follow_up = run_body(run_id="run-2", text="And 3 + 4?")
    # Slow writes: the run's last flush is still going on when its stream has ended.
    with fault_injector.inject(Fault.latency(0.2, methods=["POST", "PATCH"])):
        ended = sse_frames(await body_of(await server.run_view(first)))
        second = await server.run_view(
            as_user(factory.post("/", data=follow_up, content_type="application/json"), alice)
        )
        assert second.status_code == 200
        answered = sse_frames(await body_of(second))
    await RunCoordinator.wait_for_all_runs()
    thread = await server.thread_view(as_user(factory.get("/"), alice), thread_id="thread-1")
    assert ended[-1][1]["type"] == "RUN_FINISHED"
    assert answered[-1][1]["type"] == "RUN_FINISHED"
    users = [m["content"] for m in json.loads(thread.content)["messages"] if m["role"] == "user"]
    assert users == ["What is 2 + 3?", "And 3 + 4?"]


async def test_a_memory_service_outage_is_a_json_503_never_a_500(
    live_server: Any, alice: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from django_pydantic_agent.agui.http import MEMORY_SERVICE_BUSY
    from django_pydantic_agent.chat_history.memory_service import RetryPolicy
    from django_pydantic_agent.contrib.memory_service_emulator import Fault, fault_injector
    from django_pydantic_agent.persistence.memory_service import MemoryServiceAttachmentStore

    factory = RequestFactory()
    with no_faults_armed():
        async with httpx.AsyncClient(timeout=30.0) as pool:
            client = DRMemoryServiceClient(
                endpoint=f"{live_server.url}/api/v2", api_token="token-down", http_client=pool
            )
            space = f"down-{uuid4().hex}"
            server = AGUIServer(
                scripted_agent(),
                conversation_store=MemoryServiceConversationStore(client, space),
                # One attempt: the 503 comes at once instead of after the store's retries.
                attachment_store=MemoryServiceAttachmentStore(
                    client, space, retry=RetryPolicy(attempts=1)
                ),
                access=AccessPolicy(csrf_exempt=True),
            )
            upload = factory.post("/", data={"file": io.BytesIO(b"notes")})
            uploaded = await server.attachments_view(as_user(upload, alice))
            attachment_id = json.loads(uploaded.content)["id"]
            with fault_injector.inject(Fault.unavailable()):
                listed = await server.threads_view(as_user(factory.get("/"), alice))
                downloaded = await server.attachment_view(
                    as_user(factory.get("/"), alice), attachment_id=attachment_id
                )
            with fault_injector.inject(Fault.rate_limited(retry_after=7)):
                limited = await server.attachment_view(
                    as_user(factory.get("/"), alice), attachment_id=attachment_id
                )
    for response in (listed, downloaded, limited):
        assert response.status_code == 503
        assert json.loads(response.content) == {"error": MEMORY_SERVICE_BUSY}
    assert (listed["Retry-After"], downloaded["Retry-After"], limited["Retry-After"]) == (
        "1",
        "1",
        "7",
    )
    assert [r.levelname for r in caplog.records if "Memory Service error" in r.message] == [
        "WARNING"
    ] * 3


def test_any_other_memory_service_error_is_a_json_500_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from django_pydantic_agent.agui.http import MEMORY_SERVICE_FAILED, backend_error_response
    from django_pydantic_agent.memory_service import DRMemoryBadRequestError

    error = DRMemoryBadRequestError("bad participant s3cr3t", 400)
    response = backend_error_response(RequestFactory().get("/agent/threads/"), error)
    assert response.status_code == 500
    assert json.loads(response.content) == {"error": MEMORY_SERVICE_FAILED}
    [record] = [r for r in caplog.records if "Memory Service error" in r.message]
    assert record.levelname == "ERROR"
    assert record.exc_info is not None
