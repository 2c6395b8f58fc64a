"""Shared plumbing of the ``agent_store_*`` commands: durations, progress, dry runs.

Django skips modules whose name starts with an underscore when it looks for commands.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

if TYPE_CHECKING:
    from argparse import ArgumentParser

    from django.core.management.base import OutputWrapper

__all__ = ["StoreCommand", "parse_duration"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+)([smhdw])")


def parse_duration(value: str) -> timedelta:
    """Parse ``30m``, ``24h``, ``7d``, ``2w`` (or ``45s``) into a ``timedelta``.

    Raises ``CommandError`` naming the value for anything else, bare numbers included: an
    age without a unit is ambiguous, and a retention command must not guess.
    """
    match = _DURATION.fullmatch(value.strip().lower())
    if match is None:
        raise CommandError(
            f"--older-than={value!r} is not a duration: write a whole number followed by a "
            "unit, s, m, h, d or w (for example 30m, 24h, 7d or 2w)."
        )
    try:
        return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    except OverflowError:
        raise CommandError(
            f"--older-than={value!r} is too large: pass a duration of at most a few thousand years."
        ) from None


class _Progress:
    """A one-line progress counter, drawn only when stdout is a terminal."""

    def __init__(self, out: OutputWrapper, total: int, label: str) -> None:
        self.out = out
        self.total = total
        self.label = label
        self.done = 0
        self.enabled = out.isatty() and total > 0

    def advance(self, count: int) -> None:
        self.done += count
        if self.enabled:
            percent = min(100, self.done * 100 // self.total)
            self.out.write(f"\r{self.label}: {self.done}/{self.total} ({percent}%)", ending="")
            self.out.flush()

    def close(self) -> None:
        if self.enabled:
            self.out.write("")


class StoreCommand(BaseCommand):
    """Base of the store commands: a ``--dry-run`` flag and a TTY-only progress counter."""

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Report what would change without changing anything.",
        )

    def progress(self, total: int, label: str) -> _Progress:
        """Return a progress counter for ``total`` items (silent unless stdout is a TTY)."""
        return _Progress(self.stdout, total, label)

    def handle(self, *args: Any, **options: Any) -> None:
        raise NotImplementedError
