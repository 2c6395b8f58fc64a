"""A store wrapped the way users wrap one (a proxy that forwards through ``__getattr__``) is a
store: ``AGUIServer``, ``ScopedConversationStore`` and the system checks take it on every
supported Python. ``isinstance()`` on a runtime-checkable protocol stopped seeing members found
through ``__getattr__`` in Python 3.12, so these tests fail there without ``implements``.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core import checks
from django.test import override_settings
from django.urls import path

from django_pydantic_agent.agui import AccessPolicy, AGUIServer
from django_pydantic_agent.chat_history.protocols import implements, missing_members
from django_pydantic_agent.contrib.chat.context import keeps_branches, thread_features
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
    RetentionPolicy,
)
from django_pydantic_agent.persistence import (
    ConversationStore,
    DjangoSessionConversationStore,
    ScopedConversationStore,
)
from django_pydantic_agent.persistence.features import store_features
from django_pydantic_agent.persistence.runs import CacheRunStore, ResumableRunStore
from tests.agui.agents import text_agent
from tests.agui.conftest import logged_in, run_body, sse_events

pytestmark = pytest.mark.django_db(transaction=True)


class LoggingStore:
    """A logging proxy, as a user writes one: each awaited call is noted, the rest forwarded."""

    def __init__(self, inner: Any, calls: list[str]) -> None:
        self._inner = inner
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(value):
            return value

        @functools.wraps(value)
        async def logged(*args: Any, **kwargs: Any) -> Any:
            self._calls.append(name)
            return await value(*args, **kwargs)

        return logged


class NoRename:
    """Everything of a ``ConversationStore`` but ``rename``."""

    async def load(self, thread_id: str, *, request: Any) -> None:
        return None

    async def save(self, conversation: Any, *, request: Any) -> None:
        return None

    async def delete(self, thread_id: str, *, request: Any) -> None:
        return None

    async def list(self, *, request: Any, limit: int | None = None) -> Any:
        return None

    async def exists(self, thread_id: str, *, request: Any) -> bool:
        return False


@pytest.fixture
def mounted() -> Iterator[tuple[AGUIServer, list[str]]]:
    calls: list[str] = []
    store = DefaultConversationStore()
    server = AGUIServer(
        text_agent(),
        conversation_store=LoggingStore(store, calls),
        attachment_store=LoggingStore(DefaultAttachmentStore(), calls),
        run_store=LoggingStore(store.run_store(), calls),
        access=AccessPolicy(csrf_exempt=True),
    )
    urlconf = types.ModuleType("delegating_urls")
    urlconf.urlpatterns = [path("proxied/", server.urls)]  # type: ignore[attr-defined]
    sys.modules[urlconf.__name__] = urlconf
    try:
        with override_settings(ROOT_URLCONF=urlconf.__name__):
            yield server, calls
    finally:
        del sys.modules[urlconf.__name__]


async def test_a_logging_proxy_around_every_store_is_mounted_and_used(
    mounted: tuple[AGUIServer, list[str]], alice: Any
) -> None:
    server, calls = mounted
    # The proxies are taken for what they forward to: stores that persist and resume runs.
    assert server.persists_conversations
    assert server.accepts_attachments
    assert server.runs.on_worker_loss == "resume"
    async with await logged_in(alice) as http:
        streamed = await http.post("/proxied/", json=run_body(text="Hello"))
        listed = await http.get("/proxied/threads/")
        thread = await http.get("/proxied/threads/thread-1/")
    assert sse_events(streamed.text)[-1]["type"] == "RUN_FINISHED"
    assert [item["threadId"] for item in listed.json()["threads"]] == ["thread-1"]
    assert [m["role"] for m in thread.json()["messages"]] == ["user", "assistant"]
    # Every call went through the proxy: the run's repositories, its record, the reads.
    assert {"repositories", "start", "finish"} <= set(calls)


async def test_scoped_wraps_a_proxied_store() -> None:
    calls: list[str] = []
    scoped = ScopedConversationStore(
        LoggingStore(DefaultConversationStore(), calls), scope="support"
    )
    assert implements(scoped, ConversationStore)
    assert scoped.inner is not None


def test_the_checks_ask_a_proxied_store() -> None:
    calls: list[str] = []
    server = AGUIServer(
        text_agent(),
        conversation_store=LoggingStore(DjangoSessionConversationStore(), calls),
        access=AccessPolicy(csrf_exempt=True),
    )
    urlconf = types.ModuleType("delegating_check_urls")
    urlconf.urlpatterns = [path("proxied/", server.urls)]  # type: ignore[attr-defined]
    sys.modules[urlconf.__name__] = urlconf
    try:
        without_sessions = [m for m in settings.MIDDLEWARE if "Session" not in m]
        with override_settings(ROOT_URLCONF=urlconf.__name__, MIDDLEWARE=without_sessions):
            found = [m.id for m in checks.run_checks(tags=None)]
    finally:
        del sys.modules[urlconf.__name__]
    # The session store's own check (E003, SessionMiddleware missing) ran through the proxy.
    assert "django_pydantic_agent.E003" in found


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "proxied"])
def test_an_object_without_rename_is_refused_naming_it(wrapped: bool) -> None:
    store: Any = NoRename()
    if wrapped:
        store = LoggingStore(store, [])
    assert missing_members(store, ConversationStore) == ["rename"]
    with pytest.raises(
        TypeError, match=r"does not implement ConversationStore .*: it has no rename"
    ):
        AGUIServer(text_agent(), conversation_store=store)


def test_a_run_store_proxy_is_resumable_only_when_what_it_wraps_is() -> None:
    store = DefaultConversationStore()
    assert implements(LoggingStore(store.run_store(), []), ResumableRunStore)

    class Recorder:
        async def start(self, **kwargs: Any) -> Any: ...

    assert not implements(LoggingStore(Recorder(), []), ResumableRunStore)


def test_the_chat_page_and_the_checks_read_a_proxied_stores_features() -> None:
    policy = RetentionPolicy(keep_newest=5)
    proxied = LoggingStore(DefaultConversationStore(retention=policy), [])
    server = AGUIServer(
        text_agent(), conversation_store=proxied, access=AccessPolicy(csrf_exempt=True)
    )

    assert thread_features(proxied) == {"search": "text", "archive": True, "feedback": True}
    assert keeps_branches(server)
    assert store_features(proxied).retention is policy
    assert store_features(LoggingStore(CacheRunStore(alias="runs"), [])).cache_alias == "runs"
