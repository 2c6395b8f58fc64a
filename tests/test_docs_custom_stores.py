"""``docs/custom-stores.md``'s "Wrapping a store" runs as printed: the proxy it builds is
mounted by ``AGUIServer``, serves a run and the thread routes, logs each store call and reports
the wrapped store's features; the ``overrides`` it shows is what the chat page reads."""

from __future__ import annotations

import ast
import logging
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.urls import path

from django_pydantic_agent.agui import AccessPolicy, AGUIServer
from tests.agui.agents import text_agent
from tests.agui.conftest import logged_in, run_body, sse_events

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "custom-stores.md").read_text(encoding="utf-8")
pytestmark = pytest.mark.django_db(transaction=True)


def _wrapping_snippet() -> str:
    section = PAGE.split("## Wrapping a store", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return code


@pytest.fixture
def mounted() -> Iterator[AGUIServer]:
    snippet = types.ModuleType("docs_custom_stores_wrapping")
    exec(compile(_wrapping_snippet(), "docs/custom-stores.md", "exec"), snippet.__dict__)
    server = AGUIServer(
        text_agent(),
        conversation_store=snippet.conversations,
        access=AccessPolicy(csrf_exempt=True),
    )
    urlconf = types.ModuleType("docs_custom_stores_urls")
    urlconf.urlpatterns = [path("timed/", server.urls)]  # type: ignore[attr-defined]
    sys.modules[urlconf.__name__] = urlconf
    try:
        with override_settings(ROOT_URLCONF=urlconf.__name__):
            yield server
    finally:
        del sys.modules[urlconf.__name__]


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def test_the_wrapped_store_is_mounted_and_logs_each_call(mounted: AGUIServer) -> None:
    alice: Any = await get_user_model().objects.acreate_user("alice", password="pw-alice")
    logger = logging.getLogger("myproject.stores")
    kept = _Kept()
    logger.addHandler(kept)
    logger.setLevel(logging.INFO)
    assert mounted.persists_conversations
    assert mounted.runs.on_worker_loss == "resume"  # the wrapped store's run store
    try:
        async with await logged_in(alice) as http:
            streamed = await http.post("/timed/", json=run_body())
            listed = await http.get("/timed/threads/")
    finally:
        logger.removeHandler(kept)
    assert sse_events(streamed.text)[-1]["type"] == "RUN_FINISHED"
    assert [thread["threadId"] for thread in listed.json()["threads"]] == ["thread-1"]
    logged = {message.split()[0] for message in kept.messages}
    assert {"repositories", "find_threads"} <= logged


def test_the_wrapped_store_reports_the_features_of_the_store_it_wraps() -> None:
    from django_pydantic_agent.persistence import store_features

    snippet = types.ModuleType("docs_custom_stores_features")
    exec(compile(_wrapping_snippet(), "docs/custom-stores.md", "exec"), snippet.__dict__)
    conversations = snippet.conversations
    assert store_features(conversations) == store_features(conversations._inner)
    assert store_features(conversations).search


def test_the_documented_overrides_declaration_is_what_the_page_reads() -> None:
    from django_pydantic_agent.contrib.chat.context import thread_features
    from tests.testapp.stores import MinimalThreadStore

    section = PAGE.split("### What a store can do: `StoreFeatures`", 1)[1].split("\n#", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    declared = re.search(r"overrides = (\{.*?\})", code)
    assert declared is not None
    store = type(
        "Archiving", (MinimalThreadStore,), {"overrides": ast.literal_eval(declared.group(1))}
    )()
    assert thread_features(store) == {"search": "titles", "archive": True, "feedback": False}
