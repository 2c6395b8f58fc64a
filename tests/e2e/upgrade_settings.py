"""Settings for ``tests/e2e/test_upgrade.py``'s subprocesses: our package on a given database.

``UPGRADE_DATABASE_URL`` names the database the predecessor filled, ``UPGRADE_MEDIA`` the
directory its attachment bytes are in (the ``django_pydantic_agent_attachments`` alias).
"""

from __future__ import annotations

import os

import dj_database_url

SECRET_KEY = "upgrade-e2e-not-secret"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django_pydantic_agent",
    "django_pydantic_agent.contrib.store",
]
DATABASES = {"default": dj_database_url.parse(os.environ["UPGRADE_DATABASE_URL"])}
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "django_pydantic_agent_attachments": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": os.environ.get("UPGRADE_MEDIA", "/nonexistent")},
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "tests.e2e.upgrade_settings"
urlpatterns: list[object] = []
