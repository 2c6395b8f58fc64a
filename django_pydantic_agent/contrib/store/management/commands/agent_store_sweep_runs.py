"""``agent_store_sweep_runs``: end runs whose worker died (no heartbeat within the lease)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

from django_pydantic_agent.contrib.store.models import StoredAgentRun
from django_pydantic_agent.contrib.store.runs import sweep_runs
from django_pydantic_agent.persistence.runs import DEFAULT_LEASE_SECONDS

if TYPE_CHECKING:
    from argparse import ArgumentParser


class Command(BaseCommand):
    help = (
        "Finalise as errored every running run whose heartbeat is older than the lease, and "
        "the messages, tool calls and reasoning steps it left in progress, so no run stays "
        "running after its worker was killed. Safe to run at any time and from cron."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--lease",
            type=float,
            default=DEFAULT_LEASE_SECONDS,
            help=f"Seconds without a heartbeat after which a run is stale "
            f"(default {DEFAULT_LEASE_SECONDS:g}).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Report how many runs are stale without changing anything.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        lease = options["lease"]
        if not lease > 0:
            raise CommandError(
                f"--lease={lease!r} is not valid: pass a positive number of seconds."
            )
        if options["dry_run"]:
            from datetime import timedelta

            from django.utils import timezone

            cutoff = timezone.now() - timedelta(seconds=lease)
            count = StoredAgentRun.objects.filter(status="running", heartbeat_at__lt=cutoff).count()
            self.stdout.write(f"Would sweep {count} stale run(s).")
            return
        swept = sweep_runs(lease=lease)
        self.stdout.write(f"Swept {len(swept)} stale run(s) as errored.")
