"""The example project's own URLconf, served in-process through Django's ASGI handler.

The chat page and the AG-UI endpoint exactly as ``example_project/urls.py`` wires them (the demo
agent, contrib.store's conversation and attachment stores, CSRF enforced), under the test
suite's database and storage.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.http import StreamingHttpResponse
from django.test import AsyncClient
from django.urls import reverse
from django.utils import timezone

from django_pydantic_agent.contrib.store.models import (
    StoredAttachment,
    StoredConversationAttachment,
)
from tests.example_project.support import parse_sse, run_input

pytestmark = pytest.mark.django_db(transaction=True)

DOCS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "example-project.md"


@pytest.fixture
async def client(example_urls: None) -> AsyncClient:
    """A logged-in client that enforces CSRF, holding a CSRF cookie from the chat page."""
    user = await get_user_model().objects.acreate_user("demo", password="demo-password")
    client = AsyncClient(enforce_csrf_checks=True)
    await client.aforce_login(user)
    page = await client.get("/")
    assert page.status_code == 200
    return client


async def _stream(client: AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.post(
        "/agent/",
        data=json.dumps(body),
        content_type="application/json",
        headers={"X-CSRFToken": client.cookies["csrftoken"].value, "Accept": "text/event-stream"},
    )
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/event-stream")
    return parse_sse((await _streamed(response)).decode())


async def _streamed(response: object) -> bytes:
    """The whole body of a streamed response (the AG-UI views stream asynchronously)."""
    assert isinstance(response, StreamingHttpResponse)
    assert response.is_async
    return b"".join(
        [chunk async for chunk in cast(AsyncIterator[bytes], response.streaming_content)]
    )


async def test_chat_page_carries_the_endpoint_and_a_csrf_token(client: AsyncClient) -> None:
    page = await client.get("/")

    html = page.content.decode()
    assert 'data-agent-url="/agent/"' in html
    assert 'data-csrf-token="' in html
    assert "/static/agent_chat/chat.js" in html
    assert "csrftoken" in page.cookies


async def test_chat_page_states_the_upload_limits(client: AsyncClient) -> None:
    page = await client.get("/")

    html = page.content.decode()
    assert 'data-upload-url="/agent/attachments/"' in html
    assert f'data-upload-max-bytes="{5 * 1024 * 1024}"' in html
    assert 'accept="text/*,image/*,application/pdf,application/json"' in html


async def test_chat_page_needs_a_login(example_urls: None) -> None:
    response = await AsyncClient().get("/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


async def test_login_page_renders(example_urls: None) -> None:
    response = await AsyncClient().get("/accounts/login/")

    assert response.status_code == 200
    assert b'name="username"' in response.content


async def test_demo_run_streams_valid_agui(client: AsyncClient) -> None:
    events = await _stream(client, run_input("What is 6 * 7?"))

    assert_valid_agui(events)
    types = [event["type"] for event in events]
    assert types[0] == "RUN_STARTED"
    assert types[-1] == "RUN_FINISHED"
    for expected in ("REASONING_MESSAGE_CONTENT", "TOOL_CALL_RESULT", "TEXT_MESSAGE_CONTENT"):
        assert expected in types
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "I asked the calculator, and 6 * 7 = 42."


async def test_the_endpoint_enforces_csrf(client: AsyncClient) -> None:
    response = await client.post(
        "/agent/", data=json.dumps(run_input("hi")), content_type="application/json"
    )

    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]


async def test_the_run_is_listed_as_a_thread(client: AsyncClient) -> None:
    await _stream(client, run_input("What is 6 * 7?", thread_id="t-42"))

    listing = await client.get("/agent/threads/")
    thread = await client.get("/agent/threads/t-42/")

    assert [t["threadId"] for t in listing.json()["threads"]] == ["t-42"]
    roles = [m["role"] for m in thread.json()["messages"]]
    assert roles == ["user", "reasoning", "assistant", "tool", "assistant"]


async def test_the_page_shows_a_threads_usage_from_the_usage_route(client: AsyncClient) -> None:
    await _stream(client, run_input("What is 6 * 7?", thread_id="t-42"))

    page = (await client.get("/")).content.decode()
    usage = (await client.get("/agent/usage/?thread=t-42&days=1")).json()

    assert 'id="thread-usage"' in page
    thread = usage["thread"]
    assert (thread["threadId"], thread["runs"]) == ("t-42", 1)
    assert thread["totalTokens"] == thread["inputTokens"] + thread["outputTokens"] > 0
    # The demo's scripted model has no price: the page says "cost unknown", never "$0".
    assert thread["unpricedRuns"] == 1


@pytest.mark.usefixtures("example_urls")
def test_the_memory_service_emulator_is_mounted() -> None:
    assert reverse("memory_service_emulator:space-list") == "/api/v2/memory/"
    assert reverse("agent:run") == "/agent/"


def _csrf(client: AsyncClient) -> dict[str, str]:
    return {"X-CSRFToken": client.cookies["csrftoken"].value}


async def test_an_attachment_goes_with_a_message_and_comes_back_with_the_thread(
    client: AsyncClient,
) -> None:
    upload = await client.post(
        "/agent/attachments/",
        {"file": SimpleUploadedFile("notes.txt", b"coffee\n", content_type="text/plain")},
        headers=_csrf(client),
    )
    assert upload.status_code == 201, upload.content
    ref = upload.json()
    assert ref == {"id": ref["id"], "name": "notes.txt", "mime": "text/plain", "size": 7}
    body = run_input("What is in my notes?", thread_id="t-notes")
    body["messages"][0]["attachments"] = [ref]

    await _stream(client, body)
    thread = await client.get("/agent/threads/t-notes/")
    download = await client.get(f"/agent/attachments/{ref['id']}/")

    assert thread.json()["messages"][0]["attachments"] == [ref]
    linked = StoredConversationAttachment.objects.filter(
        conversation__thread_id="t-notes", attachment__attachment_id=ref["id"]
    )
    assert await linked.aexists(), "the save linked the attachment to the thread"
    assert download.status_code == 200
    assert await _streamed(download) == b"coffee\n"
    assert download["Content-Disposition"] == 'attachment; filename="notes.txt"'


async def test_prune_keeps_an_attachment_a_run_quoted_and_removes_an_orphan(
    client: AsyncClient,
) -> None:
    refs = []
    for name in ("kept.txt", "orphan.txt"):
        upload = await client.post(
            "/agent/attachments/",
            {"file": SimpleUploadedFile(name, b"data", content_type="text/plain")},
            headers=_csrf(client),
        )
        refs.append(upload.json())
    kept, orphan = refs
    body = run_input("Read the kept file.", thread_id="t-prune")
    body["messages"][0]["attachments"] = [kept]
    await _stream(client, body)
    await StoredAttachment.objects.aupdate(created_at=timezone.now() - timedelta(hours=1))

    await sync_to_async(call_command)(
        "agent_store_prune_attachments", "--older-than", "1s", stdout=io.StringIO()
    )
    thread = await client.get("/agent/threads/t-prune/")

    assert (await client.get(f"/agent/attachments/{kept['id']}/")).status_code == 200
    assert (await client.get(f"/agent/attachments/{orphan['id']}/")).status_code == 404
    assert thread.json()["messages"][0]["attachments"] == [kept]


async def test_a_removed_attachment_is_gone(client: AsyncClient) -> None:
    upload = await client.post(
        "/agent/attachments/",
        {"file": SimpleUploadedFile("draft.txt", b"draft", content_type="text/plain")},
        headers=_csrf(client),
    )
    attachment_id = upload.json()["id"]

    deleted = await client.delete(f"/agent/attachments/{attachment_id}/", headers=_csrf(client))
    download = await client.get(f"/agent/attachments/{attachment_id}/")

    assert deleted.status_code == 204
    assert download.status_code == 404


async def test_uploads_outside_the_allowlist_are_415(client: AsyncClient) -> None:
    response = await client.post(
        "/agent/attachments/",
        {"file": SimpleUploadedFile("a.zip", b"PK\x03\x04", content_type="application/zip")},
        headers=_csrf(client),
    )

    assert response.status_code == 415
    assert "application/zip" in response.json()["error"]


async def test_uploads_need_the_csrf_token(client: AsyncClient) -> None:
    response = await client.post(
        "/agent/attachments/",
        {"file": SimpleUploadedFile("notes.txt", b"x", content_type="text/plain")},
    )

    assert response.status_code == 403


def _answer(events: list[dict[str, Any]]) -> str:
    """The text of the run's last answer."""
    ends = [i for i, e in enumerate(events) if e["type"] == "TEXT_MESSAGE_START"]
    return "".join(e["delta"] for e in events[ends[-1] :] if e["type"] == "TEXT_MESSAGE_CONTENT")


