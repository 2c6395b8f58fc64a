"""System checks of ``contrib.store``'s stores, which their ``check()`` methods report.

The base app's checks ask each mounted store for its messages (``persistence.ChecksItself``);
``DefaultConversationStore`` and ``DefaultAttachmentStore`` answer with these. Importing this
module loads no models.
"""

from __future__ import annotations

from django.apps import apps
from django.core import checks

from django_pydantic_agent.checks import E001

__all__ = ["STORE_APP", "store_app_installed"]

#: The app whose tables the ``Default*`` stores keep their rows in.
STORE_APP = "django_pydantic_agent.contrib.store"


def store_app_installed(store: object) -> list[checks.CheckMessage]:
    """``django_pydantic_agent.E001`` for ``store`` when ``contrib.store`` is not in
    ``INSTALLED_APPS`` (its tables then do not exist); ``[]`` when it is."""
    if apps.is_installed(STORE_APP):
        return []
    return [
        checks.Error(
            f"{type(store).__name__} is mounted, but {STORE_APP!r} is not in INSTALLED_APPS, "
            "so its tables do not exist.",
            hint=f"Add {STORE_APP!r} to INSTALLED_APPS and run migrate.",
            obj=store,
            id=E001,
        )
    ]
