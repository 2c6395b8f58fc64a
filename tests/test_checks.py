"""System checks W001 and E004 (durable runs over a cache the workers cannot share), and the
E001 that ``contrib.store``'s stores report."""

from __future__ import annotations

import io
import sys
import types
from collections.abc import Iterator

import pytest
from django.apps import apps
from django.core.management import call_command
from django.test import override_settings
from django.urls import path

from django_pydantic_agent.agui import AccessPolicy, AGUIServer, MountOptions
from django_pydantic_agent.checks import E001, E004, W001, check_run_cache, mounted_servers
from django_pydantic_agent.contrib.store.checks import STORE_APP, store_app_installed
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import DjangoSessionConversationStore
from django_pydantic_agent.persistence.runs import CacheRunStore
from tests.agui.agents import text_agent

LOCMEM = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
DUMMY = {"BACKEND": "django.core.cache.backends.dummy.DummyCache"}
REDIS = {
    "BACKEND": "django.core.cache.backends.redis.RedisCache",
    "LOCATION": "redis://127.0.0.1:6379/15",
}


@pytest.fixture
def durable_mount() -> Iterator[str]:
    """A URLconf mounting one server with durable runs and one stateless server."""
    module = types.ModuleType("tests._durable_mount_urls")
    durable = AGUIServer(
        text_agent(),
        conversation_store=DefaultConversationStore(),
        access=AccessPolicy(csrf_exempt=True),
        mount=MountOptions(namespace="durable"),
    )
    stateless = AGUIServer(
        text_agent(),
        access=AccessPolicy(csrf_exempt=True),
        mount=MountOptions(namespace="stateless"),
    )
    module.urlpatterns = [  # type: ignore[attr-defined]
        path("agent/", durable.urls),
        path("again/", durable.urls),
        path("plain/", stateless.urls),
    ]
    sys.modules[module.__name__] = module
    try:
        yield module.__name__
    finally:
        del sys.modules[module.__name__]


def run_checks(urlconf: str, **settings: object) -> list[object]:
    with override_settings(ROOT_URLCONF=urlconf, **settings):
        return list(check_run_cache())


def test_a_per_process_cache_in_production_warns_and_names_the_fix(durable_mount: str) -> None:
    (warning,) = run_checks(durable_mount, DEBUG=False, CACHES={"default": LOCMEM})
    assert warning.id == W001  # type: ignore[attr-defined]
    assert warning.level == 30  # type: ignore[attr-defined]
    message = warning.msg  # type: ignore[attr-defined]
    assert warning.obj == "AGUIServer (namespace 'durable')"  # type: ignore[attr-defined]
    assert "Durable runs are served over CACHES['default']" in message
    assert "LocMemCache" in message
    assert "a cancel or reattach sent to another worker will not reach the run" in message
    hint = warning.hint  # type: ignore[attr-defined]
    assert "django.core.cache.backends.redis.RedisCache" in hint
    assert "SILENCED_SYSTEM_CHECKS" in hint
    assert W001 in hint


def test_a_dummy_cache_in_production_is_an_error(durable_mount: str) -> None:
    (error,) = run_checks(durable_mount, DEBUG=False, CACHES={"default": DUMMY})
    assert error.id == E004  # type: ignore[attr-defined]
    assert error.level == 40  # type: ignore[attr-defined]
    assert "keeps nothing" in error.msg  # type: ignore[attr-defined]
    assert "SILENCED_SYSTEM_CHECKS" in error.hint  # type: ignore[attr-defined]


def test_a_shared_cache_or_debug_is_clean(durable_mount: str) -> None:
    assert run_checks(durable_mount, DEBUG=False, CACHES={"default": REDIS}) == []
    assert run_checks(durable_mount, DEBUG=True, CACHES={"default": LOCMEM}) == []
    assert run_checks(durable_mount, DEBUG=True, CACHES={"default": DUMMY}) == []


def test_only_servers_with_durable_runs_count() -> None:
    module = types.ModuleType("tests._stateless_urls")
    module.urlpatterns = [  # type: ignore[attr-defined]
        path("plain/", AGUIServer(text_agent(), access=AccessPolicy(csrf_exempt=True)).urls)
    ]
    sys.modules[module.__name__] = module
    try:
        assert run_checks(module.__name__, DEBUG=False, CACHES={"default": LOCMEM}) == []
    finally:
        del sys.modules[module.__name__]


def test_the_cache_run_stores_own_alias_is_checked_too() -> None:
    module = types.ModuleType("tests._session_urls")
    server = AGUIServer(
        text_agent(),
        conversation_store=DjangoSessionConversationStore(),
        run_store=CacheRunStore(alias="runs"),
        access=AccessPolicy(csrf_exempt=True),
    )
    module.urlpatterns = [path("agent/", server.urls)]  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        found = run_checks(
            module.__name__,
            DEBUG=False,
            CACHES={"default": REDIS, "runs": DUMMY, "unused": LOCMEM},
        )
    finally:
        del sys.modules[module.__name__]
    assert [m.id for m in found] == [E004]  # type: ignore[attr-defined]
    assert "CACHES['runs']" in found[0].msg  # type: ignore[attr-defined]


def test_one_finding_per_cache_however_often_it_is_mounted(durable_mount: str) -> None:
    assert len(mounted_servers()) == 0  # tests.urls mounts no AG-UI server
    with override_settings(ROOT_URLCONF=durable_mount):
        assert [s.mount.namespace for s in mounted_servers()] == ["durable", "stateless"]
    assert len(run_checks(durable_mount, DEBUG=False, CACHES={"default": LOCMEM})) == 1


def test_manage_py_check_reports_it_and_silencing_works(durable_mount: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with override_settings(ROOT_URLCONF=durable_mount, DEBUG=False, CACHES={"default": LOCMEM}):
        call_command("check", stdout=out, stderr=err)
    assert W001 in err.getvalue() + out.getvalue()
    out, err = io.StringIO(), io.StringIO()
    with override_settings(
        ROOT_URLCONF=durable_mount,
        DEBUG=False,
        CACHES={"default": LOCMEM},
        SILENCED_SYSTEM_CHECKS=[W001],
    ):
        call_command("check", stdout=out, stderr=err)
    assert W001 not in err.getvalue() + out.getvalue()
    assert "1 silenced" in err.getvalue() + out.getvalue()


def test_the_test_settings_check_clean() -> None:
    out = io.StringIO()
    call_command("check", stdout=out)
    assert "System check identified no issues" in out.getvalue()


def test_contrib_store_reports_e001_for_a_store_whose_app_is_missing() -> None:
    store = object()
    assert store_app_installed(store) == []
    installed = [app.name for app in apps.get_app_configs() if app.name != STORE_APP]
    with override_settings(INSTALLED_APPS=installed):
        [error] = store_app_installed(store)
    assert error.id == E001
    assert error.obj is store
    assert error.msg.startswith(f"object is mounted, but {STORE_APP!r} is not in INSTALLED_APPS")
    assert "migrate" in (error.hint or "")
