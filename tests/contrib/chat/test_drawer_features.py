"""What the chat page's thread drawer is told about its store: what search finds, whether
threads can be archived. The page hides Archived and each thread's Archive button on a store
that keeps no flag, and says beside the search box when the store searches titles only.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import path
from pydantic_ai import Agent

from django_pydantic_agent.agui import AccessPolicy, AGUIServer
from django_pydantic_agent.contrib.chat.context import thread_features
from django_pydantic_agent.contrib.chat.views import ChatView
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence.base import ConversationStore
from django_pydantic_agent.persistence.memory_service import MemoryServiceConversationStore
from django_pydantic_agent.persistence.scoped import ScopedConversationStore
from django_pydantic_agent.persistence.session import DjangoSessionConversationStore
from tests.testapp.stores import MinimalThreadStore, ThreadStore

URLCONF = "tests_contrib_chat_drawer_urls"


def test_the_default_store_searches_message_text_and_archives() -> None:
    assert thread_features(DefaultConversationStore()) == {
        "search": "text",
        "archive": True,
        "feedback": True,
    }


def test_the_memory_service_searches_titles_and_archives() -> None:
    # Only the class matters: an instance without a client is enough to ask.
    store = MemoryServiceConversationStore.__new__(MemoryServiceConversationStore)

    assert thread_features(store) == {"search": "titles", "archive": True, "feedback": False}


def test_a_model_store_archives_only_when_it_overrides_the_hook() -> None:
    assert thread_features(MinimalThreadStore()) == {
        "search": "titles",
        "archive": False,
        "feedback": False,
    }
    assert thread_features(ThreadStore()) == {
        "search": "titles",
        "archive": True,
        "feedback": False,
    }


def test_the_session_store_searches_titles_and_archives() -> None:
    assert thread_features(DjangoSessionConversationStore()) == {
        "search": "titles",
        "archive": True,
        "feedback": False,
    }


def test_a_scoped_store_searches_and_archives_as_the_store_it_wraps() -> None:
    # The scope forwards find_threads and archive to its inner store: a scoped session store
    # searches titles only, as the session store does, however the wrapper looks.
    session = ScopedConversationStore(DjangoSessionConversationStore(), scope="support")
    default = ScopedConversationStore(DefaultConversationStore(), scope="support")
    minimal = ScopedConversationStore(MinimalThreadStore(), scope="support")
    nested = ScopedConversationStore(default, scope="inner")

    assert thread_features(session) == {"search": "titles", "archive": True, "feedback": False}
    assert thread_features(default) == {"search": "text", "archive": True, "feedback": True}
    assert thread_features(minimal) == {"search": "titles", "archive": False, "feedback": False}
    assert thread_features(nested) == {"search": "text", "archive": True, "feedback": True}


class LoggingWrapper:
    """A project's own wrapper: forwards the six required methods, has neither search nor
    archive, so the server searches titles over its ``list()`` and cannot archive through it."""

    def __init__(self, inner: ConversationStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in {"load", "save", "delete", "list", "exists", "rename"}:
            return getattr(self.inner, name)
        raise AttributeError(name)


def test_a_wrapper_without_the_capabilities_answers_for_itself() -> None:
    wrapped = LoggingWrapper(DefaultConversationStore())

    assert thread_features(wrapped) == {"search": "titles", "archive": False, "feedback": False}
    assert thread_features(ScopedConversationStore(wrapped, scope="support")) == {
        "search": "titles",
        "archive": False,
        "feedback": False,
    }


@pytest.fixture(
    params=[
        pytest.param(MinimalThreadStore, id="minimal"),
        pytest.param(
            lambda: ScopedConversationStore(MinimalThreadStore(), scope="support"),
            id="scoped-minimal",
        ),
    ]
)
def minimal_page(request: pytest.FixtureRequest) -> Iterator[None]:
    """The page over a store that searches titles only and cannot archive."""
    with _mounted(_urlconf(request.param())):
        yield


def _urlconf(store: ConversationStore) -> types.ModuleType:
    """A URLconf serving an AGUIServer over ``store`` at ``agent/`` and its page at ``chat/``."""
    server = AGUIServer(
        Agent("test"), conversation_store=store, access=AccessPolicy(csrf_exempt=False)
    )
    module = types.ModuleType(URLCONF)
    module.urlpatterns = [  # type: ignore[attr-defined]
        path("agent/", server.urls),
        path("chat/", ChatView.as_view(server=server)),
    ]
    return module


@contextmanager
def _mounted(module: types.ModuleType) -> Iterator[None]:
    """``module`` as the ROOT_URLCONF for the block."""
    sys.modules[URLCONF] = module
    try:
        with override_settings(ROOT_URLCONF=URLCONF):
            yield
    finally:
        del sys.modules[URLCONF]


def _page(module: types.ModuleType, user: Any) -> str:
    """The chat page ``user`` gets from ``module``'s URLconf."""
    with _mounted(module):
        client = Client()
        client.force_login(user)
        return client.get("/chat/").content.decode()


@pytest.mark.django_db
@pytest.mark.usefixtures("minimal_page")
def test_the_page_hides_archive_and_says_search_reads_titles(django_user_model: Any) -> None:
    client = Client()
    client.force_login(django_user_model.objects.create_user("plain", password="pw"))

    html = client.get("/chat/").content.decode()

    assert 'data-thread-search="titles"' in html
    assert 'data-thread-archive="0"' in html
    toggle = re.search(r'<button[^>]*id="show-archived"[^>]*>', html)
    assert toggle is not None
    assert " hidden" in toggle.group(0)
    assert "This server searches titles only." in html
    assert 'placeholder="Search titles…"' in html


@pytest.mark.django_db
def test_a_scoped_session_page_says_search_reads_titles(django_user_model: Any) -> None:
    store = ScopedConversationStore(DjangoSessionConversationStore(), scope="support")
    user = django_user_model.objects.create_user("scoped", password="pw")
    html = _page(_urlconf(store), user)

    assert 'data-thread-search="titles"' in html
    assert "This server searches titles only." in html
    assert 'data-thread-archive="1"' in html
    assert "data-feedback" not in html  # the session store keeps no ratings: no thumbs


@pytest.mark.django_db
def test_the_default_page_offers_archive_and_full_text(django_user_model: Any) -> None:
    from tests.contrib.chat.test_chat_page import PAGE, _blocks

    module = types.ModuleType(URLCONF)
    exec(compile(_blocks("python")[1], str(PAGE), "exec"), module.__dict__)
    html = _page(module, django_user_model.objects.create_user("full", password="pw"))

    assert 'data-thread-search="text"' in html
    assert 'data-thread-archive="1"' in html
    assert 'data-feedback="on"' in html
    toggle = re.search(r'<button[^>]*id="show-archived"[^>]*>', html)
    assert toggle is not None
    assert " hidden" not in toggle.group(0)
    assert "Finds words in titles and messages." in html
    assert 'aria-label="Export this conversation"' in html
