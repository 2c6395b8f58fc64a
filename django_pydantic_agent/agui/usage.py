"""The ``usage/`` route: the caller's own usage and budgets.

``GET usage/`` answers ``{"total", "today", "days", "budgets"}`` for the request's owner (and
``"thread"`` for ``?thread=<id>``): the usage ledger summed (runs, tokens, cost in dollars as a
decimal string, and how many runs had no price), per UTC day over the last ``?days=`` days (30
by default, at most 366), and each spend budget with what is spent and when it resets. It is
owner-scoped like every route: the owner is resolved on the server, another owner's thread id
sums to nothing exactly like a missing one, and an anonymous visitor without a session owns
nothing (zeros, and no session is created). Mounted when the mount's run store keeps the ledger
(``DefaultRunStore``) or the mount has spend limits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

from django.http import HttpRequest, HttpResponseBase, JsonResponse

from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.ids import is_valid_id
from django_pydantic_agent.agui.spend import SpendGate
from django_pydantic_agent.agui.views import Route
from django_pydantic_agent.persistence.usage import UsageLedger, UsageTotals

__all__ = ["DEFAULT_USAGE_DAYS", "MAX_USAGE_DAYS", "UsageEndpoint"]

#: Days of ``days`` in the answer by default, and at most.
DEFAULT_USAGE_DAYS: Final[int] = 30
MAX_USAGE_DAYS: Final[int] = 366

#: ``owner(request)``: the request's owner id, or ``None`` for a visitor who owns nothing.
OwnerOf = Callable[[HttpRequest], Awaitable[str | None]]


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


class UsageEndpoint:
    """``GET usage/`` over ``ledger`` (``None``: no totals, only budgets) and ``spend`` (``None``:
    no budgets). ``owner`` resolves who asks (it may raise the store's ``StoreError``);
    ``deps(request)`` builds the deps the budgets' scopes may read."""

    def __init__(
        self,
        *,
        owner: OwnerOf,
        ledger: UsageLedger | None,
        spend: SpendGate | None,
        deps: Callable[[HttpRequest], Awaitable[Any]],
    ) -> None:
        self._owner = owner
        self._ledger = ledger
        self._spend = spend
        self._deps = deps

    def routes(self) -> list[Route]:
        """The usage route, mounted when there is a ledger or a budget to show."""
        mounted = self._ledger is not None or self._spend is not None
        return [Route(path="usage/", name="usage", handlers={"GET": self.get}, mounted=mounted)]

    async def get(self, request: HttpRequest) -> HttpResponseBase:
        """``GET usage/?thread=<id>&days=N``: 200 with the caller's usage; 400 for a bad
        ``days`` or ``thread``; the store's refusal (403) for a visitor it does not serve."""
        raw_days = request.GET.get("days", str(DEFAULT_USAGE_DAYS))
        days = int(raw_days) if raw_days.isdigit() else 0
        if not 1 <= days <= MAX_USAGE_DAYS:
            raise Refusal.invalid(
                request,
                f"days must be a whole number from 1 to {MAX_USAGE_DAYS}; omit it for "
                f"{DEFAULT_USAGE_DAYS}.",
            )
        thread_id = request.GET.get("thread")
        if thread_id is not None and not is_valid_id(thread_id):
            raise Refusal.invalid(request, "thread must be a thread id; omit it for every thread.")
        owner_id = await self._owner(request)
        today = datetime.now(UTC).date()
        since = _midnight(today - timedelta(days=days - 1))
        until = _midnight(today + timedelta(days=1))
        body: dict[str, Any] = {"total": None, "today": None, "days": [], "budgets": []}
        ledger = self._ledger
        if ledger is not None:
            empty = UsageTotals()
            if owner_id is None:
                total = today_totals = thread = empty
                by_day: list[tuple[date, UsageTotals]] = []
            else:
                total = await ledger.usage_totals(owner_id=owner_id)
                today_totals = await ledger.usage_totals(
                    owner_id=owner_id, since=_midnight(today), until=until
                )
                by_day = await ledger.usage_by_day(owner_id=owner_id, since=since, until=until)
                thread = (
                    empty
                    if thread_id is None
                    else await ledger.usage_totals(owner_id=owner_id, thread_id=thread_id)
                )
            body["total"] = total.as_json()
            body["today"] = today_totals.as_json()
            body["days"] = [{"day": day.isoformat(), **t.as_json()} for day, t in by_day]
            if thread_id is not None:
                body["thread"] = {"threadId": thread_id, **thread.as_json()}
        if self._spend is not None and owner_id is not None:
            body["budgets"] = await self._spend.readings(
                deps=await self._deps(request), owner_id=owner_id, thread_id=thread_id
            )
        return JsonResponse(body)
