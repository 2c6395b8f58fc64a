"""Every public name imports from the package and its root without django.setup()."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import django_pydantic_agent
import django_pydantic_agent.persistence
import django_pydantic_agent.testing

ROOT = Path(__file__).resolve().parents[2]

SEED_NAMES = {
    "AnonymousOperationError",
    "AttachmentRef",
    "AttachmentStore",
    "Conversation",
    "ConversationMeta",
    "ConversationMetaList",
    "ConversationStore",
    "DjangoSessionConversationStore",
    "ModelAttachmentStore",
    "ModelConversationStore",
    "NullAttachmentStore",
    "NullConversationStore",
    "OpenedAttachment",
    "ScopedConversationStore",
    "memory_namespace",
    "memory_namespace_for_user",
    "resolve_owner_id",
}


def test_seed_names_are_exported_from_both_places() -> None:
    assert set(django_pydantic_agent.persistence.__all__) >= SEED_NAMES
    assert set(django_pydantic_agent.__all__) >= set(django_pydantic_agent.persistence.__all__)
    for name in django_pydantic_agent.persistence.__all__:
        assert getattr(django_pydantic_agent, name) is getattr(
            django_pydantic_agent.persistence, name
        )


def test_all_lists_are_sorted() -> None:
    for module in (
        django_pydantic_agent,
        django_pydantic_agent.persistence,
        django_pydantic_agent.testing,
    ):
        assert module.__all__ == sorted(module.__all__), module.__name__


def test_import_without_settings_or_setup() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import django_pydantic_agent as root\n"
        "from django_pydantic_agent.persistence import *\n"
        "from django.apps import apps\n"
        "assert not apps.ready\n"
        "names = [n for n in root.__all__ if n != '__version__']\n"
        "missing = [n for n in names if getattr(root, n, None) is None]\n"
        "assert not missing, missing\n"
        "print(root.__version__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == django_pydantic_agent.__version__