async def _upload(client: AsyncClient, name: str, data: bytes, mime: str) -> dict[str, Any]:
    upload = await client.post(
        "/agent/attachments/",
        {"file": SimpleUploadedFile(name, data, content_type=mime)},
        headers=_csrf(client),
    )
    assert upload.status_code == 201, upload.content
    return dict(upload.json())


async def test_the_demo_agent_reads_the_file_and_quotes_it(client: AsyncClient) -> None:
    ref = await _upload(client, "notes.txt", b"Remember the milk.\nAnd the eggs.\n", "text/plain")
    body = run_input("What does my file say?", thread_id="t-read")
    body["messages"][0]["attachments"] = [ref]

    first = await _stream(client, body)
    # A later turn that asks about "my file" reads the one an earlier message attached.
    second = await _stream(
        client, run_input("And what does the file say now?", thread_id="t-read", run_id="run-2")
    )

    assert_valid_agui(first)
    quote = "**notes.txt** (33 bytes, 2 lines) says:\n\n> Remember the milk.\n> And the eggs."
    # The answer docs/example-project.md prints.
    assert f"```text\n{quote}\n```" in DOCS_PAGE.read_text(encoding="utf-8")
    for events in (first, second):
        (start,) = [e for e in events if e["type"] == "TOOL_CALL_START"]
        assert start["toolCallName"] == "read_attachment"
        (result,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
        assert result["content"] == "Remember the milk.\nAnd the eggs.\n"
        assert _answer(events) == quote


async def test_the_demo_agent_cannot_read_another_users_file(client: AsyncClient) -> None:
    from django_pydantic_agent.agui.attachment_fence import attachment_fence

    other = await get_user_model().objects.acreate_user("other", password="other-password")
    theirs = AsyncClient(enforce_csrf_checks=True)
    await theirs.aforce_login(other)
    assert (await theirs.get("/")).status_code == 200
    secret = await _upload(theirs, "secret.txt", b"the other user's secret\n", "text/plain")

    # The demo user types a fence naming it: the tool refuses, the run still finishes.
    events = await _stream(client, run_input(f"Read my file.\n{attachment_fence([secret])}"))

    assert events[-1]["type"] == "RUN_FINISHED"
    assert "secret\\n" not in json.dumps(events)
    assert "user's secret" not in json.dumps(events)
    assert _answer(events) == (
        "The read_attachment tool could not help this time: There is no attachment "
        f"'{secret['id']}'; use the id of a file the user attached."
    )
