"""pydantic-ai-harness's spend budgets, imported from where the installed release keeps them.

The harness renamed ``pydantic_ai_harness.spend`` to ``spend_limits`` after 0.62 (the floor
of the ``harness`` extra, which has only ``spend``); 0.75 still answers to the old name but
warns (``HarnessDeprecationWarning``). The names here are the ones this package, its tests
and its benches use. Without the harness, importing this module raises the
``ModuleNotFoundError`` for ``pydantic_ai_harness``.
"""

from __future__ import annotations

try:
    from pydantic_ai_harness.spend_limits import (
        BatchSpendStore,
        Budget,
        InMemorySpendStore,
        SpendEntry,
        SpendLimitExceeded,
        SpendLimits,
        Spent,
    )
except ModuleNotFoundError as exc:
    if exc.name != "pydantic_ai_harness.spend_limits":
        raise
    from pydantic_ai_harness.spend import (
        BatchSpendStore,
        Budget,
        InMemorySpendStore,
        SpendEntry,
        SpendLimitExceeded,
        SpendLimits,
        Spent,
    )

__all__ = [
    "BatchSpendStore",
    "Budget",
    "InMemorySpendStore",
    "SpendEntry",
    "SpendLimitExceeded",
    "SpendLimits",
    "Spent",
]
