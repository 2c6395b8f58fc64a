"""Admin for the usage ledger: each run's tokens and cost, and who and what cost the most.

The ledger's changelist is read-only, filterable by day, model and whether the tokens are an
estimate (a run stopped or failed before its provider reported them). Its "By cost" page sums the
ledger per owner or per thread over a date range (``?group=owner|thread&since=&until=``, days in
UTC, ``until`` included), most expensive first, and exports the same table as CSV
(``&format=csv``). Owners are shown as everywhere in the admin: the user's name, or "anonymous
session" with a fingerprint, never a session key.
"""

from __future__ import annotations

import csv
import hashlib
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.http import HttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse

from django_pydantic_agent.contrib.store.admin.common import (
    RUN_SEARCH_FIELDS,
    RUN_SEARCH_HELP,
    ReadOnlyMixin,
    amount_text,
)
from django_pydantic_agent.contrib.store.admin.owners import (
    OwnerColumnMixin,
    owner_label,
    users_by_owner_id,
)
from django_pydantic_agent.contrib.store.models import StoredRunUsage
from django_pydantic_agent.contrib.store.runs import USAGE_SUMS

if TYPE_CHECKING:
    from django.http import HttpRequest
    from django.urls import URLPattern

__all__ = ["StoredRunUsageAdmin", "usage_by_cost"]

#: Rows the "By cost" page shows (the CSV has them all).
BY_COST_SHOWN: Final[int] = 500
_GROUPS: Final = {"owner": ("owner_id",), "thread": ("owner_id", "thread_id")}
#: The sums of each row of the "By cost" CSV, in order (``runs.USAGE_SUMS`` without ``sum_``).
_SUM_COLUMNS: Final = tuple(name.removeprefix("sum_") for name in USAGE_SUMS)


def _day(raw: str | None) -> date | None:
    try:
        return None if not raw else date.fromisoformat(raw)
    except ValueError:
        return None


def usage_by_cost(
    group: str, since: date | None = None, until: date | None = None
) -> list[dict[str, Any]]:
    """The ledger summed per owner (``group="owner"``) or per owner's thread (``"thread"``),
    for runs finished from ``since`` to ``until`` (UTC days, both included), most expensive
    first (unpriced runs count no cost; ``unpriced_runs`` says how many)."""
    rows = StoredRunUsage.objects.all()
    if since is not None:
        rows = rows.filter(
            finished_at__gte=datetime(since.year, since.month, since.day, tzinfo=UTC)
        )
    if until is not None:
        end = until + timedelta(days=1)
        rows = rows.filter(finished_at__lt=datetime(end.year, end.month, end.day, tzinfo=UTC))
    summed = (
        rows.values(*_GROUPS[group])
        .annotate(**USAGE_SUMS)
        .order_by(F("sum_cost_usd").desc(nulls_last=True), "-sum_total_tokens", *_GROUPS[group])
    )
    return [{key.removeprefix("sum_"): value for key, value in row.items()} for row in summed]


def _owner_text(owner_id: str, user: Any) -> str:
    """The owner as plain text (CSV): the username, an anonymous session's fingerprint, or the
    raw id. Never a session key."""
    if user is not None:
        return str(user.get_username())
    if owner_id.startswith("anon:"):
        return "anonymous session " + hashlib.sha256(owner_id.encode()).hexdigest()[:8]
    return owner_id or "no owner"


@admin.register(StoredRunUsage)
class StoredRunUsageAdmin(ReadOnlyMixin, OwnerColumnMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """The usage ledger: read-only rows the run store writes as runs end."""

    change_list_template = "django_pydantic_agent_store/admin/usage_change_list.html"
    list_display = (
        "finished_at",
        "owner",
        "thread_id",
        "run_id",
        "model",
        "total_tokens",
        "estimated",
        "cost",
    )
    list_filter = ("finished_at", "model", "estimated")
    search_fields = RUN_SEARCH_FIELDS
    search_help_text = RUN_SEARCH_HELP
    date_hierarchy = "finished_at"
    ordering = ("-finished_at", "-pk")
    fields = (
        "run_id",
        "owner",
        "owner_id_text",
        "thread_id",
        "status",
        "finished_at",
        "model",
        "provider",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "estimated",
        "cost",
    )
    readonly_fields = fields

    @admin.display(description="cost (USD)", ordering="cost_usd")
    def cost(self, obj: StoredRunUsage) -> str:
        return "unpriced" if obj.cost_usd is None else amount_text(obj.cost_usd)

    def get_urls(self) -> list[URLPattern]:
        opts = self.opts
        view = self.admin_site.admin_view(self.by_cost_view)
        name = f"{opts.app_label}_{opts.model_name}_by_cost"
        return [path("by-cost/", view, name=name), *super().get_urls()]

    def by_cost_view(self, request: HttpRequest) -> HttpResponse:
        """Users or threads by cost over a date range, as a page or (``format=csv``) a CSV."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        group = request.GET.get("group", "owner")
        if group not in _GROUPS:
            group = "owner"
        since, until = _day(request.GET.get("since")), _day(request.GET.get("until"))
        rows = usage_by_cost(group, since, until)
        users = users_by_owner_id(row["owner_id"] for row in rows)
        for row in rows:
            user = users.get(row["owner_id"])
            row["owner_text"] = _owner_text(row["owner_id"], user)
            row["owner_label"] = owner_label(self.admin_site, row["owner_id"], user)
            row["cost_text"] = "" if row["cost_usd"] is None else amount_text(row["cost_usd"])
        if request.GET.get("format") == "csv":
            return self._csv(rows, group, since, until)
        opts = self.opts
        query = request.GET.copy()
        query["format"] = "csv"
        context = {
            **self.admin_site.each_context(request),
            "opts": opts,
            "title": f"{'Users' if group == 'owner' else 'Threads'} by cost",
            "group": group,
            "since": request.GET.get("since", ""),
            "until": request.GET.get("until", ""),
            "bad_dates": bool(
                (request.GET.get("since") and since is None)
                or (request.GET.get("until") and until is None)
            ),
            "rows": rows[:BY_COST_SHOWN],
            "more": max(0, len(rows) - BY_COST_SHOWN),
            "csv_url": f"{request.path}?{query.urlencode()}",
            "changelist_url": reverse(
                f"admin:{opts.app_label}_{opts.model_name}_changelist",
                current_app=self.admin_site.name,
            ),
        }
        return TemplateResponse(
            request, "django_pydantic_agent_store/admin/usage_by_cost.html", context
        )

    @staticmethod
    def _csv(
        rows: list[dict[str, Any]], group: str, since: date | None, until: date | None
    ) -> HttpResponse:
        span = f"{since or 'start'}_{until or 'now'}"
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="usage-by-{group}-{span}.csv"'
        writer = csv.writer(response)
        keys = _GROUPS[group][1:]  # the owner is its text; a thread also its id
        writer.writerow(["owner", *keys, *_SUM_COLUMNS])
        for row in rows:
            sums = (row["cost_text" if name == "cost_usd" else name] for name in _SUM_COLUMNS)
            writer.writerow([row["owner_text"], *(row[key] for key in keys), *sums])
        return response
