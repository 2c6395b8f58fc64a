"""Retention: RetentionPolicy, agent_store_prune_conversations --keep-newest, mounted policies."""

from __future__ import annotations

import io
import sys
import types
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import path
from django.utils import timezone
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions
from django_pydantic_agent.contrib.store.models import StoredConversation
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore, RetentionPolicy
from django_pydantic_agent.persistence import ScopedConversationStore

pytestmark = pytest.mark.django_db

POLICY = RetentionPolicy(idle_days=30, keep_newest=2)
urlpatterns = [
    path("admin/", admin.site.urls),
    path(
        "kept/",
        AGUIServer(
            Agent(TestModel()),
            conversation_store=ScopedConversationStore(
                DefaultConversationStore(retention=POLICY), scope="kept"
            ),
            mount=MountOptions(namespace="kept"),
            access=AccessPolicy(csrf_exempt=False),
        ).urls,
    ),
]


def threads(owner: str, ages_in_days: list[int]) -> None:
    now = timezone.now()
    for index, age in enumerate(ages_in_days):
        StoredConversation.objects.create(
            owner_id=owner, thread_id=f"{owner}-{index}", updated_at=now - timedelta(days=age)
        )


def remaining() -> list[str]:
    return sorted(StoredConversation.objects.values_list("thread_id", flat=True))


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("agent_store_prune_conversations", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_keep_newest_keeps_each_owners_newest_only() -> None:
    threads("a", [1, 2, 3, 4])
    threads("b", [5])
    out = run("--keep-newest", "2", "--dry-run")
    assert out.startswith("Would delete 2 conversation(s)")
    assert len(remaining()) == 5
    run("--keep-newest", "2")
    assert remaining() == ["a-0", "a-1", "b-0"]


def test_both_rules_delete_what_either_lets_go() -> None:
    threads("a", [1, 2, 40])
    threads("b", [50, 1])
    run("--keep-newest", "2", "--older-than", "30d")
    assert remaining() == ["a-0", "a-1", "b-1"]


@pytest.mark.urls(__name__)
def test_without_options_the_mounted_stores_policy_applies_through_a_wrapper() -> None:
    threads("a", [1, 2, 3])
    threads("b", [40])
    out = run()
    assert out.startswith(
        "Applying the mounted retention: threads idle more than 30 day(s) and all but each "
        "owner's newest 2.\nDeleted 2 conversation(s)"
    )
    assert remaining() == ["a-0", "a-1"]


@pytest.mark.urls(__name__)
def test_the_admin_lists_the_threads_the_policy_will_delete(admin_client: Any) -> None:
    threads("a", [1, 2, 3])
    changelist = "/admin/django_pydantic_agent_store/storedconversation/"
    page = admin_client.get(changelist).content.decode()
    assert "Due for deletion (threads idle more than 30 day(s) and all but each owner" in page
    due = admin_client.get(changelist, {"retention": "due"}).content.decode()
    assert "a-2" in due
    assert "a-0" not in due
    kept = admin_client.get(changelist, {"retention": "kept"}).content.decode()
    assert "a-0" in kept
    assert "a-2" not in kept


def test_without_options_or_a_mounted_policy_nothing_is_deleted() -> None:
    threads("a", [400])
    with pytest.raises(CommandError, match=r"--older-than .* --keep-newest"):
        run()
    assert remaining() == ["a-0"]


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_bad_keep_newest_is_refused(value: str) -> None:
    with pytest.raises(CommandError, match=f"--keep-newest='{value}' is not a positive"):
        run("--keep-newest", value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "keeps everything"),
        ({"idle_days": 0}, "idle_days=0 is not valid"),
        ({"keep_newest": True}, "keep_newest=True is not valid"),
    ],
)
def test_a_policy_that_cannot_be_applied_is_refused(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetentionPolicy(**kwargs)


def test_the_store_refuses_a_retention_that_is_no_policy() -> None:
    with pytest.raises(TypeError, match="RetentionPolicy"):
        DefaultConversationStore(retention=90)  # type: ignore[arg-type]


def _docs_block(first_line: str) -> str:
    """The ```python block of docs/contrib-store.md that starts with ``first_line``."""
    text = (Path(__file__).parents[3] / "docs" / "contrib-store.md").read_text()
    blocks = [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]
    [found] = [block for block in blocks if block.startswith(first_line)]
    return found


def test_the_documented_policy_is_what_the_store_keeps() -> None:
    namespace: dict[str, Any] = {}
    exec(_docs_block("# urls.py\nfrom django_pydantic_agent.contrib.store.stores"), namespace)
    assert namespace["store"].retention == RetentionPolicy(idle_days=90, keep_newest=500)


@pytest.mark.urls(__name__)
def test_the_documented_celery_beat_task_applies_the_mounted_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    celery = types.ModuleType("celery")
    celery.shared_task = lambda function: function  # type: ignore[attr-defined]
    schedules = types.ModuleType("celery.schedules")
    schedules.crontab = lambda **fields: fields  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "celery", celery)
    monkeypatch.setitem(sys.modules, "celery.schedules", schedules)
    namespace: dict[str, Any] = {}
    exec(_docs_block("# tasks.py"), namespace)
    assert namespace["CELERY_BEAT_SCHEDULE"]["prune-conversations"]["schedule"] == {
        "hour": 3,
        "minute": 15,
    }
    threads("a", [1, 2, 3])
    namespace["prune_conversations"]()
    assert remaining() == ["a-0", "a-1"]
