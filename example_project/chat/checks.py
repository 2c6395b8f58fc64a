"""System checks for the example project's deployment settings."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register


@register(Tags.security, deploy=False)
def check_secret_key(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn about the development ``SECRET_KEY``; refuse it outright when ``DEBUG`` is off."""
    if getattr(settings, "DEVELOPMENT_SECRET_KEY", None) != settings.SECRET_KEY:
        return []
    hint = (
        "set DJANGO_SECRET_KEY to a long random value, for example the output of "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'."
    )
    if settings.DEBUG:
        return [
            Warning(
                "The example project is using its published development SECRET_KEY.",
                hint=f"Fine on your own machine; before anyone else can reach it, {hint}",
                id="example.W001",
            )
        ]
    return [
        Error(
            "DEBUG is off but SECRET_KEY is the published development key.",
            hint=hint[0].upper() + hint[1:],
            id="example.E001",
        )
    ]
