"""The pydantic-ai-harness stores on the Django ORM, importable from one place.

``DefaultStepStore`` lives in ``contrib.store.step_store`` and ``DefaultMemoryStore`` (with
its path rule and fence escaping) in ``contrib.store.memory_store``; this module re-exports
both. Needs the ``harness`` extra and the ``django_pydantic_agent.contrib.store`` app
installed.
"""

from __future__ import annotations

from django_pydantic_agent.contrib.store.memory_store import (
    DEFAULT_MAX_MEMORY_FILES,
    DEFAULT_MAX_MEMORY_TOTAL_CHARS,
    DefaultMemoryStore,
    neutralize_memory_tags,
    validate_memory_path,
)
from django_pydantic_agent.contrib.store.step_store import DefaultStepStore

__all__ = [
    "DEFAULT_MAX_MEMORY_FILES",
    "DEFAULT_MAX_MEMORY_TOTAL_CHARS",
    "DefaultMemoryStore",
    "DefaultStepStore",
    "neutralize_memory_tags",
    "validate_memory_path",
]
