"""Spend budgets on a mount: the harness's ``SpendLimits``, scoped on the server, checked first.

``AGUIServer(spend=SpendLimits(...))`` hands the capability to every run of the mount,
with the run's owner and thread in the run's metadata, so the scopes ``per_user`` and
``per_thread`` key a budget to who runs it as the server resolved them (a digest of the store
owner, never anything the client sent). Before a run is claimed, ``SpendGate.refusal`` reads
every budget the run would count against: a spent one refuses the run with a JSON 429 before
anything is stored or the model is called. A budget spent during a run (a tool loop, a worker
that spent it meanwhile) stops the next model request, and the run ends with ``RUN_ERROR`` code
``BUDGET_EXCEEDED``. Both say when the budget resets.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ag_ui.core import RunErrorEvent
from django.http import JsonResponse

from django_pydantic_agent.agui.errors import Refusal

__all__ = [
    "BUDGET_EXCEEDED_CODE",
    "METADATA_KEY",
    "BudgetRefusal",
    "SpendGate",
    "budget_refusal",
    "per_thread",
    "per_user",
    "resets_at",
    "spend_metadata",
]

#: The ``RUN_ERROR`` code (and the 429 body's ``code``) of a run refused for budget.
BUDGET_EXCEEDED_CODE: Final[str] = "BUDGET_EXCEEDED"
#: The key of the run metadata this module writes (``{"owner": ..., "thread": ...}``).
METADATA_KEY: Final[str] = "django_pydantic_agent"

# SpendLimitExceeded's own message: "Budget 'daily' exhausted for this day: spent $1 of $1".
_HARNESS_MESSAGE = re.compile(
    r"^Budget '(?P<name>[^']*)' exhausted for this (?P<window>\w+): (?P<detail>.*)$"
)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


def spend_metadata(owner_id: str, thread_id: str) -> dict[str, Any]:
    """The run metadata ``per_user`` and ``per_thread`` read: digests of the store owner, and
    of the owner with the thread (a thread id alone is the client's choice)."""
    return {
        METADATA_KEY: {
            "owner": f"u-{_digest(owner_id)}",
            "thread": f"t-{_digest(owner_id, thread_id)}",
        }
    }


def _scope(ctx: Any, part: str) -> str:
    found = ((getattr(ctx, "metadata", None) or {}).get(METADATA_KEY) or {}).get(part)
    if not isinstance(found, str):
        raise ValueError(
            f"This run has no server-resolved {part} to scope a budget by: pass the SpendLimits "
            "to AGUIServer(spend=...), which sets it, rather than to the Agent."
        )
    return found


def per_user(ctx: Any) -> str:
    """``Budget(scope=per_user)``: one counter per store owner (user, or anonymous session)."""
    return _scope(ctx, "owner")


def per_thread(ctx: Any) -> str:
    """``Budget(scope=per_thread)``: one counter per thread of one owner."""
    return _scope(ctx, "thread")


def resets_at(window: str, now: datetime) -> datetime | None:
    """When a spent budget of ``window`` starts again: the next UTC day or month; ``None`` for
    the windows that never roll over (``total``, ``conversation``, ``run``)."""
    now = now.astimezone(UTC)
    if window == "day":
        return datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
    if window == "month":
        year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
        return datetime(year, month, 1, tzinfo=UTC)
    return None


@dataclass(frozen=True, kw_only=True)
class BudgetRefusal:
    """A run refused because a budget is spent: which one, how, and when it resets."""

    budget: str
    window: str
    detail: str
    resets_at: datetime | None

    @property
    def message(self) -> str:
        """The sentence the client reads."""
        head = f"The {self.window} budget {self.budget!r} is spent ({self.detail}); "
        if self.resets_at is None:
            return head + "it does not reset by itself: ask the site's operator to raise it."
        return head + f"try again after it resets at {self.resets_at.isoformat()}."

    def as_json(self) -> dict[str, Any]:
        """The 429 body: ``error``, ``code``, ``budget``, ``window`` and ``resetsAt``."""
        return {
            "error": self.message,
            "code": BUDGET_EXCEEDED_CODE,
            "budget": self.budget,
            "window": self.window,
            "resetsAt": None if self.resets_at is None else self.resets_at.isoformat(),
        }

    def response(self, now: datetime) -> JsonResponse:
        """The JSON 429, with ``Retry-After`` (seconds) when the budget resets."""
        response = JsonResponse(self.as_json(), status=429)
        if self.resets_at is not None:
            response["Retry-After"] = str(max(1, int((self.resets_at - now).total_seconds())))
        return response

    def event(self) -> RunErrorEvent:
        """The ``RUN_ERROR`` of a run stopped for budget once it streams."""
        return RunErrorEvent(message=self.message, code=BUDGET_EXCEEDED_CODE)


def _exceeded_type() -> type[BaseException] | None:
    try:
        from django_pydantic_agent._harness_spend import SpendLimitExceeded
    except ModuleNotFoundError:
        return None
    return SpendLimitExceeded


def budget_refusal(error: BaseException, *, now: datetime | None = None) -> BudgetRefusal | None:
    """The refusal a harness ``SpendLimitExceeded`` reports, or ``None`` for any other error."""
    exceeded = _exceeded_type()
    if exceeded is None or not isinstance(error, exceeded):
        return None
    found = _HARNESS_MESSAGE.match(str(error).split("\n", 1)[0])
    if found is None:
        return BudgetRefusal(budget="", window="", detail=str(error), resets_at=None)
    window = found["window"]
    return BudgetRefusal(
        budget=found["name"],
        window=window,
        # The harness's advice after the figures ("Raise the budget, ...") is for developers.
        detail=found["detail"].split(". ", 1)[0],
        resets_at=resets_at(window, now or datetime.now(UTC)),
    )


def _is_spend_limits(value: object) -> bool:
    try:
        from django_pydantic_agent._harness_spend import SpendLimits
    except ModuleNotFoundError:  # a SpendLimits cannot exist without the harness
        return False
    return isinstance(value, SpendLimits)


class SpendGate:
    """A mount's ``SpendLimits``: what each run gets, the check before it, and the readings.

    ``limits`` must be a pydantic-ai-harness ``SpendLimits`` (``TypeError`` otherwise). Give it
    a shared store (``DefaultSpendStore``) for budgets that hold across workers.
    """

    def __init__(self, limits: Any) -> None:
        if not _is_spend_limits(limits):
            raise TypeError(
                f"spend={limits!r} is not a pydantic-ai-harness SpendLimits; pass "
                "SpendLimits(budgets=[...], store=DefaultSpendStore())."
            )
        self.limits = limits

    def __repr__(self) -> str:
        return f"SpendGate({self.limits!r})"

    def now(self) -> datetime:
        """The limits' clock (what day and month windows are cut by)."""
        now: datetime = self.limits.clock()
        return now

    def run_options(self, owner_id: str, thread_id: str) -> dict[str, Any]:
        """What a run of ``owner_id`` on ``thread_id`` passes to the agent: the capability and
        the metadata the scopes read."""
        return {"capabilities": [self.limits], "metadata": spend_metadata(owner_id, thread_id)}

    def context(self, *, deps: Any, owner_id: str, thread_id: str, run_id: str) -> Any:
        """A ``RunContext`` like the run's own, for reading budgets before it starts."""
        from pydantic_ai import RunContext
        from pydantic_ai.models.test import TestModel
        from pydantic_ai.usage import RunUsage

        return RunContext(
            deps=deps,
            model=TestModel(),
            usage=RunUsage(),
            run_id=run_id,
            conversation_id=thread_id,
            metadata=spend_metadata(owner_id, thread_id),
        )

    async def refuse(self, *, deps: Any, owner_id: str, thread_id: str, run_id: str) -> None:
        """Raise the 429 ``Refusal`` of a run a spent budget would stop (see ``refusal``)."""
        found = await self.refusal(deps=deps, owner_id=owner_id, thread_id=thread_id, run_id=run_id)
        if found is not None:
            raise Refusal.of(found.response(self.now()))

    async def refusal(
        self, *, deps: Any, owner_id: str, thread_id: str, run_id: str
    ) -> BudgetRefusal | None:
        """The refusal of a run that a spent budget would stop at its first model request, or
        ``None``. Reads the counters only (one ``get_many``)."""
        ctx = self.context(deps=deps, owner_id=owner_id, thread_id=thread_id, run_id=run_id)
        now = self.now()
        for status in await self.limits.status(ctx):
            if status.exhausted:
                budget = status.budget
                if budget.usd is not None and status.spent.usd >= budget.usd:
                    detail = f"spent ${status.spent.usd} of ${budget.usd}"
                else:
                    detail = f"used {status.spent.tokens} of {budget.tokens} tokens"
                return BudgetRefusal(
                    budget=budget.name,
                    window=budget.window,
                    detail=detail,
                    resets_at=resets_at(budget.window, now),
                )
        return None

    async def readings(
        self, *, deps: Any, owner_id: str, thread_id: str | None
    ) -> list[dict[str, Any]]:
        """Each budget as the ``usage/`` route shows it to its owner (``run`` windows left out,
        ``conversation`` ones only for a ``thread_id``)."""
        ctx = self.context(deps=deps, owner_id=owner_id, thread_id=thread_id or "", run_id="usage")
        now = self.now()
        readings = []
        for status in await self.limits.status(ctx):
            budget = status.budget
            needs_thread = budget.window == "conversation" or budget.scope is per_thread
            if budget.window == "run" or (needs_thread and not thread_id):
                continue
            reset = resets_at(budget.window, now)
            readings.append(
                {
                    "name": budget.name,
                    "window": budget.window,
                    "limitUsd": None if budget.usd is None else str(budget.usd),
                    "limitTokens": budget.tokens,
                    "spentUsd": str(status.spent.usd),
                    "spentTokens": status.spent.tokens,
                    "remainingUsd": None
                    if status.remaining_usd is None
                    else str(status.remaining_usd),
                    "remainingTokens": status.remaining_tokens,
                    "exhausted": status.exhausted,
                    "warning": status.warning,
                    "resetsAt": None if reset is None else reset.isoformat(),
                }
            )
        return readings
