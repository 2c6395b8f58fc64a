"""``python -m tests.reliability.project.dump``: the run records, message rows and spend
counters, as JSON."""

from __future__ import annotations

import json
import os

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.reliability.project.settings")
    django.setup()
    from django_pydantic_agent.contrib.store.models import (
        StoredAgentRun,
        StoredMessage,
        StoredSpendCounter,
    )

    runs = [
        {
            "owner_id": run.owner_id,
            "thread_id": run.thread_id,
            "run_id": run.run_id,
            "status": run.status,
            "last_seq": run.last_seq,
            "error": run.error,
        }
        for run in StoredAgentRun.objects.order_by("started_at", "pk")
    ]
    messages = [
        {
            "owner_id": row.conversation.owner_id,
            "thread_id": row.conversation.thread_id,
            "run_id": row.run_id,
            "position": row.position,
            "role": row.role,
            "status": row.status,
        }
        for row in StoredMessage.objects.select_related("conversation").order_by(
            "conversation_id", "position"
        )
    ]
    spend = [
        {"key": row.key, "usd_nanos": row.usd_nanos, "requests": row.requests}
        for row in StoredSpendCounter.objects.order_by("key")
    ]
    print(json.dumps({"runs": runs, "messages": messages, "spend": spend}))


if __name__ == "__main__":
    main()
