"""``agent_store_deliver_webhooks``: post the webhooks now due, once (cron, or a worker of its
own when ``Webhooks(poll_seconds=0)``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from argparse import ArgumentParser


class Command(BaseCommand):
    help = (
        "Attempt every queued webhook of one AGUIServer that is due now, once each, and record "
        "how each went (delivered, retried later with backoff, or given up)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "server", help="The dotted path of the AGUIServer, e.g. example_project.urls.server."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            server = import_string(options["server"])
        except ImportError as exc:
            raise CommandError(f"{options['server']!r} cannot be imported: {exc}") from None
        dispatcher = getattr(server, "webhook_dispatcher", None)
        if dispatcher is None:
            raise CommandError(
                f"{options['server']!r} sends no webhooks: build it with "
                "AGUIServer(..., webhooks=Webhooks(...))."
            )
        attempted = asyncio.run(dispatcher.deliver_due())
        self.stdout.write(f"Attempted {attempted} webhook(s).")
