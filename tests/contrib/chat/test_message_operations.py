"""The chat page offers the message operations its server's store supports.

``data-branches`` (Edit, Regenerate, branch arrows) only over a store that keeps branches, looked
for through a wrapping ``ScopedConversationStore``; ``data-forks`` (Fork) over any store that
persists threads. ``tests/e2e/test_chat_branches.py`` uses them in Chromium.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.template import Context, Template
from django.test import RequestFactory
from pydantic_ai import Agent

from django_pydantic_agent.agui import AccessPolicy, AGUIServer
from django_pydantic_agent.contrib.chat.context import keeps_branches
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.memory_service import DRMemoryServiceClient
from django_pydantic_agent.persistence.memory_service import MemoryServiceConversationStore
from django_pydantic_agent.persistence.null import NullConversationStore
from django_pydantic_agent.persistence.scoped import ScopedConversationStore
from django_pydantic_agent.persistence.session import DjangoSessionConversationStore
from tests.contrib.chat.test_drawer_features import LoggingWrapper
from tests.testapp.stores import ThreadStore

_STORED = 'data-history="stored"'
"""The server keeps the thread: the page posts only what is new."""


def _server(store: Any) -> AGUIServer:
    return AGUIServer(
        Agent("test"), conversation_store=store, access=AccessPolicy(csrf_exempt=False)
    )


@pytest.mark.parametrize(
    ("store", "branches", "forks"),
    [
        (DefaultConversationStore(), True, True),
        (ScopedConversationStore(DefaultConversationStore(), scope="s"), True, True),
        (DjangoSessionConversationStore(), True, True),
        (ScopedConversationStore(DjangoSessionConversationStore(), scope="s"), True, True),
        (ThreadStore(), True, True),
        (NullConversationStore(), False, False),
        # The server switches branches through the wrapper, which keeps none of its own.
        (LoggingWrapper(DefaultConversationStore()), False, True),
        (
            MemoryServiceConversationStore(
                DRMemoryServiceClient(endpoint="http://memory.invalid/api/v2", api_token="t"),
                "chats",
            ),
            True,
            True,
        ),
    ],
    ids=[
        "default",
        "scoped-default",
        "session",
        "scoped-session",
        "model",
        "null",
        "own-wrapper",
        "memory-service",
    ],
)
def test_the_page_offers_what_the_store_can_do(store: Any, branches: bool, forks: bool) -> None:
    server = _server(store)

    assert keeps_branches(server) is branches
    assert server.persists_conversations is forks


@pytest.mark.django_db
@pytest.mark.urls("tests.agui.urls")
@pytest.mark.parametrize(
    ("namespace", "attributes"),
    [
        ("history", {'data-branches="on"', 'data-forks="on"', _STORED}),
        ("history-scoped", {'data-branches="on"', 'data-forks="on"', _STORED}),
        ("history-session", {'data-branches="on"', 'data-forks="on"', _STORED}),
        ("history-model", {'data-branches="on"', 'data-forks="on"', _STORED}),
        # No store: the page posts the whole transcript, the history the model is sent.
        ("csrf", set()),
    ],
)
def test_the_template_marks_the_operations(
    namespace: str, attributes: set[str], django_user_model: Any
) -> None:
    request = RequestFactory().get("/mine/")
    request.user = django_user_model.objects.create_user("ops", password="pw")

    html = Template(f'{{% load agent_chat %}}{{% agent_chat "{namespace}" %}}').render(
        Context({"request": request})
    )

    found = {a for a in ('data-branches="on"', 'data-forks="on"', _STORED) if a in html}
    assert found == attributes
