"""The optional ``harness`` extra: one clear error wherever pydantic-ai-harness is missing."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

__all__ = ["HARNESS_INSTALL", "harness_missing"]

#: The command that installs the extra, quoted for a shell.
HARNESS_INSTALL = 'pip install "django-pydantic-agent[harness]"'


def harness_missing(exc: ModuleNotFoundError, feature: str) -> Exception:
    """``ImproperlyConfigured`` naming ``feature`` and the install command, if ``exc`` is the
    harness itself missing; ``exc`` unchanged otherwise (a module the harness needs is not
    the extra's absence, and its own message says what to install)."""
    if (exc.name or "").partition(".")[0] != "pydantic_ai_harness":
        return exc
    return ImproperlyConfigured(
        f"{feature} needs the optional pydantic-ai-harness package, which is not installed. "
        f"Install the extra: {HARNESS_INSTALL}"
    )
