"""``agent_store_strip_inline_bytes``: remove base64 file bytes from stored messages."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from django_pydantic_agent.contrib.store.lifecycle import strip_inline_binary_parts
from django_pydantic_agent.contrib.store.management.commands._common import StoreCommand
from django_pydantic_agent.contrib.store.models import (
    StoredConversation,
    StoredMessage,
    message_digest,
)

_BATCH = 500


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


class Command(StoreCommand):
    help = (
        "Remove inline (base64) file bytes from stored messages, keeping every message, "
        "its id and its attachment refs. Only changed rows are written."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = options["dry_run"]
        progress = self.progress(StoredMessage.objects.count(), "Messages")
        rewritten = reclaimed = 0
        last = 0
        while True:
            batch = list(
                StoredMessage.objects.filter(pk__gt=last)
                .order_by("pk")
                .values_list("pk", "data")[:_BATCH]
            )
            if not batch:
                break
            changed: list[StoredMessage] = []
            for pk, data in batch:
                [stripped], was_changed = strip_inline_binary_parts([data])
                if was_changed:
                    reclaimed += _size(data) - _size(stripped)
                    changed.append(
                        StoredMessage(pk=pk, data=stripped, digest=message_digest(stripped))
                    )
            if changed and not dry_run:
                with transaction.atomic():
                    StoredMessage.objects.bulk_update(changed, ["data", "digest"])
                    # Rows changed behind save()'s back: its next call compares every row.
                    StoredConversation.objects.filter(
                        message_rows__pk__in=[row.pk for row in changed]
                    ).update(save_state="")
            rewritten += len(changed)
            progress.advance(len(batch))
            last = batch[-1][0]
        progress.close()
        verb = "Would rewrite" if dry_run else "Rewrote"
        self.stdout.write(f"{verb} {rewritten} message(s), reclaiming {reclaimed} byte(s) of JSON.")
