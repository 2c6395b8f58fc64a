"""Admin for stored conversations and attachments (and, with the harness extra, memory).

Conversations show their messages read-only; the title and the archived flag stay editable
(what a rename and an archive change), and the list filters by the mounted retention policy.
Attachments are read-only metadata with their deduplication siblings. Deleting from the admin
goes through the same lifecycle helpers as the stores, so blobs and orphaned
attachments are cleaned up exactly as a store delete would; the conversation delete
confirmation previews those (a dry run) next to Django's own list.

Every list has an "owner" column (``OwnerColumnMixin``): the user's name linked to their admin
page when the owner id is a user pk, "anonymous session" for ``anon:<session_key>`` owners
(never the key itself), and the raw id otherwise. Search by owner id stays exact. The usage
ledger's admin (users and threads by cost, CSV export) is in ``admin/usage.py``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode

from django_pydantic_agent.contrib.store.admin.common import (
    RUN_SEARCH_FIELDS,
    RUN_SEARCH_HELP,
    ReadOnlyMixin,
)
from django_pydantic_agent.contrib.store.admin.display import (
    MessageDisplay,
    message_display,
    render_message,
    run_duration,
    token_totals,
)
from django_pydantic_agent.contrib.store.admin.owners import (
    OwnerColumnMixin,
    owner_label,
    users_by_owner_id,
)
from django_pydantic_agent.contrib.store.admin.retention import RetentionFilter
from django_pydantic_agent.contrib.store.lifecycle import (
    ConversationDeletion,
    delete_attachments,
    delete_conversations,
)
from django_pydantic_agent.contrib.store.models import (
    StoredAgentRun,
    StoredAttachment,
    StoredConversation,
    StoredConversationAttachment,
    StoredMessage,
)

if TYPE_CHECKING:
    from datetime import datetime

    from django.http import HttpRequest
    from django.utils.safestring import SafeString

__all__ = [
    "OwnerColumnMixin",
    "StoredAgentRunAdmin",
    "StoredAttachmentAdmin",
    "StoredConversationAdmin",
    "owner_label",
    "users_by_owner_id",
]

_SIBLINGS_SHOWN = 20
_RUNS_SHOWN = 50
_DOOMED_SHOWN = 100
# Set on a message row once its display is built (the inline shows it in several columns).
_DISPLAY_ATTR = "_dpa_display"


def _bytes(size: int) -> str:
    """``size`` for people: ``"28 bytes"``, ``"1.5 KiB"``, ``"5 MiB"``."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} byte" + ("" if size == 1 else "s")


def _when(value: datetime) -> str:
    """``value`` in the admin's date-time format, in the current time zone when it is aware."""
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return str(date_format(value, "DATETIME_FORMAT"))


class _ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class StoredMessageInline(_ReadOnlyInline):
    """The thread's messages, read from their record columns (``admin.display``): the active
    branch in order, then the messages of the thread's other branches."""

    model = StoredMessage
    template = "django_pydantic_agent_store/admin/messages_inline.html"
    fields = ("position", "message", "message_status", "run", "time")
    readonly_fields = fields
    ordering = ("-active", "position", "branch")

    def get_queryset(self, request: HttpRequest) -> QuerySet[StoredMessage]:
        return super().get_queryset(request).select_related("conversation")

    @staticmethod
    def _display(obj: StoredMessage) -> MessageDisplay:
        shown: MessageDisplay | None = getattr(obj, _DISPLAY_ATTR, None)
        if shown is None:
            shown = message_display(obj)
            setattr(obj, _DISPLAY_ATTR, shown)
        return shown

    @admin.display(description="message")
    def message(self, obj: StoredMessage) -> SafeString:
        """Role, text, reasoning (collapsed) and tool calls with their arguments and results."""
        return render_message(self._display(obj))

    @admin.display(description="status")
    def message_status(self, obj: StoredMessage) -> str:
        return obj.status or "\u2014"

    @admin.display(description="run")
    def run(self, obj: StoredMessage) -> SafeString | str:
        """The run that wrote the message, linked to its run record."""
        if not obj.run_id:
            return "\u2014"
        conversation = obj.conversation
        url = reverse(
            f"admin:{StoredAgentRun._meta.app_label}_storedagentrun_changelist",
            current_app=self.admin_site.name,
        )
        query = urlencode(
            {
                "owner_id": conversation.owner_id,
                "thread_id": conversation.thread_id,
                "run_id": obj.run_id,
            }
        )
        return format_html('<a href="{}?{}">{}</a>', url, query, obj.run_id)

    @admin.display(description="time")
    def time(self, obj: StoredMessage) -> str:
        shown = self._display(obj)
        if shown.time is None:
            return shown.time_text or "\u2014"
        return _when(shown.time)


