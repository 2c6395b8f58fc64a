"""``agent_store_purge_memory <owner_id>``: erase one owner's agent memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

from django_pydantic_agent.contrib.store.management.commands._common import StoreCommand
from django_pydantic_agent.contrib.store.models import StoredMemoryFile

if TYPE_CHECKING:
    from argparse import ArgumentParser


class Command(StoreCommand):
    help = (
        "Delete every agent memory file (and operation receipt) of one owner. The owner id is "
        "the value memory rows are stored under: the user's id (such as 42) for a "
        "DefaultMemoryStore built per request, the memory namespace (such as u-42) for one "
        "built without a request."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("owner_id", help="The owner whose memory to delete, exactly as stored.")

    def handle(self, *args: Any, **options: Any) -> None:
        # Imported here so that without the harness extra the command says how to install it.
        try:
            from django_pydantic_agent.contrib.store.memory_store import DefaultMemoryStore
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        owner_id: str = options["owner_id"]
        if not owner_id.strip() or owner_id != owner_id.strip():
            raise CommandError(
                f"Owner id {owner_id!r} is empty or has surrounding whitespace: pass the owner "
                "id exactly as the memory admin lists it, such as 42 or u-42."
            )
        if options["dry_run"]:
            count = StoredMemoryFile.objects.filter(owner_id=owner_id).count()
            verb = "Would delete"
        else:
            count = DefaultMemoryStore.purge(owner_id)
            verb = "Deleted"
        self.stdout.write(f"{verb} {count} memory file(s) of owner {owner_id!r}.")
        if count == 0:
            self.stderr.write(
                f"No memory is stored under owner {owner_id!r}; check the id against the "
                "memory admin (request-bound stores use the user id, others the namespace)."
            )
