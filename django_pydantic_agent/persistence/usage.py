"""The usage ledger: what runs cost, per run and summed per thread, per owner and per day.

A run's usage arrives as its record's ``usage`` (``{"tokens": [TokenUsage, ...]}``, the
``RUN_FINISHED.usage`` of the run, or for a run stopped or failed before it, what it reached:
``agui.metering``, where an entry that was estimated says ``"estimated": true``). ``run_usage``
reads it into a ``RunUsage`` with the cost from pydantic-ai's pricing (genai-prices), or no
cost where the model has no price. A run store
that keeps a ledger says so by implementing ``UsageLedger`` (``DefaultRunStore`` does); the
``usage/`` route reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Final, Protocol, runtime_checkable

__all__ = [
    "ESTIMATED_KEY",
    "RunUsage",
    "UsageLedger",
    "UsageTotals",
    "estimate_text_tokens",
    "price_tokens",
    "run_usage",
]

#: The key of a ``TokenUsage`` entry that was estimated rather than reported (``true``).
ESTIMATED_KEY: Final[str] = "estimated"
_CHARS_PER_TOKEN: Final = 4


@dataclass(frozen=True, kw_only=True)
class UsageTotals:
    """Runs, tokens and cost summed over a set of ledger rows.

    ``cost_usd`` sums the priced runs; ``unpriced_runs`` counts the runs whose model has no
    price, so a total that leaves some out says so; ``estimated_runs`` counts the runs whose
    tokens are partly estimated (stopped or failed before their provider reported them).
    """

    runs: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    unpriced_runs: int = 0
    estimated_runs: int = 0

    def as_json(self) -> dict[str, Any]:
        """The camelCase JSON of the ``usage/`` route (the cost as a decimal string)."""
        return {
            "runs": self.runs,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.total_tokens,
            "costUsd": str(self.cost_usd),
            "unpricedRuns": self.unpriced_runs,
            "estimatedRuns": self.estimated_runs,
        }


@dataclass(frozen=True, kw_only=True)
class RunUsage:
    """One run's line in the ledger: its model, its tokens and its cost (``None``: unpriced);
    ``estimated`` when some of its tokens were estimated rather than reported."""

    model: str = ""
    provider: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost_usd: Decimal | None = None
    estimated: bool = False


def _count(entry: Mapping[str, Any], key: str) -> int:
    """A count of a ``TokenUsage`` entry by its field name; its camelCase alias is read too."""
    head, *rest = key.split("_")
    value = entry.get(key, entry.get(head + "".join(part.title() for part in rest)))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _entries(usage: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    tokens = (usage or {}).get("tokens")
    if not isinstance(tokens, list):
        return []
    return [entry for entry in tokens if isinstance(entry, Mapping)]


def price_tokens(entry: Mapping[str, Any]) -> Decimal | None:
    """The price of one ``TokenUsage`` entry (as a run record stores it) from genai-prices,
    or ``None`` when it names no model or the model has no price."""
    from pydantic_ai.messages import ModelResponse
    from pydantic_ai.usage import RequestUsage

    model = entry.get("model")
    if not isinstance(model, str) or not model:
        return None
    usage = RequestUsage(
        input_tokens=_count(entry, "input_tokens"),
        output_tokens=_count(entry, "output_tokens"),
        cache_read_tokens=_count(entry, "cached_input_tokens"),
        cache_write_tokens=_count(entry, "cache_write_input_tokens"),
    )
    provider = entry.get("provider")
    # A provider genai-prices does not know (a FunctionModel's "function", a proxy) may still
    # serve a model it prices: then the model name alone decides.
    for provider_name in dict.fromkeys((provider if isinstance(provider, str) else None, None)):
        response = ModelResponse(
            parts=[], usage=usage, model_name=model, provider_name=provider_name
        )
        try:
            return Decimal(response.cost().total_price)
        except (LookupError, ValueError):
            continue
    return None


def estimate_text_tokens(text: str) -> int:
    """Tokens of ``text`` as a model's answer, for a usage nothing reported (``0`` for no text):
    ``pydantic_ai_harness.compaction.estimate_message_tokens`` with the ``harness`` extra, else
    four characters a token."""
    if not text:
        return 0
    try:
        from pydantic_ai.messages import ModelResponse, TextPart
        from pydantic_ai_harness.compaction import estimate_message_tokens
    except ImportError:
        return max(1, len(text) // _CHARS_PER_TOKEN)
    return max(1, sum(estimate_message_tokens([ModelResponse(parts=[TextPart(content=text)])])))


def run_usage(usage: Mapping[str, Any] | None) -> RunUsage | None:
    """The ledger line of a run record's ``usage``; ``None`` when it reports no tokens.

    Tokens are summed over its entries; the cost is their prices summed, or ``None`` when any
    entry's model has no price (an unpriced run never reads as free). The line is
    ``estimated`` when any entry is.
    """
    entries = _entries(usage)
    if not entries:
        return None
    costs = [price_tokens(entry) for entry in entries]
    priced = [cost for cost in costs if cost is not None]
    first = entries[0]
    input_tokens = sum(_count(entry, "input_tokens") for entry in entries)
    output_tokens = sum(_count(entry, "output_tokens") for entry in entries)
    return RunUsage(
        model=str(first.get("model") or "")[:255],
        provider=str(first.get("provider") or "")[:255],
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=sum(_count(entry, "total_tokens") for entry in entries)
        or input_tokens + output_tokens,
        cost_usd=sum(priced, Decimal(0)) if len(priced) == len(costs) else None,
        estimated=any(entry.get(ESTIMATED_KEY) is True for entry in entries),
    )


@runtime_checkable
class UsageLedger(Protocol):
    """A run store that keeps the usage ledger (``DefaultRunStore``). Every method is async and
    reads only ``owner_id``'s runs."""

    async def usage_totals(
        self,
        *,
        owner_id: str,
        thread_id: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> UsageTotals:
        """The owner's runs summed, on one thread when ``thread_id`` is given, finished in
        ``[since, until)``."""
        ...

    async def usage_by_day(
        self, *, owner_id: str, since: datetime, until: datetime
    ) -> list[tuple[date, UsageTotals]]:
        """The owner's runs summed per UTC day in ``[since, until)``, oldest first; days with
        no run are left out."""
        ...
