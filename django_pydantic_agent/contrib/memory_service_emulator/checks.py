"""System checks for the emulator settings (ids ``django_pydantic_agent_memory_emulator.E*``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core import checks

E001 = "django_pydantic_agent_memory_emulator.E001"
E002 = "django_pydantic_agent_memory_emulator.E002"

_KNOWN_KEYS = {"TOKENS", "ALLOW_NEVER_TRIGGER"}


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``USE_TZ`` must be on (event tokens are UTC instants); the setting must be well formed."""
    errors: list[checks.CheckMessage] = []
    if not settings.USE_TZ:
        errors.append(
            checks.Error(
                "The Memory Service emulator needs USE_TZ = True: event createdAt tokens are "
                "compared as UTC instants.",
                hint="Set USE_TZ = True in your settings.",
                id=E001,
            )
        )
    config = getattr(settings, "MEMORY_SERVICE_EMULATOR", {})
    problem = None
    if not isinstance(config, Mapping):
        problem = f"MEMORY_SERVICE_EMULATOR must be a dict, got {config!r}."
    elif unknown := sorted(set(config) - _KNOWN_KEYS):
        problem = f"MEMORY_SERVICE_EMULATOR has unknown key(s) {unknown!r}."
    elif isinstance(config.get("TOKENS"), str | bytes):
        problem = f"MEMORY_SERVICE_EMULATOR['TOKENS'] is the string {config['TOKENS']!r}."
    if problem is not None:
        errors.append(
            checks.Error(
                problem,
                hint='Use e.g. MEMORY_SERVICE_EMULATOR = {"TOKENS": ["dev-token"], '
                '"ALLOW_NEVER_TRIGGER": False}; both keys are optional.',
                id=E002,
            )
        )
    return errors
