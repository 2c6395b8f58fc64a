"""The example project's settings, system checks and ``ensure_demo_user`` command."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from io import StringIO
from pathlib import Path

import pytest
from chat.checks import check_secret_key
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from tests.example_project.support import example_env, manage


def test_manage_py_check_passes_with_the_example_settings(tmp_path: Path) -> None:
    result = manage("check", "--fail-level", "ERROR", env=example_env(tmp_path / "db.sqlite3"))

    assert result.returncode == 0, result.stderr
    # The published development key is pointed out, not silently accepted; nothing else is
    # reported (the library's own checks see contrib.store installed and the storage alias
    # loading).
    assert "example.W001" in result.stderr
    assert "System check identified 1 issue (0 silenced)." in result.stderr


def test_migrate_creates_the_store_tables(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    result = manage("migrate", "--noinput", env=example_env(database))
    assert result.returncode == 0, result.stderr

    # Read back from the database itself (what showmigrations would print, without a second
    # process): every shipped migration of the store app is applied, and its tables exist.
    config = apps.get_app_config("django_pydantic_agent_store")
    shipped = sorted(path.stem for path in (Path(config.path) / "migrations").glob("[0-9]*.py"))
    with closing(sqlite3.connect(database)) as db:
        applied = [
            name
            for (name,) in db.execute(
                "SELECT name FROM django_migrations WHERE app = ? ORDER BY name", (config.label,)
            )
        ]
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    assert applied[0] == "0001_initial"
    assert applied == shipped
    assert {model._meta.db_table for model in config.get_models()} <= tables


DEV_KEY = "development-key"


@pytest.mark.parametrize(
    ("secret_key", "debug", "expected"),
    [
        (DEV_KEY, True, ["example.W001"]),
        (DEV_KEY, False, ["example.E001"]),
        ("a-real-secret-" * 4, False, []),
    ],
)
def test_secret_key_check(secret_key: str, debug: bool, expected: list[str]) -> None:
    with override_settings(SECRET_KEY=secret_key, DEVELOPMENT_SECRET_KEY=DEV_KEY, DEBUG=debug):
        assert [message.id for message in check_secret_key()] == expected


def _ensure(*args: str) -> str:
    out = StringIO()
    call_command("ensure_demo_user", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def chat_app(example_urls: None) -> None:
    """The example's chat app installed, so its management command can be called."""


@pytest.mark.django_db
@pytest.mark.usefixtures("chat_app")
def test_ensure_demo_user_is_idempotent() -> None:
    first = _ensure()
    user = get_user_model().objects.get(username="demo")
    again = _ensure()

    assert "Demo user 'demo' created." in first
    assert "username: demo" in first
    assert "password: demo-password" in first
    assert "Demo user 'demo' already up to date." in again
    assert get_user_model().objects.filter(username="demo").count() == 1
    assert get_user_model().objects.get(username="demo").password == user.password
    assert user.check_password("demo-password")


@pytest.mark.django_db
@pytest.mark.usefixtures("chat_app")
def test_ensure_demo_user_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEMO_USERNAME", "alice")
    monkeypatch.setenv("DEMO_PASSWORD", "wonder-land")

    created = _ensure()
    changed = _ensure("--password", "other-pass")

    assert "Demo user 'alice' created." in created
    assert "password: wonder-land" in created
    assert "Demo user 'alice' updated." in changed
    assert get_user_model().objects.get(username="alice").check_password("other-pass")


@pytest.mark.django_db
@pytest.mark.usefixtures("chat_app")
def test_ensure_demo_user_reactivates_a_disabled_account() -> None:
    get_user_model().objects.create_user("demo", password="demo-password", is_active=False)

    output = _ensure("--username", "demo")

    assert "Demo user 'demo' updated." in output
    assert get_user_model().objects.get(username="demo").is_active


# --- the demo admin -----------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("chat_app")
def test_ensure_demo_user_keeps_a_demo_admin_that_can_open_the_admin(client: Client) -> None:
    with override_settings(DEMO_ADMIN=True):
        first = _ensure()
        again = _ensure("--base-url", "http://127.0.0.1:9000/")

    assert "Demo user 'demo' created." in first
    assert "Demo admin 'admin' created." in first
    assert "password: admin-password" in first
    assert "admin: http://127.0.0.1:8000/admin/" in first
    assert "Demo admin 'admin' already up to date." in again
    assert "admin: http://127.0.0.1:9000/admin/" in again
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_staff
    assert admin.is_superuser
    assert not get_user_model().objects.get(username="demo").is_staff
    assert client.login(username="admin", password="admin-password")
    page = client.get("/admin/django_pydantic_agent_store/storedagentrun/")
    assert page.status_code == 200


@pytest.mark.django_db
@pytest.mark.usefixtures("chat_app")
def test_ensure_demo_user_restores_a_demoted_demo_admin() -> None:
    get_user_model().objects.create_user("admin", password="admin-password", is_staff=False)

    with override_settings(DEMO_ADMIN=True):
        output = _ensure()

    assert "Demo admin 'admin' updated." in output
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_staff
    assert admin.is_superuser


@pytest.mark.django_db
@pytest.mark.usefixtures("chat_app")
def test_no_demo_admin_without_the_setting() -> None:
    with override_settings(DEMO_ADMIN=False):
        output = _ensure()

    assert "admin" not in output
    assert not get_user_model().objects.filter(username="admin").exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("chat_app")
def test_the_demo_user_cannot_take_the_demo_admins_name() -> None:
    with override_settings(DEMO_ADMIN=True), pytest.raises(CommandError, match="--username"):
        _ensure("--username", "admin")

    assert not get_user_model().objects.exists()


def test_the_demo_admin_follows_debug_in_the_example_settings(tmp_path: Path) -> None:
    database = tmp_path / "db.sqlite3"
    assert manage("migrate", "--noinput", env=example_env(database)).returncode == 0

    deployed = manage("ensure_demo_user", env=example_env(database, DJANGO_DEBUG="0"))
    demo = manage("ensure_demo_user", env=example_env(database))

    assert deployed.returncode == 0, deployed.stderr
    assert "admin" not in deployed.stdout
    assert demo.returncode == 0, demo.stderr
    assert "Demo admin 'admin' created." in demo.stdout
    assert "admin: http://127.0.0.1:8000/admin/" in demo.stdout


def test_the_example_reads_its_webhook_settings_from_the_environment(tmp_path: Path) -> None:
    show = "from example_project.urls import server; w = server.webhooks; print(w.url, w.events)"
    hook = {"AGENT_WEBHOOK_URL": "http://127.0.0.1:8765/hooks"}
    hook["AGENT_WEBHOOK_SECRET"] = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    database = tmp_path / "db.sqlite3"
    allowed = manage(
        "shell", "-c", show, env=example_env(database, AGENT_WEBHOOK_ALLOW_LOOPBACK="1", **hook)
    )
    refused = manage("shell", "-c", show, env=example_env(database, **hook))
    none = manage(
        "shell",
        "-c",
        "from example_project.urls import server; print(server.webhooks)",
        env=example_env(database),
    )

    assert allowed.returncode == 0, allowed.stderr
    assert "('http://127.0.0.1:8765/hooks',)" in allowed.stdout
    assert refused.returncode != 0
    assert "WebhookTargetError" in refused.stderr
    assert "loopback" in refused.stderr
    assert hook["AGENT_WEBHOOK_SECRET"] not in refused.stderr + allowed.stdout
    assert none.stdout.strip().splitlines()[-1] == "None"
