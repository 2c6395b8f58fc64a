"""Settings for ``python -m bench``: a throwaway SQLite file (or ``DATABASE_URL``) and a
throwaway filesystem directory for attachment blobs, both under ``BENCH_DIR``.

``BENCH_SQLITE_DEFAULTS`` drops the SQLite ``OPTIONS`` (Django's defaults); ``BENCH_SQLITE_WAL``
adds WAL to them.

``BENCH_DIR`` is created when missing and kept; without it a temporary directory is used and
removed when the process exits.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

if os.environ.get("BENCH_DIR"):
    BENCH_DIR = Path(os.environ["BENCH_DIR"])
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
else:
    BENCH_DIR = Path(tempfile.mkdtemp(prefix="dpa-bench-"))
    atexit.register(shutil.rmtree, BENCH_DIR, ignore_errors=True)

SECRET_KEY = "bench-only-not-secret"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django_pydantic_agent",
    "django_pydantic_agent.contrib.store",
    "django_pydantic_agent.contrib.memory_service_emulator",
]
ROOT_URLCONF = "bench.urls"
_database_url = os.environ.get("DATABASE_URL")
if _database_url:
    import dj_database_url

    DATABASES = {"default": dj_database_url.parse(_database_url)}
else:
    # ``BENCH_DB`` names another file in BENCH_DIR: the emulator's, so a Memory Service
    # write never waits for this package's lock. IMMEDIATE and a timeout, as a deployment on
    # SQLite needs (docs/contrib-store.md): a writer waits its turn instead of failing.
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(BENCH_DIR / os.environ.get("BENCH_DB", "bench.sqlite3")),
            "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20},
        }
    }
    if os.environ.get("BENCH_SQLITE_DEFAULTS"):
        # Django's defaults, as ``startproject`` writes them (``bench.sqlite_defaults``): no
        # OPTIONS, so deferred transactions, sqlite3's 5 s timeout and a rollback journal.
        del DATABASES["default"]["OPTIONS"]
    elif os.environ.get("BENCH_SQLITE_WAL"):
        # The served sites (``bench.live.served``) run as the example project does (``make
        # demo``), with WAL as well: a commit appends to the log instead of writing, syncing
        # and deleting a rollback journal. WAL belongs to the file, so the in-process suites
        # that follow a served one use it too; the store suite, which compares ``save()`` with
        # 0.28.3, runs first, on the rollback journal 0.28.3's side also runs on.
        DATABASES["default"]["OPTIONS"]["init_command"] = (
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
        )
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "django_pydantic_agent_attachments": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(BENCH_DIR / "blobs")},
    },
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
