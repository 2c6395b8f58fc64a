"""``agent_store_strip_inline_bytes``: remove base64 file bytes from stored messages."""

from __future__ import annotations

import json
from typing import Any

from django_pydantic_agent.contrib.store.links import strip_inline_binary_parts
from django_pydantic_agent.contrib.store.management.commands._common import StoreCommand
from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage
from django_pydantic_agent.persistence.transactions import write_transaction

_BATCH = 500
_COLUMNS = ("wire", "record", "tool_calls")


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def _stripped_parts(parts: Any) -> tuple[Any, bool]:
    """``parts`` (a record's ``content_parts``) without inline bytes, and whether any went."""
    [message], changed = strip_inline_binary_parts([{"content": parts}])
    return message["content"], changed


def _stripped_row(wire: Any, record: Any, tool_calls: Any) -> tuple[Any, Any, Any] | None:
    """A row's ``wire``, ``record`` and ``tool_calls`` without inline bytes, or ``None``.

    The saved messages (``wire``) and the record's own ``content_parts`` (and those of its
    tool results) are stripped alike, so ``load`` shows no bytes whichever it reads.
    """
    wire, changed = strip_inline_binary_parts(wire)
    if isinstance(record, dict) and isinstance(record.get("content_parts"), list):
        parts, parts_changed = _stripped_parts(record["content_parts"])
        if parts_changed:
            record, changed = {**record, "content_parts": parts}, True
    if isinstance(tool_calls, list):
        calls = []
        for call in tool_calls:
            if isinstance(call, dict) and isinstance(call.get("content_parts"), list):
                parts, parts_changed = _stripped_parts(call["content_parts"])
                if parts_changed:
                    call, changed = {**call, "content_parts": parts}, True
            calls.append(call)
        tool_calls = calls
    return (wire, record, tool_calls) if changed else None


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
                .values_list("pk", *_COLUMNS)[:_BATCH]
            )
            if not batch:
                break
            changed: list[StoredMessage] = []
            for pk, *columns in batch:
                stripped = _stripped_row(*columns)
                if stripped is not None:
                    reclaimed += _size(columns) - _size(stripped)
                    changed.append(
                        StoredMessage(pk=pk, **dict(zip(_COLUMNS, stripped, strict=True)))
                    )
            if changed and not dry_run:
                with write_transaction():
                    StoredMessage.objects.bulk_update(changed, list(_COLUMNS))
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
