"""``AGENT_STORE``: the stores ``example_project/chat/stores.py`` builds, and the demo on each."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from chat import stores
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from django_pydantic_agent.memory_service import DRMemoryServiceClient
from tests.example_project.support import (
    example_env,
    login,
    manage,
    parse_sse,
    run_input,
    serve_example,
)

EXAMPLE_SETTINGS = {
    "AGENT_STORE": "default",
    "AGENT_MAX_THREADS": 7,
    "AGENT_MAX_FILES": 5,
    "AGENT_MAX_UPLOAD_BYTES": 1000,
    "AGENT_ATTACHMENT_MAX_BYTES": 500,
    "AGENT_MEMORY_SERVICE_ENDPOINT": "",
    "AGENT_MEMORY_SERVICE_TOKEN": "",
    "AGENT_MEMORY_SPACE": "example-space",
    "ALLOWED_HOSTS": ["127.0.0.1", "localhost"],
}


def _has_memory_service_stores() -> bool:
    try:
        __import__(stores.MEMORY_SERVICE_STORES_MODULE)
    except ImportError:
        return False
    return True


needs_memory_service_stores = pytest.mark.skipif(
    not _has_memory_service_stores(),
    reason="this django-pydantic-agent has no persistence.memory_service stores yet",
)


@pytest.fixture(autouse=True)
def example_settings() -> Iterator[None]:
    """The example's store settings, and a fresh process-wide Memory Service client."""
    with override_settings(**EXAMPLE_SETTINGS):
        yield
    asyncio.run(stores.aclose_memory_service_client())


def test_default_is_contrib_store_with_the_quotas_of_the_settings() -> None:
    conversations, attachments = stores.build_stores()

    assert isinstance(conversations, DefaultConversationStore)
    assert isinstance(attachments, DefaultAttachmentStore)
    assert conversations.max_threads_per_owner == 7
    assert (attachments.max_files_per_owner, attachments.max_bytes_per_owner) == (5, 1000)


def test_an_unknown_store_is_refused_with_the_choices() -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        stores.build_stores("postgres")

    assert str(caught.value) == (
        "AGENT_STORE='postgres' is not a store the example knows; use one of "
        "'default', 'memory-service'."
    )


def test_manage_py_check_names_an_unknown_store(tmp_path: Path) -> None:
    env = example_env(tmp_path / "db.sqlite3", AGENT_STORE="redis")

    result = manage("check", env=env)

    assert result.returncode != 0
    assert "AGENT_STORE='redis' is not a store the example knows" in result.stderr


def test_memory_service_without_the_stores_module_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, stores.MEMORY_SERVICE_STORES_MODULE, None)

    with pytest.raises(ImproperlyConfigured) as caught:
        stores.build_stores("memory-service")

    message = str(caught.value)
    assert message.startswith(
        "AGENT_STORE='memory-service' needs MemoryServiceConversationStore and "
        "MemoryServiceAttachmentStore from django_pydantic_agent.persistence.memory_service"
    )
    assert message.endswith("or set AGENT_STORE=default.")


def test_a_real_endpoint_without_a_token_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATAROBOT_API_TOKEN", raising=False)

    with (
        override_settings(AGENT_MEMORY_SERVICE_ENDPOINT="https://memory.example.com/api/v2"),
        pytest.raises(ImproperlyConfigured) as caught,
    ):
        stores.memory_service_client()

    assert "DATAROBOT_ENDPOINT='https://memory.example.com/api/v2'" in str(caught.value)
    assert "DATAROBOT_API_TOKEN" in str(caught.value)


def test_a_real_endpoint_gets_one_client_per_process() -> None:
    with override_settings(
        AGENT_MEMORY_SERVICE_ENDPOINT="https://memory.example.com/api/v2/",
        AGENT_MEMORY_SERVICE_TOKEN="secret-token",
    ):
        client = stores.memory_service_client()
        again = stores.memory_service_client()

    assert isinstance(client, DRMemoryServiceClient)
    assert again is client
    assert client.base_url == "https://memory.example.com/api/v2/memory"


def test_without_an_endpoint_the_client_talks_to_this_project() -> None:
    client = stores.memory_service_client()

    # The first host the project answers to; the requests go through its ASGI application.
    assert client.base_url == "http://127.0.0.1/api/v2/memory"


async def test_the_in_process_client_is_closed_at_shutdown() -> None:
    stores.memory_service_client()
    pool = stores._pool
    assert pool is not None
    assert not pool.is_closed

    await stores.aclose_memory_service_client()

    assert pool.is_closed
    assert stores._client is None
    assert stores.memory_service_client() is not None  # made again on next use


@needs_memory_service_stores
def test_memory_service_builds_both_stores_on_one_client() -> None:
    from django_pydantic_agent.persistence.memory_service import (
        MemoryServiceAttachmentStore,
        MemoryServiceConversationStore,
    )

    conversations, attachments = stores.build_stores("memory-service")

    assert isinstance(conversations, MemoryServiceConversationStore)
    assert isinstance(attachments, MemoryServiceAttachmentStore)
    assert repr(conversations) == "MemoryServiceConversationStore(space='example-space')"
    assert repr(attachments) == "MemoryServiceAttachmentStore(space='example-space', max_bytes=500)"


def _table_rows(database: Path, suffix: str) -> int:
    with sqlite3.connect(database) as connection:
        (table,) = connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ?", (f"%{suffix}",)
        ).fetchone()
        return int(connection.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0])


@needs_memory_service_stores
def test_the_demo_runs_on_the_emulator_mounted_in_the_project(tmp_path: Path) -> None:
    """``AGENT_STORE=memory-service`` under uvicorn: a run, the drawer, an upload, all on it."""
    with (
        serve_example(tmp_path, AGENT_STORE="memory-service", DEMO_WORD_DELAY="0") as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        token = login(client)
        headers = {"X-CSRFToken": token}
        run = client.post(
            "/agent/",
            json=run_input("What is 6 * 7?", thread_id="on-the-service"),
            headers={**headers, "Accept": "text/event-stream"},
        )
        listed = client.get("/agent/threads/").json()
        thread = client.get("/agent/threads/on-the-service/").json()
        upload = client.post(
            "/agent/attachments/",
            files={"file": ("notes.txt", b"kept as events\n", "text/plain")},
            headers=headers,
        )
        download = client.get(f"/agent/attachments/{upload.json()['id']}/")

    assert run.status_code == 200
    assert parse_sse(run.text)[-1]["type"] == "RUN_FINISHED"
    assert [item["threadId"] for item in listed["threads"]] == ["on-the-service"]
    assert thread["messages"][-1]["content"] == "I asked the calculator, and 6 * 7 = 42."
    assert upload.status_code == 201
    assert download.content == b"kept as events\n"
    # Kept by the emulator's tables, not by contrib.store's.
    assert _table_rows(server.database, "storedconversation") == 0
    assert _table_rows(server.database, "storedattachment") == 0
    assert _table_rows(server.database, "emulatedevent") > 0
    log = server.log.read_text()
    assert "Traceback" not in log
    assert "HTTP Request:" not in log, "one log line per Memory Service request is noise"


@pytest.mark.usefixtures("example_urls")
def test_the_urlconf_mounts_the_server_on_the_stores_of_agent_store() -> None:
    from django.urls import resolve, reverse

    server = resolve(reverse("agent:threads")).func.agui_server  # type: ignore[attr-defined]

    assert isinstance(server.conversation_store, DefaultConversationStore)
    assert isinstance(server.attachment_store, DefaultAttachmentStore)
