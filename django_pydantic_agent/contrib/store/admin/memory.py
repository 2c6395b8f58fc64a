"""Admin for agent memory files, with the "Purge agent memory for the selected owners" action.

Memory files are listed grouped by owner (ordered by owner, then path); the owner column shows
the user (linked to their admin page), "anonymous session" or the raw id, as in the other store
admins, next to a link to that owner's files only (``?owner_of=<file pk>``: the owner id stays
out of URLs, since an anonymous owner's id holds a session key). The admin is read-only:
content is written by the agent through ``DefaultMemoryStore`` (which escapes the ``<memory>``
fence and versions every write), never by hand. Deleting is allowed; purging a whole owner's
memory needs the ``django_pydantic_agent_store.purge_agent_memory`` permission and a
confirmation page.
Imported by ``contrib.store.admin`` when pydantic-ai-harness is installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db.models import Count, Q, Value
from django.db.models.functions import Length, StrIndex
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.http import urlencode

from django_pydantic_agent.contrib.store.admin.common import ReadOnlyMixin
from django_pydantic_agent.contrib.store.admin.owners import (
    OwnerColumnMixin,
    owner_label,
    users_by_owner_id,
)
from django_pydantic_agent.contrib.store.memory_store import DefaultMemoryStore
from django_pydantic_agent.contrib.store.models import StoredMemoryFile

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from django.http import HttpRequest
    from django.utils.safestring import SafeString

__all__ = ["PURGE_PERMISSION", "StoredMemoryFileAdmin"]

#: The permission (``app_label.codename``) the purge action requires.
PURGE_PERMISSION = "django_pydantic_agent_store.purge_agent_memory"

_CONFIRMATION_TEMPLATE = "django_pydantic_agent_store/admin/purge_memory_confirmation.html"


class OwnerOfFilter(admin.SimpleListFilter):
    """``?owner_of=<pk>``: the files of the owner of memory file ``pk``.

    Shown in the sidebar only while active. Filters by a row rather than by the owner id, so an
    anonymous owner's session key never lands in a URL (and from there in access logs).
    """

    title = "owner"
    parameter_name = "owner_of"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        value = self.value()
        if not value:
            return []
        owner = self._owner(value)
        if owner is None:  # still active, so a stale link filters to nothing, never to all
            return [(value, "no such memory file")]
        site = model_admin.admin_site
        return [(value, owner_label(site, owner, users_by_owner_id([owner]).get(owner)))]

    def queryset(
        self, request: HttpRequest, queryset: QuerySet[StoredMemoryFile]
    ) -> QuerySet[StoredMemoryFile]:
        # Only called while active (the sidebar lists the filter only then).
        owner = self._owner(self.value() or "")
        return queryset.none() if owner is None else queryset.filter(owner_id=owner)

    @staticmethod
    def _owner(pk: str) -> str | None:
        """The owner id of memory file ``pk``, or ``None`` (no such file, or not a pk)."""
        try:
            rows = StoredMemoryFile.objects.filter(pk=pk)
            return rows.values_list("owner_id", flat=True).first()
        except (ValueError, ValidationError):
            return None


@admin.register(StoredMemoryFile)
class StoredMemoryFileAdmin(ReadOnlyMixin, OwnerColumnMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Memory files by owner: view, filter by owner, delete, and purge whole owners."""

    list_display = ("owner", "path", "chars", "updated_at")
    list_display_links = ("path",)
    ordering = ("owner_id", "path")
    # Both matched case-sensitively in get_search_results: "=owner_id" would be iexact, so
    # "alice" listed "Alice" too, and a select-all purge took both owners.
    search_fields = ("owner_id", "path")
    search_help_text = "An exact owner id, or part of a path (case-sensitive)."
    list_per_page = 100
    list_filter = (OwnerOfFilter,)
    actions = ["purge_owner_memory"]
    fields = (
        "owner",
        "owner_id_text",
        "path",
        "content",
        "version",
        "operation_id",
        "write_metadata",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[StoredMemoryFile]:
        # Notes can be long: the list shows their length, loading the text only on the detail page.
        queryset: QuerySet[StoredMemoryFile] = super().get_queryset(request)
        return queryset.defer("content").annotate(content_chars=Length("content"))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[StoredMemoryFile], search_term: str
    ) -> tuple[QuerySet[StoredMemoryFile], bool]:
        """Rows whose owner id equals the term, or whose path contains it, both by code point."""
        term = search_term.strip()
        if not term:
            return queryset, False
        matches = queryset.alias(path_hit=StrIndex("path", Value(term))).filter(
            Q(owner_id=term) | Q(path_hit__gt=0)
        )
        return matches, False

    @admin.display(description="owner", ordering="owner_id")
    def owner(self, obj: StoredMemoryFile) -> SafeString:
        """The owner (see ``OwnerColumnMixin``) and a link to that owner's files only."""
        query = urlencode({OwnerOfFilter.parameter_name: obj.pk})
        return format_html(
            '{} <a href="?{}" title="Only this owner\'s files">(only these)</a>',
            super().owner(obj),
            query,
        )

    @admin.display(description="characters", ordering="content_chars")
    def chars(self, obj: StoredMemoryFile) -> int:
        return int(obj.content_chars)  # type: ignore[attr-defined]

    def has_purge_agent_memory_permission(self, request: HttpRequest) -> bool:
        """Whether the user may purge whole owners' memory (the action's gate)."""
        return request.user.has_perm(PURGE_PERMISSION)

    @admin.action(
        permissions=["purge_agent_memory"],
        description="Purge agent memory for the selected owners",
    )
    def purge_owner_memory(
        self, request: HttpRequest, queryset: QuerySet[StoredMemoryFile]
    ) -> TemplateResponse | None:
        """Ask for confirmation, then delete every memory file and receipt of each owner.

        Every file of a selected row's owner goes, not only the selected rows: memory is
        erased per person. The purge is ``DefaultMemoryStore.purge``, one owner at a time.
        """
        owners = sorted(set(queryset.values_list("owner_id", flat=True)))
        if request.POST.get("post") == "yes" and self.has_purge_agent_memory_permission(request):
            removed = sum(DefaultMemoryStore.purge(owner) for owner in owners)
            self.message_user(
                request,
                f"Purged {removed} memory file(s) of {len(owners)} owner(s).",
                messages.SUCCESS,
            )
            return None
        users = users_by_owner_id(owners)
        counts: list[dict[str, Any]] = [
            {
                **row,
                "label": owner_label(self.admin_site, row["owner_id"], users.get(row["owner_id"])),
            }
            for row in StoredMemoryFile.objects.filter(owner_id__in=owners)
            .values("owner_id")
            .annotate(files=Count("pk"))
            .order_by("owner_id")
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Purge agent memory?",
            "opts": self.model._meta,
            "owners": counts,
            "total_files": sum(row["files"] for row in counts),
            "queryset": queryset,
            "action_name": "purge_owner_memory",
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, _CONFIRMATION_TEMPLATE, context)
