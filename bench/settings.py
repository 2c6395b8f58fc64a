"""Settings for ``python -m bench``: a throwaway SQLite file (or ``DATABASE_URL``) and a
throwaway filesystem directory for attachment blobs, both under ``BENCH_DIR``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

BENCH_DIR = Path(os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="dpa-bench-"))

SECRET_KEY = "bench-only-not-secret"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django_pydantic_agent",
    "django_pydantic_agent.contrib.store",
]
_database_url = os.environ.get("DATABASE_URL")
if _database_url:
    import dj_database_url

    DATABASES = {"default": dj_database_url.parse(_database_url)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(BENCH_DIR / "bench.sqlite3"),
        }
    }
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "django_pydantic_agent_attachments": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(BENCH_DIR / "blobs")},
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
