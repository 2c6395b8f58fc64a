"""``agent_store_prune_attachments``: delete attachments no conversation quotes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django_pydantic_agent.contrib.store.deletion import (
    delete_attachments,
    preview_attachment_deletion,
)
from django_pydantic_agent.contrib.store.management.commands._common import StoreCommand
from django_pydantic_agent.contrib.store.models import StoredAttachment

if TYPE_CHECKING:
    from argparse import ArgumentParser


class Command(StoreCommand):
    help = (
        "Delete orphan attachments: uploads older than --older-than that no conversation "
        "quotes (never sent, or dropped from every conversation). Blobs shared through "
        "deduplication go only with their last row."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--older-than",
            default="24h",
            help="Minimum age of an orphan, such as 30m, 24h, 7d or 2w (default: 24h).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cutoff = self.cutoff(options["older_than"])
        orphans = StoredAttachment.objects.filter(
            created_at__lt=cutoff, conversation_links__isnull=True
        )
        progress = self.progress(orphans.count(), "Attachments")
        if options["dry_run"]:
            result = preview_attachment_deletion(orphans, on_batch=progress.advance)
            verb = "Would delete"
        else:
            result = delete_attachments(orphans, on_batch=progress.advance)
            verb = "Deleted"
        progress.close()
        self.stdout.write(
            f"{verb} {result.rows} orphan attachment(s) and {result.blobs} blob(s), "
            f"freeing {result.bytes_freed} byte(s)."
        )
