"""Shared plumbing of the ``agent_store_*`` commands: durations, progress, dry runs.

Django skips modules whose name starts with an underscore when it looks for commands.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

if TYPE_CHECKING:
    from argparse import ArgumentParser

    from django.core.management.base import OutputWrapper

__all__ = ["StoreCommand", "parse_duration"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+)([smhdw])")
_BARE_HOURS = re.compile(r"\d+")


def _too_large(value: str) -> CommandError:
    return CommandError(
        f"--older-than={value!r} is too large: pass a duration of at most a few thousand years."
    )


def parse_duration(value: str) -> timedelta:
    """Parse ``30m``, ``24h``, ``7d``, ``2w`` (or ``45s``) into a positive ``timedelta``.

    Raises ``CommandError`` naming the value for anything else: a bare number (see
    ``StoreCommand.cutoff`` for the deprecated hours form), a zero duration (it would select
    everything created before this instant, which is never what a retention job means) and a
    duration too large for a date.
    """
    match = _DURATION.fullmatch(value.strip().lower())
    if match is None:
        raise CommandError(
            f"--older-than={value!r} is not a duration: write a whole number followed by a "
            "unit, s, m, h, d or w (for example 30m, 24h, 7d or 2w)."
        )
    try:
        duration = timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    except OverflowError:
        raise _too_large(value) from None
    if not duration:
        raise CommandError(
            f"--older-than={value!r} is not a positive duration: pass at least 1s (for "
            "example 30m, 24h or 7d)."
        )
    return duration


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

    def cutoff(self, value: str) -> datetime:
        """The instant ``--older-than=value`` before now; ``CommandError`` for a bad value.

        A bare whole number is read as hours, as predecessor 0.28.3 did, with a deprecation
        notice on stderr, so existing cron jobs keep working.
        """
        if _BARE_HOURS.fullmatch(value.strip()):
            self.stderr.write(
                f"--older-than={value!r} has no unit and is read as {value.strip()}h; bare "
                "numbers are deprecated and will be refused in a future release. Write "
                f"--older-than={value.strip()}h."
            )
            duration = parse_duration(f"{value.strip()}h")
        else:
            duration = parse_duration(value)
        try:
            return timezone.now() - duration
        except OverflowError:
            raise _too_large(value) from None

    def progress(self, total: int, label: str) -> _Progress:
        """Return a progress counter for ``total`` items (silent unless stdout is a TTY)."""
        return _Progress(self.stdout, total, label)

    def handle(self, *args: Any, **options: Any) -> None:
        raise NotImplementedError
