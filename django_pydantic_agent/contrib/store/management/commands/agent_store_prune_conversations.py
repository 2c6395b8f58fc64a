"""``agent_store_prune_conversations``: retention by last activity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_pydantic_agent.contrib.store.deletion import delete_conversations
from django_pydantic_agent.contrib.store.management.commands._common import StoreCommand
from django_pydantic_agent.contrib.store.models import StoredConversation

if TYPE_CHECKING:
    from argparse import ArgumentParser


class Command(StoreCommand):
    help = (
        "Delete conversations not updated for --older-than (their messages too), and the "
        "attachments that no remaining conversation quotes."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--older-than",
            required=True,
            help="Retention period, such as 90d or 12w; conversations idle longer are deleted.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cutoff = self.cutoff(options["older_than"])
        stale = StoredConversation.objects.filter(updated_at__lt=cutoff)
        progress = self.progress(stale.count(), "Conversations")
        result = delete_conversations(stale, dry_run=options["dry_run"], on_batch=progress.advance)
        progress.close()
        verb = "Would delete" if options["dry_run"] else "Deleted"
        attachments = result.attachments
        self.stdout.write(
            f"{verb} {result.conversations} conversation(s) with {result.messages} "
            f"message(s), {attachments.rows} attachment(s) and {attachments.blobs} blob(s), "
            f"freeing {attachments.bytes_freed} byte(s); and {result.runs} run(s), "
            f"{result.step_events} step event(s), {result.snapshots} snapshot(s) and "
            f"{result.tool_effects} tool effect(s)."
        )
