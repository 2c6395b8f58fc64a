"""System checks of ``contrib.store``: its stores' (their ``check()`` methods report them) and
its database's (the app registers it).

The base app's checks ask each mounted store for its messages (``persistence.ChecksItself``);
``DefaultConversationStore`` and ``DefaultAttachmentStore`` answer with ``E001``.
``check_sqlite_options`` (``W002``) looks at the databases the app's rows are written to.
Importing this module loads no models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import router
from django.db.utils import load_backend

from django_pydantic_agent.checks import E001, W002

__all__ = ["STORE_APP", "check_sqlite_options", "store_app_installed"]

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


def _store_aliases() -> list[str]:
    """The database aliases the routers send ``contrib.store``'s writes to, sorted."""
    config = next(c for c in apps.get_app_configs() if c.name == STORE_APP)
    return sorted({router.db_for_write(model) for model in config.get_models()})


def _is_sqlite(database: Mapping[str, Any]) -> bool:
    engine = database.get("ENGINE")
    if not isinstance(engine, str) or not engine:
        return False
    return bool(load_backend(engine).DatabaseWrapper.vendor == "sqlite")


def _queues_writers(options: Mapping[str, Any]) -> bool:
    mode = options.get("transaction_mode")
    return isinstance(mode, str) and mode.upper() == "IMMEDIATE" and "timeout" in options


def check_sqlite_options(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W002: a database ``contrib.store`` writes to is SQLite whose ``OPTIONS`` lack
    ``"transaction_mode": "IMMEDIATE"`` or a ``"timeout"``; ``[]`` otherwise."""
    if not apps.is_installed(STORE_APP):
        return []
    found: list[checks.CheckMessage] = []
    for alias in _store_aliases():
        database = settings.DATABASES.get(alias)
        if database is None or not _is_sqlite(database):
            continue
        options = database.get("OPTIONS") or {}
        if _queues_writers(options):
            continue
        found.append(
            checks.Warning(
                f'DATABASES[{alias!r}] is SQLite without "transaction_mode": "IMMEDIATE" '
                f'and "timeout": 20 in its OPTIONS (transaction_mode='
                f"{options.get('transaction_mode')!r}, timeout={options.get('timeout')!r}). "
                "Concurrent runs write to it at the same time: this package takes the write lock "
                "before its own transactions read, but any other transaction on it (sessions, "
                "the admin, your code) asks for the lock only at its first write and fails at "
                'once with "database is locked" while a run writes; and without a timeout, a '
                "writer gives up after sqlite3's default 5 seconds.",
                hint=(
                    f'Add "transaction_mode": "IMMEDIATE" and "timeout": 20 to '
                    f'DATABASES[{alias!r}]["OPTIONS"]: every transaction then takes the write '
                    'lock at BEGIN, and a writer waits up to 20 seconds for it (see "SQLite in '
                    'production-ish use" in docs/contrib-store.md).'
                ),
                id=W002,
            )
        )
    return found
