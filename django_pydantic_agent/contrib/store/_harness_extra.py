"""The optional ``harness`` extra: one clear error wherever pydantic-ai-harness is missing."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

__all__ = ["HARNESS_INSTALL", "HARNESS_INSTALL_FROM_CLONE", "harness_missing"]

#: The command that installs the extra from this project's repository, quoted for a shell.
#: Never the bare PyPI name: PyPI's django-pydantic-agent is the predecessor, 0.28.3.
HARNESS_INSTALL = (
    'pip install "django-pydantic-agent[harness] @ '
    'git+https://github.com/django-pydantic-agent/django-pydantic-agent"'
)
#: The same from a clone (the README's install), run in the folder that holds the clone.
HARNESS_INSTALL_FROM_CLONE = 'pip install -e "./django-pydantic-agent[harness]"'


def harness_missing(exc: ModuleNotFoundError, feature: str) -> Exception:
    """``ImproperlyConfigured`` naming ``feature`` and the install command, if ``exc`` is the
    harness itself missing; ``exc`` unchanged otherwise (a module the harness needs is not
    the extra's absence, and its own message says what to install)."""
    if (exc.name or "").partition(".")[0] != "pydantic_ai_harness":
        return exc
    return ImproperlyConfigured(
        f"{feature} needs the optional pydantic-ai-harness package, which is not installed. "
        "Install the harness extra from this project's repository, not from PyPI (whose "
        f"django-pydantic-agent is the predecessor, 0.28.3): {HARNESS_INSTALL}, or from a "
        f"clone: {HARNESS_INSTALL_FROM_CLONE}"
    )