class StoredConversationAttachmentInline(_ReadOnlyInline):
    model = StoredConversationAttachment
    fields = ("attachment", "created_at")
    readonly_fields = fields
    verbose_name_plural = "quoted attachments"


@admin.register(StoredConversation)
class StoredConversationAdmin(OwnerColumnMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Threads with their messages (read-only), searchable by title, owner id and thread id."""

    list_display = ("__str__", "owner", "thread_id", "archived", "updated_at", "created_at")
    list_filter = ("archived", RetentionFilter)
    search_fields = ("title", "=owner_id", "=thread_id")
    search_help_text = "Part of a title, an exact owner id or an exact thread id."
    date_hierarchy = "updated_at"
    ordering = ("-updated_at",)
    fields = (
        "title",
        "archived",
        "owner",
        "owner_id_text",
        "thread_id",
        "preview",
        "created_at",
        "updated_at",
        "token_usage",
        "runs",
    )
    readonly_fields = fields[2:]
    inlines = (StoredMessageInline, StoredConversationAttachmentInline)
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @staticmethod
    def _runs(obj: StoredConversation) -> QuerySet[StoredAgentRun]:
        return StoredAgentRun.objects.filter(owner_id=obj.owner_id, thread_id=obj.thread_id)

    @admin.display(description="token usage")
    def token_usage(self, obj: StoredConversation) -> str:
        """Tokens summed over every run of the thread (its run records' ``usage``)."""
        usages = list(self._runs(obj).values_list("usage", flat=True))
        if not usages:
            return "no runs recorded"
        runs = f"{len(usages):,} run" + ("" if len(usages) == 1 else "s")
        return f"{token_totals(usages)} over {runs}"

    @admin.display(description="runs")
    def runs(self, obj: StoredConversation) -> SafeString | str:
        """The thread's newest runs: id (linked), status, start, duration and tokens."""
        rows = list(self._runs(obj).order_by("-started_at", "-pk")[: _RUNS_SHOWN + 1])
        if not rows:
            return "none"
        label = StoredAgentRun._meta.app_label
        body = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>'
            "<td>{}</td></tr>",
            (
                (
                    reverse(
                        f"admin:{label}_storedagentrun_change",
                        args=[run.pk],
                        current_app=self.admin_site.name,
                    ),
                    run.run_id,
                    run.status,
                    _when(run.started_at),
                    run_duration(run),
                    str(token_totals([run.usage])),
                    run.worker_id or "\u2014",
                )
                for run in rows[:_RUNS_SHOWN]
            ),
        )
        more = ""
        if len(rows) > _RUNS_SHOWN:
            more = f"Newest {_RUNS_SHOWN} shown."
        return format_html(
            "<table class='dpa-runs'><thead><tr><th>run</th><th>status</th><th>started</th>"
            "<th>duration</th><th>tokens</th><th>worker</th></tr></thead><tbody>{}</tbody>"
            "</table>{}",
            body,
            more,
        )

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, Any], set[str], list[Any]]:
        """Django's cascade list, plus what the lifecycle delete also removes (a dry run).

        Attachments no other conversation quotes, the stored files that frees, and the
        harness rows of the same threads are not cascades, so Django's collector misses them.
        Skipped on the confirmed POST, which deletes instead of previewing.
        """
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        if request.POST.get("post"):
            return deleted, counts, perms_needed, protected
        if isinstance(objs, QuerySet):
            rows = objs
        else:
            rows = StoredConversation.objects.filter(pk__in=[obj.pk for obj in objs])
        preview = delete_conversations(rows, dry_run=True)
        summary: dict[Any, Any] = {**counts, **_deletion_counts(preview)}
        listed = [*deleted, *self._doomed_attachments(rows, request)]
        return listed, summary, perms_needed, protected

    def _doomed_attachments(
        self, rows: QuerySet[StoredConversation], request: HttpRequest
    ) -> list[SafeString | str]:
        """The attachments the delete removes: quoted by ``rows`` and by no other conversation."""
        links = StoredConversationAttachment.objects
        quoted = links.filter(conversation__in=rows).values("attachment_id")
        kept = links.filter(attachment_id__in=quoted).exclude(conversation__in=rows)
        doomed = (
            StoredAttachment.objects.filter(pk__in=quoted)
            .exclude(pk__in=kept.values("attachment_id"))
            .order_by("name", "pk")
        )
        app_label = StoredAttachment._meta.app_label
        perms = (f"{app_label}.view_storedattachment", f"{app_label}.change_storedattachment")
        linked = any(map(request.user.has_perm, perms))
        shown = list(doomed[: _DOOMED_SHOWN + 1])
        entries = [self._attachment_entry(row, linked) for row in shown[:_DOOMED_SHOWN]]
        if len(shown) > _DOOMED_SHOWN:
            entries.append("\u2026 and more attachments")
        return entries

    def _attachment_entry(self, attachment: StoredAttachment, linked: bool) -> SafeString | str:
        if not linked:
            return f"Attachment: {attachment}"
        url = reverse(
            f"admin:{attachment._meta.app_label}_storedattachment_change",
            args=[attachment.pk],
            current_app=self.admin_site.name,
        )
        return format_html('Attachment: <a href="{}">{}</a>', url, attachment)

    def delete_model(self, request: HttpRequest, obj: StoredConversation) -> None:
        delete_conversations(StoredConversation.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[StoredConversation]) -> None:
        delete_conversations(queryset)


