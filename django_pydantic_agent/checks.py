"""System checks of django-pydantic-agent (``manage.py check``), registered by the base app.

Stable ids:

- ``django_pydantic_agent.E001``: a ``Default*`` store of ``contrib.store`` is mounted but
  ``django_pydantic_agent.contrib.store`` is not in ``INSTALLED_APPS``.
- ``django_pydantic_agent.E002``: the ``STORAGES`` alias ``django_pydantic_agent_attachments``
  is defined but its backend does not load.
- ``django_pydantic_agent.E003``: a ``DjangoSessionConversationStore`` is mounted without
  ``SessionMiddleware``.
- ``django_pydantic_agent.W001``: with ``DEBUG`` off, an ``AGUIServer`` with durable runs uses
  a per-process cache (``LocMemCache``): with several worker processes, a cancel or reattach
  sent to another worker does not reach the run.
- ``django_pydantic_agent.E004``: with ``DEBUG`` off, an ``AGUIServer`` with durable runs uses
  ``DummyCache``, which keeps nothing: cancel intents, the live tail shared between workers,
  the sweep lease and (for stores without run tables) the run records themselves are lost.
- ``django_pydantic_agent.W002``: a database ``contrib.store`` writes to is SQLite without
  ``"transaction_mode": "IMMEDIATE"`` and a ``"timeout"`` in its ``OPTIONS`` (registered by
  ``contrib.store``, ``contrib/store/checks.py``).

Both cache checks are silenced for a single-process deployment with
``SILENCED_SYSTEM_CHECKS = ["django_pydantic_agent.W001"]`` (or ``E004``).

Mounted stores are found by walking the URLconf for views carrying an ``agui_server``
attribute (what ``AGUIServer.urls`` mounts) and reading the server's ``conversation_store``
and ``attachment_store``. Each store checks itself (``check(**kwargs)``, the
``persistence.ChecksItself`` capability, Django's ``Field.check()`` habit): this module knows
no store. A wrapper (``ScopedConversationStore``) forwards to the store it wraps. The cache a
run store keeps its records in is read from its declared features (``cache_alias``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core import checks
from django.urls import URLPattern, URLResolver, get_resolver

from django_pydantic_agent.persistence.base import store_checks, wrapped_stores
from django_pydantic_agent.persistence.features import store_features
from django_pydantic_agent.persistence.session import SESSION_MIDDLEWARE_CHECK_ID

__all__ = [
    "E001",
    "E002",
    "E003",
    "E004",
    "W001",
    "W002",
    "check_attachment_storage",
    "check_mounted_stores",
    "check_run_cache",
    "mounted_servers",
    "mounted_stores",
]

E001 = "django_pydantic_agent.E001"
E002 = "django_pydantic_agent.E002"
E003 = SESSION_MIDDLEWARE_CHECK_ID
E004 = "django_pydantic_agent.E004"
W001 = "django_pydantic_agent.W001"
W002 = "django_pydantic_agent.W002"

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


def mounted_servers() -> list[Any]:
    """Return every AG-UI server the URLconf mounts, once each, in URL order.

    Without ``ROOT_URLCONF`` (a project that only migrates, say) nothing is mounted: the list
    is empty, as Django's own URL checks skip.
    """
    if not getattr(settings, "ROOT_URLCONF", None):
        return []
    servers: dict[int, Any] = {}
    for view in _callbacks(get_resolver().url_patterns):
        server = _server_of(view)
        if server is not None:
            servers.setdefault(id(server), server)
    return list(servers.values())


def mounted_stores() -> list[Any]:
    """Return every store the URLconf's AG-UI servers use, wrappers and wrapped alike.

    Each store appears once, in URL order (empty without ``ROOT_URLCONF``).
    """
    stores: dict[int, Any] = {}
    for server in mounted_servers():
        for attribute in ("conversation_store", "attachment_store"):
            for store in wrapped_stores(getattr(server, attribute, None)):
                stores.setdefault(id(store), store)
    return list(stores.values())


def _as_mounted() -> list[Any]:
    """Every store the URLconf's AG-UI servers were given, once each, in URL order."""
    stores: dict[int, Any] = {}
    for server in mounted_servers():
        for attribute in ("conversation_store", "attachment_store"):
            store = getattr(server, attribute, None)
            if store is not None:
                stores.setdefault(id(store), store)
    return list(stores.values())


def check_mounted_stores(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """What each store mounted in the URLconf reports about itself (E001, E003, ...).

    A message reported twice (one store mounted under two wrappers) is kept once.
    """
    found: list[checks.CheckMessage] = []
    for store in _as_mounted():
        for message in store_checks(store, **kwargs):
            if message not in found:
                found.append(message)
    return found


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


def _shared_cache_hint(check_id: str) -> str:
    return (
        "Use a cache every worker shares, Redis through Django's own backend: CACHES = "
        "{'default': {'BACKEND': 'django.core.cache.backends.redis.RedisCache', 'LOCATION': "
        "'redis://127.0.0.1:6379/0'}} (see the deployment guide). If this project is served "
        f"by one process only, add {check_id!r} to SILENCED_SYSTEM_CHECKS."
    )


def _name(server: Any) -> str:
    return f"AGUIServer (namespace {getattr(getattr(server, 'mount', None), 'namespace', '?')!r})"


def _run_cache_aliases(server: Any) -> list[str]:
    """The cache aliases ``server``'s durable runs use (cancel intents, relay, run records)."""
    aliases = ["default"]
    store_alias = store_features(getattr(server, "run_store", None)).cache_alias
    if isinstance(store_alias, str) and store_alias not in aliases:
        aliases.append(store_alias)
    return aliases


def check_run_cache(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """W001 and E004: durable runs served over a cache that workers cannot share."""
    if settings.DEBUG:
        return []
    from django.core.cache import caches
    from django.core.cache.backends.dummy import DummyCache
    from django.core.cache.backends.locmem import LocMemCache

    found: list[checks.CheckMessage] = []
    reported: set[str] = set()
    for server in mounted_servers():
        if getattr(server, "coordinator", None) is None:
            continue  # stateless: nothing of a run outlives its request
        for alias in _run_cache_aliases(server):
            if alias in reported or alias not in settings.CACHES:
                continue
            try:
                cache = caches[alias]
            except Exception:  # Django's own cache checks report a broken backend
                continue
            backend = f"{type(cache).__module__}.{type(cache).__qualname__}"
            if isinstance(cache, DummyCache):
                reported.add(alias)
                found.append(
                    checks.Error(
                        f"Durable runs are served over CACHES[{alias!r}] ({backend}), which "
                        "keeps nothing: cancel intents and the live tail relayed between "
                        "workers are lost (and, for stores without run tables, the run records "
                        "themselves), so a cancel or reattach on another worker never reaches "
                        "the run.",
                        hint=_shared_cache_hint(E004),
                        obj=_name(server),
                        id=E004,
                    )
                )
            elif isinstance(cache, LocMemCache):
                reported.add(alias)
                found.append(
                    checks.Warning(
                        f"Durable runs are served over CACHES[{alias!r}] ({backend}), a "
                        "per-process cache: with several worker processes, a cancel or "
                        "reattach sent to another worker will not reach the run.",
                        hint=_shared_cache_hint(W001),
                        obj=_name(server),
                        id=W001,
                    )
                )
    return found
