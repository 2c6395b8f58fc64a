"""The pydantic-ai-harness stores on the Django ORM, importable from one place.

``DefaultStepStore`` lives in ``contrib.store.step_store``, ``DefaultMemoryStore`` (with its
path rule and fence escaping) in ``contrib.store.memory_store`` and ``DefaultSpendStore`` in
``contrib.store.spend_store``; this module re-exports them. Needs the ``harness`` extra and the
``django_pydantic_agent.contrib.store`` app installed.
"""

from __future__ import annotations

from django_pydantic_agent.contrib.store.memory_store import (
    DEFAULT_MAX_MEMORY_FILES,
    DEFAULT_MAX_MEMORY_TOTAL_CHARS,
    DefaultMemoryStore,
    neutralize_memory_tags,
    validate_memory_path,
)
from django_pydantic_agent.contrib.store.spend_store import DefaultSpendStore
from django_pydantic_agent.contrib.store.step_store import DefaultStepStore

__all__ = [
    "DEFAULT_MAX_MEMORY_FILES",
    "DEFAULT_MAX_MEMORY_TOTAL_CHARS",
    "DefaultMemoryStore",
    "DefaultSpendStore",
    "DefaultStepStore",
    "neutralize_memory_tags",
    "validate_memory_path",
]
