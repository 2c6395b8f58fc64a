"""``agent_store_prune_conversations``: retention by last activity and by count per owner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError

from django_pydantic_agent.contrib.store.management.commands._common import StoreCommand
from django_pydantic_agent.contrib.store.retention import (
    apply_retention,
    due_ids,
    mounted_policies,
)

if TYPE_CHECKING:
    from argparse import ArgumentParser

__all__ = ["Command"]


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise CommandError(
            f"--keep-newest={value!r} is not a positive whole number: pass how many threads "
            "each owner keeps (for example 500)."
        )
    return number


class Command(StoreCommand):
    help = (
        "Delete conversations not updated for --older-than and/or beyond each owner's "
        "--keep-newest (their messages too), and the attachments that no remaining "
        "conversation quotes. Without either option, applies the RetentionPolicy of the "
        "DefaultConversationStores the URLconf mounts."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "--older-than",
            help="Retention period, such as 90d or 12w; conversations idle longer are deleted.",
        )
        parser.add_argument(
            "--keep-newest",
            help="Keep only each owner's newest N conversations (by last activity).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        older, keep = options["older_than"], options["keep_newest"]
        if older is None and keep is None:
            policies = mounted_policies()
            if not policies:
                raise CommandError(
                    "No retention to apply: pass --older-than (for example 90d) and/or "
                    "--keep-newest (for example 500), or give the mounted store a policy, "
                    "DefaultConversationStore(retention=RetentionPolicy(idle_days=90))."
                )
            self.stdout.write(
                "Applying the mounted retention: "
                + "; ".join(policy.describe() for policy in policies)
                + "."
            )
            ids = due_ids(policies)
        else:
            ids = due_ids(
                [],
                idle_before=None if older is None else self.cutoff(older),
                keep_newest=None if keep is None else _positive(keep),
            )
        progress = self.progress(len(ids), "Conversations")
        result = apply_retention(ids, dry_run=options["dry_run"], on_batch=progress.advance)
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
