"""Several retention policies mounted at once (``docs/contrib-store.md``, "Retention"): the
stores share the tables, so the most generous rule of each kind wins, whatever the mount, the
namespace or the order. Two and three policies of each kind, and mixed, through
``agent_store_prune_conversations`` (without options) and the conversation admin's
"retention" filter, both of which apply the mounted policies.
"""

from __future__ import annotations

import io
import re
import sys
import types
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.core.management import call_command
from django.urls import clear_url_caches, path
from django.utils import timezone
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions
from django_pydantic_agent.contrib.store.models import StoredConversation
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore, RetentionPolicy
from django_pydantic_agent.persistence import ScopedConversationStore

pytestmark = pytest.mark.django_db

#: Each thread's idle days, newest first: owner a has eight threads, owner b two.
AGES = {"a": [1, 10, 20, 40, 60, 100, 200, 400], "b": [50, 120]}
ALL = [f"{owner}-{n}" for owner, ages in AGES.items() for n in range(len(ages))]


def idle(days: int) -> RetentionPolicy:
    return RetentionPolicy(idle_days=days)


def keep(count: int) -> RetentionPolicy:
    return RetentionPolicy(keep_newest=count)


#: (policies mounted, in URL order; the threads the most generous rule of each kind deletes).
CASES = {
    # Idle: 90 days, not 30 (which would delete a-3, a-4 and b-0 too).
    "idle-30-90": ([idle(30), idle(90)], ["a-5", "a-6", "a-7", "b-1"]),
    "idle-90-30": ([idle(90), idle(30)], ["a-5", "a-6", "a-7", "b-1"]),
    "idle-30-365-90": ([idle(30), idle(365), idle(90)], ["a-7"]),
    # Keep-newest: each owner's newest 5, not 2 (which would delete a-2 to a-7).
    "keep-2-5": ([keep(2), keep(5)], ["a-5", "a-6", "a-7"]),
    "keep-5-2": ([keep(5), keep(2)], ["a-5", "a-6", "a-7"]),
    "keep-2-7-5": ([keep(2), keep(7), keep(5)], ["a-7"]),
    # Mixed: idle 90 and keep 2 (the only keep rule), a thread due under either.
    "both-then-idle": (
        [RetentionPolicy(idle_days=30, keep_newest=2), idle(90)],
        ["a-2", "a-3", "a-4", "a-5", "a-6", "a-7", "b-1"],
    ),
    # Mixed, three: idle 90 and keep 5.
    "both-idle-keep": (
        [RetentionPolicy(idle_days=30, keep_newest=2), idle(90), keep(5)],
        ["a-5", "a-6", "a-7", "b-1"],
    ),
    "both-both": (
        [
            RetentionPolicy(idle_days=365, keep_newest=2),
            RetentionPolicy(idle_days=30, keep_newest=7),
        ],
        ["a-7"],
    ),
}


def _urlconf(name: str, policies: list[RetentionPolicy]) -> str:
    """A URLconf mounting one server per policy (every other one under a scope), and the
    admin; its module name."""
    patterns: list[Any] = [path("admin/", admin.site.urls)]
    for index, policy in enumerate(policies):
        store: Any = DefaultConversationStore(retention=policy)
        if index % 2:
            store = ScopedConversationStore(store, scope=f"s{index}")
        server = AGUIServer(
            Agent(TestModel()),
            conversation_store=store,
            access=AccessPolicy(csrf_exempt=False),
            mount=MountOptions(namespace=f"retention-{index}"),
        )
        patterns.append(path(f"m{index}/", server.urls))
    module = types.ModuleType(f"tests.contrib.store._retention_{name}")
    module.urlpatterns = patterns  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return module.__name__


@pytest.fixture(params=list(CASES))
def case(request: pytest.FixtureRequest, settings: Any) -> Iterator[tuple[Any, list[str]]]:
    policies, deleted = CASES[request.param]
    name = _urlconf(request.param.replace("-", "_"), policies)
    settings.ROOT_URLCONF = name
    clear_url_caches()
    now = timezone.now()
    for owner, ages in AGES.items():
        for index, age in enumerate(ages):
            StoredConversation.objects.create(
                owner_id=owner,
                thread_id=f"{owner}-{index}",
                updated_at=now - timedelta(days=age, hours=1),
            )
    yield policies, deleted
    clear_url_caches()
    sys.modules.pop(name, None)


def _remaining() -> list[str]:
    return sorted(StoredConversation.objects.values_list("thread_id", flat=True))


def test_the_command_applies_the_most_generous_rule_of_each_kind(
    case: tuple[list[RetentionPolicy], list[str]],
) -> None:
    policies, deleted = case
    out = io.StringIO()
    call_command("agent_store_prune_conversations", "--dry-run", stdout=out)
    assert f"Would delete {len(deleted)} conversation(s)" in out.getvalue()
    assert _remaining() == ALL
    out = io.StringIO()
    call_command("agent_store_prune_conversations", stdout=out)
    described = "; ".join(policy.describe() for policy in policies)
    assert out.getvalue().startswith(f"Applying the mounted retention: {described}.\n")
    assert f"Deleted {len(deleted)} conversation(s)" in out.getvalue()
    assert _remaining() == sorted(set(ALL) - set(deleted))


_THREAD_ID = re.compile(r">([ab]-\d)<")


def test_the_admin_lists_as_due_what_the_command_deletes(
    case: tuple[list[RetentionPolicy], list[str]], admin_client: Any
) -> None:
    _policies, deleted = case
    changelist = "/admin/django_pydantic_agent_store/storedconversation/"
    due = admin_client.get(changelist, {"retention": "due"}).content.decode()
    kept = admin_client.get(changelist, {"retention": "kept"}).content.decode()
    assert sorted(set(_THREAD_ID.findall(due))) == sorted(deleted)
    assert sorted(set(_THREAD_ID.findall(kept))) == sorted(set(ALL) - set(deleted))
