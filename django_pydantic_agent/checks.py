"""System checks of django-pydantic-agent (``manage.py check``), registered by the base app.

Stable ids:

- ``django_pydantic_agent.E001``: a ``Default*`` store of ``contrib.store`` is mounted but
  ``django_pydantic_agent.contrib.store`` is not in ``INSTALLED_APPS``.
- ``django_pydantic_agent.E002``: the ``STORAGES`` alias ``django_pydantic_agent_attachments``
  is defined but its backend does not load.
- ``django_pydantic_agent.E003``: a ``DjangoSessionConversationStore`` is mounted without
  ``SessionMiddleware``.

Mounted stores are found by walking the URLconf for views carrying an ``agui_server``
attribute (what ``AGUIServer.urls`` mounts) and reading the server's ``conversation_store``
and ``attachment_store``; wrappers exposing ``inner`` (``ScopedConversationStore``) are
unwrapped.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils.module_loading import import_string

from django_pydantic_agent.persistence.base import wrapped_stores

__all__ = [
    "E001",
    "E002",
    "E003",
    "check_attachment_storage",
    "check_mounted_stores",
    "mounted_stores",
]

E001 = "django_pydantic_agent.E001"
E002 = "django_pydantic_agent.E002"
E003 = "django_pydantic_agent.E003"

_STORE_APP = "django_pydantic_agent.contrib.store"
_SESSION_MIDDLEWARE = "django.contrib.sessions.middleware.SessionMiddleware"
_ATTACHMENT_ALIAS = "django_pydantic_agent_attachments"


def _callbacks(patterns: Any) -> Iterator[Any]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _callbacks(entry.url_patterns)
        elif isinstance(entry, URLPattern):
            yield entry.callback


def _server_of(view: Any) -> Any:
    seen: set[int] = set()
    while view is not None and id(view) not in seen:
        seen.add(id(view))
        server = getattr(view, "agui_server", None)
        if server is not None:
            return server
        view = getattr(view, "__wrapped__", None)
    return None


def mounted_stores() -> list[Any]:
    """Return every store the URLconf's AG-UI servers use, wrappers and wrapped alike.

    Each store appears once, in URL order.
    """
    stores: dict[int, Any] = {}
    servers: set[int] = set()
    for view in _callbacks(get_resolver().url_patterns):
        server = _server_of(view)
        if server is None or id(server) in servers:
            continue
        servers.add(id(server))
        for attribute in ("conversation_store", "attachment_store"):
            for store in wrapped_stores(getattr(server, attribute, None)):
                stores.setdefault(id(store), store)
    return list(stores.values())


def _has_session_middleware() -> bool:
    from django.contrib.sessions.middleware import SessionMiddleware

    for path in settings.MIDDLEWARE:
        try:
            middleware = import_string(path)
        except ImportError:
            continue  # Django's own checks report unimportable middleware
        if isinstance(middleware, type) and issubclass(middleware, SessionMiddleware):
            return True
    return False


def _needs_store_app(store: object) -> bool:
    """Whether ``store`` is (or subclasses) a class of ``contrib.store``, hence needs its tables.

    Read from the class hierarchy's module names: the base app imports nothing from
    ``contrib`` (DESIGN §2), so it cannot ``isinstance`` against the ``Default*`` stores.
    """
    return any(klass.__module__.startswith(f"{_STORE_APP}.") for klass in type(store).__mro__)


def check_mounted_stores(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E001 and E003: stores mounted in the URLconf whose requirements are not installed."""
    from django_pydantic_agent.persistence import DjangoSessionConversationStore

    errors: list[checks.CheckMessage] = []
    for store in mounted_stores():
        name = type(store).__name__
        if _needs_store_app(store) and not apps.is_installed(_STORE_APP):
            errors.append(
                checks.Error(
                    f"{name} is mounted, but {_STORE_APP!r} is not in INSTALLED_APPS, so its "
                    "tables do not exist.",
                    hint=f"Add {_STORE_APP!r} to INSTALLED_APPS and run migrate.",
                    obj=store,
                    id=E001,
                )
            )
        if isinstance(store, DjangoSessionConversationStore) and not _has_session_middleware():
            errors.append(
                checks.Error(
                    f"{name} is mounted, but no SessionMiddleware is in MIDDLEWARE, so "
                    "requests have no session to keep conversations in.",
                    hint=f"Add {_SESSION_MIDDLEWARE!r} to MIDDLEWARE.",
                    obj=store,
                    id=E003,
                )
            )
    return errors


def check_attachment_storage(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E002: the attachments ``STORAGES`` alias is defined but its backend does not load."""
    if _ATTACHMENT_ALIAS not in settings.STORAGES:
        return []
    from django.core.files.storage import storages

    try:
        storages[_ATTACHMENT_ALIAS]
    except Exception as exc:  # any failure to build the backend is the finding
        backend = settings.STORAGES[_ATTACHMENT_ALIAS].get("BACKEND")
        return [
            checks.Error(
                f"STORAGES[{_ATTACHMENT_ALIAS!r}] is defined but does not load "
                f"(BACKEND={backend!r}: {exc}); attachments would fail instead of being "
                "stored.",
                hint="Fix the backend path and its OPTIONS, or remove the alias to keep "
                "attachments in default storage.",
                id=E002,
            )
        ]
    return []
