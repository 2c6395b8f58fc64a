"""``agent_store_backfill_hashes``: compute SHA-256 for attachments stored without one."""

from __future__ import annotations

import hashlib
from typing import Any

from django_pydantic_agent.contrib.store.management.commands._common import StoreCommand
from django_pydantic_agent.contrib.store.models import (
    StoredAttachment,
    resolve_attachment_storage,
)

_BATCH = 200
_CHUNK = 64 * 1024


class Command(StoreCommand):
    help = (
        "Compute the SHA-256 of attachments whose hash is empty (rows written by imports or "
        "older tools), reading each blob back from storage, so they take part in per-owner "
        "deduplication. Resumable: hashed rows are skipped on the next run."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        pending = StoredAttachment.objects.filter(sha256="").exclude(file="")
        total = pending.count()
        if options["dry_run"]:
            self.stdout.write(f"Would hash {total} attachment(s).")
            return
        storage = resolve_attachment_storage()
        progress = self.progress(total, "Attachments")
        hashed = skipped = 0
        last = 0
        while True:
            rows = pending.filter(pk__gt=last).order_by("pk")
            batch = list(rows.values_list("pk", "attachment_id", "file")[:_BATCH])
            if not batch:
                break
            for pk, attachment_id, name in batch:
                digest = hashlib.sha256()
                try:
                    with storage.open(name, "rb") as blob:
                        for chunk in blob.chunks(_CHUNK):
                            digest.update(chunk)
                except OSError as exc:
                    skipped += 1
                    self.stderr.write(
                        f"Skipped attachment {attachment_id.hex}: its blob {name!r} could not "
                        f"be read ({exc.__class__.__name__}: {exc})."
                    )
                    continue
                hashed += StoredAttachment.objects.filter(pk=pk, sha256="").update(
                    sha256=digest.hexdigest()
                )
            progress.advance(len(batch))
            last = batch[-1][0]
        progress.close()
        self.stdout.write(f"Hashed {hashed} attachment(s); skipped {skipped} unreadable.")