def _deletion_counts(preview: ConversationDeletion) -> dict[str, int | str]:
    """The summary lines of a conversation delete preview beyond Django's own counts."""
    files = preview.attachments
    counts: dict[str, int | str] = {
        "attachments no other conversation quotes": files.rows,
        "stored files freed": f"{files.blobs} ({_bytes(files.bytes_freed)})",
    }
    harness = {
        "agent runs": preview.runs,
        "step events": preview.step_events,
        "snapshots": preview.snapshots,
        "tool effects": preview.tool_effects,
    }
    counts.update({name: count for name, count in harness.items() if count})
    return counts


class _ReadOnly(ReadOnlyMixin):
    """Rows the admin shows but never adds or edits, listed without a full count."""

    show_full_result_count = False


@admin.register(StoredAttachment)
class StoredAttachmentAdmin(_ReadOnly, OwnerColumnMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Attachment metadata, the conversations quoting it and its deduplication siblings."""

    list_display = ("__str__", "owner", "mime", "size", "short_sha256", "created_at")
    search_fields = ("name", "=owner_id", "=sha256")
    search_help_text = "Part of a name, an exact owner id or an exact SHA-256."
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    fields = (
        "attachment_id",
        "name",
        "owner",
        "owner_id_text",
        "mime",
        "size",
        "sha256",
        "stored_file",
        "created_at",
        "quoted_by",
        "dedup_siblings",
    )
    readonly_fields = fields

    @admin.display(description="SHA-256")
    def short_sha256(self, obj: StoredAttachment) -> str:
        return obj.sha256[:12]

    @admin.display(description="stored file")
    def stored_file(self, obj: StoredAttachment) -> str:
        """The blob's name in attachment storage, as text: blobs are private, never linked."""
        if not obj.file.name:
            return "none (no bytes stored)"
        return f"{obj.file.name} ({_bytes(obj.size)}, in private attachment storage)"

    @admin.display(description="quoted by")
    def quoted_by(self, obj: StoredAttachment) -> SafeString | str:
        rows = obj.conversations.order_by("-updated_at")[:_SIBLINGS_SHOWN]
        return self._links(rows, "storedconversation") or "no conversation (an orphan)"

    @admin.display(description="deduplication siblings")
    def dedup_siblings(self, obj: StoredAttachment) -> SafeString | str:
        """Other uploads of the same owner with the same content hash (they may share a blob)."""
        if not obj.sha256:
            return "not hashed yet (run agent_store_backfill_hashes)"
        rows = (
            StoredAttachment.objects.filter(owner_id=obj.owner_id, sha256=obj.sha256)
            .exclude(pk=obj.pk)
            .order_by("-created_at")[:_SIBLINGS_SHOWN]
        )
        return self._links(rows, "storedattachment") or "none"

    @staticmethod
    def _links(rows: Any, model_name: str) -> SafeString | str:
        label = StoredAttachment._meta.app_label
        return format_html_join(
            ", ",
            "<a href='{}'>{}</a>",
            (
                (reverse(f"admin:{label}_{model_name}_change", args=[row.pk]), str(row))
                for row in rows
            ),
        )

    def delete_model(self, request: HttpRequest, obj: StoredAttachment) -> None:
        delete_attachments(StoredAttachment.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[StoredAttachment]) -> None:
        delete_attachments(queryset)


@admin.register(StoredAgentRun)
class StoredAgentRunAdmin(_ReadOnly, OwnerColumnMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Run records: read-only, searchable by exact thread, run or owner id.

    Nothing is editable and nothing can be added: the rows are the run store's, written by the
    worker that owns the run. Only a finished run can be deleted. A ``running`` row is its
    thread's claim (at most one per thread, a unique constraint) and its worker's lease:
    deleting it would let a second run start on the thread while the first still writes, and
    the first's heartbeats and finish would update nothing. A finished row is history: deleting
    it takes its tokens out of the conversation's totals and makes a reattach to it a 404.
    """

    list_display = (
        "run_id",
        "status",
        "owner",
        "thread_id",
        "worker_id",
        "started_at",
        "duration",
        "tokens",
    )
    list_filter = ("status", "started_at")
    search_fields = RUN_SEARCH_FIELDS
    search_help_text = RUN_SEARCH_HELP
    date_hierarchy = "started_at"
    ordering = ("-started_at", "-pk")
    fields = (
        "run_id",
        "status",
        "owner",
        "owner_id_text",
        "thread_id",
        "conversation",
        "worker_id",
        "started_at",
        "finished_at",
        "duration",
        "heartbeat_at",
        "last_seq",
        "tokens",
        "usage_json",
        "error",
    )
    readonly_fields = fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.status == "running":
            return False
        return super().has_delete_permission(request, obj)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, Any], set[str], list[Any]]:
        """Django's list, with the selection's running runs as protected: nothing is deleted.

        Django's collector asks ``has_delete_permission`` per row, so a running row would read
        as a missing permission; it is listed as protected, with the reason, instead.
        """
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        running = [
            f"run {run.run_id}: still running (only a finished run can be deleted)"
            for run in objs
            if run.status == "running"
        ]
        if running and super().has_delete_permission(request):
            name = str(self.opts.verbose_name)
            perms_needed = {needed for needed in perms_needed if str(needed) != name}
        return deleted, counts, perms_needed, [*protected, *running]

    @admin.display(description="duration")
    def duration(self, obj: StoredAgentRun) -> str:
        return run_duration(obj)

    @admin.display(description="tokens")
    def tokens(self, obj: StoredAgentRun) -> str:
        """Total tokens (input, output) of the run's ``usage``."""
        return str(token_totals([obj.usage]))

    @admin.display(description="usage (JSON)")
    def usage_json(self, obj: StoredAgentRun) -> SafeString:
        text = json.dumps(obj.usage, indent=2, ensure_ascii=False, default=str)
        return format_html("<pre style='white-space: pre-wrap; margin: 0'>{}</pre>", text)

    @admin.display(description="conversation")
    def conversation(self, obj: StoredAgentRun) -> SafeString | str:
        """The thread's conversation, linked, or a note when it was deleted."""
        row = StoredConversation.objects.filter(
            owner_id=obj.owner_id, thread_id=obj.thread_id
        ).first()
        if row is None:
            return "none (deleted, or never stored)"
        url = reverse(
            f"admin:{row._meta.app_label}_storedconversation_change",
            args=[row.pk],
            current_app=self.admin_site.name,
        )
        return format_html('<a href="{}">{}</a>', url, row)


# The usage ledger's admin (the "By cost" page and its CSV export).
importlib.import_module("django_pydantic_agent.contrib.store.admin.usage")

# Memory admin needs the optional pydantic-ai-harness extra.
if importlib.util.find_spec("pydantic_ai_harness") is not None:
    importlib.import_module("django_pydantic_agent.contrib.store.admin.memory")
from django_pydantic_agent.contrib.store.admin import feedback as _feedback  # noqa: E402, F401
