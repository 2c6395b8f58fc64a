"""What the store's admin classes share: read-only rows, the search by run keys, amounts as text."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from django.http import HttpRequest

__all__ = ["RUN_SEARCH_FIELDS", "RUN_SEARCH_HELP", "ReadOnlyMixin", "amount_text"]

#: The search of the admins of rows keyed by run (run records, the usage ledger).
RUN_SEARCH_FIELDS: Final = ("=thread_id", "=run_id", "=owner_id")
#: What the search box of those admins says it takes.
RUN_SEARCH_HELP: Final = "An exact thread id, run id or owner id."


class ReadOnlyMixin:
    """Rows the admin shows but never adds or edits (their writers keep invariants)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Never: the rows are written by the store, not the admin."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Never: the rows are written by the store, not the admin."""
        return False


def amount_text(amount: Decimal) -> str:
    """``amount`` without trailing zeros or an exponent: ``"0.0075"``, ``"3"``."""
    return f"{amount.normalize():f}"
