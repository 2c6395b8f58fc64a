"""System checks E001-E003, found by walking the URLconf for mounted AG-UI servers, and W002
(the SQLite options of the database ``contrib.store`` writes to)."""

from __future__ import annotations

import functools
import io
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings as django_settings
from django.contrib.sessions.middleware import SessionMiddleware
from django.core import checks
from django.core.management import call_command
from django.http import HttpRequest, HttpResponse
from django.test import override_settings
from django.urls import include, path
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from django_pydantic_agent.agui import AccessPolicy, AGUIServer
from django_pydantic_agent.checks import (
    E001,
    E002,
    E003,
    W002,
    check_attachment_storage,
    check_mounted_stores,
    mounted_stores,
)
from django_pydantic_agent.contrib.store.checks import STORE_APP, check_sqlite_options
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from django_pydantic_agent.persistence import (
    DjangoSessionConversationStore,
    NullAttachmentStore,
    ScopedConversationStore,
)

Mount = Callable[..., None]


def fake_view(server: Any) -> Callable[[HttpRequest], HttpResponse]:
    def view(request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    view.agui_server = server  # type: ignore[attr-defined]
    return view


def server(conversations: Any = None, attachments: Any = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(conversation_store=conversations, attachment_store=attachments)


@pytest.fixture
def mount() -> Iterator[Mount]:
    """Install a throwaway ROOT_URLCONF whose patterns are the given ones."""
    overrides: list[override_settings] = []

    def install(*patterns: Any) -> None:
        module = types.ModuleType("tests_store_checks_urls")
        module.urlpatterns = [  # type: ignore[attr-defined]
            path("plain/", lambda request: HttpResponse()),
            *patterns,
        ]
        sys.modules[module.__name__] = module
        override = override_settings(ROOT_URLCONF=module.__name__)
        override.enable()
        overrides.append(override)

    yield install
    for override in reversed(overrides):
        override.disable()
    sys.modules.pop("tests_store_checks_urls", None)


def ids(messages: list[checks.CheckMessage]) -> list[str | None]:
    return [message.id for message in messages]


def test_nothing_to_report_for_a_correct_setup(mount: Mount) -> None:
    mount(path("a/", fake_view(server(DefaultConversationStore(), DefaultAttachmentStore()))))
    assert check_mounted_stores() == []
    assert check_attachment_storage() == []


def test_e001_default_stores_without_the_app(mount: Mount) -> None:
    conversations = DefaultConversationStore()
    attachments = DefaultAttachmentStore()
    nested = [path("b/", fake_view(server(ScopedConversationStore(conversations, scope="x"))))]
    mount(path("a/", fake_view(server(None, attachments))), path("n/", include(nested)))
    installed = [app.name for app in apps.get_app_configs()]

    with override_settings(
        INSTALLED_APPS=[name for name in installed if name != "django_pydantic_agent.contrib.store"]
    ):
        errors = check_mounted_stores()

    assert ids(errors) == [E001, E001]
    assert {error.obj for error in errors} == {conversations, attachments}
    assert "INSTALLED_APPS" in errors[0].msg
    assert "migrate" in (errors[0].hint or "")


def test_e003_session_store_without_session_middleware(mount: Mount, settings: Any) -> None:
    session_store = DjangoSessionConversationStore()
    wrapped = functools.wraps(fake_view(server(session_store)))(lambda request: HttpResponse())
    mount(path("s/", wrapped))
    assert check_mounted_stores() == []

    settings.MIDDLEWARE = [
        m for m in settings.MIDDLEWARE if not m.endswith("SessionMiddleware")
    ] + ["no.such.Middleware"]
    errors = check_mounted_stores()

    assert ids(errors) == [E003]
    assert errors[0].obj is session_store
    assert "SessionMiddleware" in (errors[0].hint or "")


def test_e003_accepts_a_session_middleware_subclass(mount: Mount, settings: Any) -> None:
    mount(path("s/", fake_view(server(DjangoSessionConversationStore()))))
    settings.MIDDLEWARE = ["tests.contrib.store.test_checks.CustomSessionMiddleware"]
    assert check_mounted_stores() == []


class CustomSessionMiddleware(SessionMiddleware):
    pass


def test_e002_broken_attachment_alias(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "django_pydantic_agent_attachments": {"BACKEND": "no.such.Storage"},
    }
    [error] = check_attachment_storage()
    assert error.id == E002
    assert "'no.such.Storage'" in error.msg


def test_e002_working_alias_is_fine(settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "django_pydantic_agent_attachments": {
            "BACKEND": "django.core.files.storage.InMemoryStorage"
        },
    }
    assert check_attachment_storage() == []


def test_real_agui_server_mount_is_found(mount: Mount) -> None:
    conversations = DefaultConversationStore()
    agui = AGUIServer(
        Agent(TestModel()),
        conversation_store=ScopedConversationStore(conversations, scope="web"),
        attachment_store=NullAttachmentStore(),
        access=AccessPolicy(csrf_exempt=False),
    )
    mount(path("agent/", agui.urls))

    stores = mounted_stores()

    assert conversations in stores
    assert any(isinstance(store, ScopedConversationStore) for store in stores)
    assert len(stores) == len({id(store) for store in stores})


def test_checks_are_registered_and_run_by_manage_check(mount: Mount, settings: Any) -> None:
    settings.STORAGES = {
        **settings.STORAGES,
        "django_pydantic_agent_attachments": {"BACKEND": "no.such.Storage"},
    }
    assert E002 in ids(checks.run_checks())


def test_a_project_without_root_urlconf_has_no_mounted_servers_and_checks_pass() -> None:
    # Django itself runs without ROOT_URLCONF (e.g. a worker that only migrates); our checks
    # run on ``check`` and ``migrate`` and must not crash there.
    out = io.StringIO()
    with override_settings():
        del django_settings.ROOT_URLCONF
        assert not hasattr(django_settings, "ROOT_URLCONF")
        assert mounted_stores() == []
        assert check_mounted_stores() == []
        call_command("check", stdout=out)
    assert "System check identified no issues" in out.getvalue()


_WITHOUT_THE_APP = """
import django
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.test import RequestFactory

import tests.settings as base

overrides = {name: getattr(base, name) for name in dir(base) if name.isupper()}
overrides["INSTALLED_APPS"] = [
    app for app in base.INSTALLED_APPS if app != "django_pydantic_agent.contrib.store"
]
settings.configure(**overrides)
django.setup()

from django_pydantic_agent.contrib.store.harness import DefaultMemoryStore, DefaultStepStore

for store in (DefaultStepStore, DefaultMemoryStore):
    try:
        store(RequestFactory().get("/"))
    except ImproperlyConfigured as exc:
        print(exc)
"""


def test_harness_stores_without_the_app_refuse_at_construction() -> None:
    """Regression: E001 sees only mounted conversation/attachment stores; the harness stores
    failed at import with Django's generic RuntimeError, or at the first query."""
    pytest.importorskip(
        "pydantic_ai_harness",
        reason='needs the harness extra: pip install -e ".[harness]"',
    )
    import subprocess
    from pathlib import Path

    from django.core.exceptions import ImproperlyConfigured

    from django_pydantic_agent.contrib.store.harness import DefaultMemoryStore, DefaultStepStore

    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_THE_APP],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["DefaultStepStore", "DefaultMemoryStore"]
    assert all(
        "'django_pydantic_agent.contrib.store', which is not in INSTALLED_APPS: add" in line
        for line in lines
    )

    installed = [app.name for app in apps.get_app_configs()]
    with override_settings(
        INSTALLED_APPS=[name for name in installed if name != "django_pydantic_agent.contrib.store"]
    ):
        for store in (DefaultStepStore, DefaultMemoryStore):
            with pytest.raises(ImproperlyConfigured, match="run migrate"):
                store(HttpRequest())
    assert DefaultMemoryStore(HttpRequest()) is not None  # installed again: fine


# -- W002: the SQLite options of contrib.store's database ------------------------------------


class StoreElsewhere:
    """Sends ``contrib.store``'s rows to the alias ``store``."""

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return "store" if model._meta.app_label == "django_pydantic_agent_store" else None


@pytest.fixture
def sqlite_default() -> dict[str, Any]:
    if "sqlite" not in django_settings.DATABASES["default"]["ENGINE"]:
        pytest.skip("W002 concerns SQLite; this database is not.")
    return django_settings.DATABASES["default"]


@pytest.mark.django_db
def test_w002_djangos_default_sqlite_options_warn_through_manage_py_check(
    sqlite_default: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert W002 not in ids(checks.run_checks())  # the suite's settings: IMMEDIATE, 20 s
    monkeypatch.setitem(sqlite_default, "OPTIONS", {})  # as startproject writes it

    [warning] = [m for m in checks.run_checks() if m.id == W002]

    assert warning.level == checks.WARNING
    assert warning.msg.startswith("DATABASES['default'] is SQLite without")
    assert '"transaction_mode": "IMMEDIATE"' in warning.msg
    assert '"timeout": 20' in warning.msg
    assert "Concurrent runs write to it" in warning.msg
    assert '"database is locked"' in warning.msg
    assert """DATABASES['default']["OPTIONS"]""" in (warning.hint or "")
    out, err = io.StringIO(), io.StringIO()
    call_command("check", stdout=out, stderr=err)
    assert f"({W002})" in err.getvalue()


@pytest.mark.parametrize(
    ("options", "warns"),
    [
        ({"transaction_mode": "IMMEDIATE", "timeout": 20}, False),
        ({"transaction_mode": "immediate", "timeout": 5, "init_command": "PRAGMA x;"}, False),
        ({"transaction_mode": "IMMEDIATE"}, True),
        ({"timeout": 20}, True),
        ({"transaction_mode": "EXCLUSIVE", "timeout": 20}, True),
        ({"transaction_mode": None, "timeout": 20}, True),
    ],
)
def test_w002_needs_both_options(
    sqlite_default: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, Any],
    warns: bool,
) -> None:
    monkeypatch.setitem(sqlite_default, "OPTIONS", options)
    assert ids(check_sqlite_options()) == ([W002] if warns else [])


def test_w002_looks_at_the_database_the_routers_send_the_rows_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not at ``default``'s, which may be PostgreSQL (a second leg of the suite) or anything."""
    monkeypatch.setitem(
        django_settings.DATABASES,
        "store",
        {"ENGINE": "django.db.backends.sqlite3", "NAME": "store.sqlite3", "OPTIONS": {}},
    )
    router = f"{__name__}.StoreElsewhere"
    with override_settings(DATABASE_ROUTERS=[router]):
        [warning] = check_sqlite_options()
        assert warning.msg.startswith("DATABASES['store'] is SQLite")
        monkeypatch.setitem(
            django_settings.DATABASES["store"], "ENGINE", "django.db.backends.postgresql"
        )
        assert check_sqlite_options() == []
        monkeypatch.setitem(django_settings.DATABASES["store"], "ENGINE", "")
        assert check_sqlite_options() == []
        monkeypatch.delitem(django_settings.DATABASES, "store")  # Django reports that one
        assert check_sqlite_options() == []


def test_w002_is_contrib_stores_only(
    sqlite_default: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sqlite_default, "OPTIONS", {})
    installed = [app.name for app in apps.get_app_configs() if app.name != STORE_APP]
    with override_settings(INSTALLED_APPS=installed):
        assert check_sqlite_options() == []
