"""The spend mount's daily budget per user, and the price of each model response (importable
without the reliability site's settings, so the test module that reads them collects anywhere)."""

from __future__ import annotations

from decimal import Decimal

SPEND_BUDGET = Decimal("0.10")
SPEND_PRICE = Decimal("0.01")
