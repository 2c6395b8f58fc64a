"""Settings of the reliability site (see ``__init__.py``), read from the environment.

``RELIABILITY_DATABASE_URL``
    Any database ``dj_database_url`` parses (PostgreSQL in the suite). Unset: the SQLite file
    ``RELIABILITY_SQLITE``, with the example project's options (``IMMEDIATE`` transactions, a
    20 s lock timeout, WAL), which is what a SQLite deployment should run with.
``RELIABILITY_DELTA_DELAY``
    Seconds the scripted model pauses after each streamed delta (default ``0.005``).
"""

from __future__ import annotations

import os

SECRET_KEY = "reliability-suite-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django_pydantic_agent",
    "django_pydantic_agent.contrib.store",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.reliability.project.urls"

_database_url = os.environ.get("RELIABILITY_DATABASE_URL", "")
if _database_url:
    import dj_database_url

    DATABASES = {"default": dj_database_url.parse(_database_url)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ["RELIABILITY_SQLITE"],
            # The example project's options (example_project/example_project/settings.py).
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

RELIABILITY_DELTA_DELAY = float(os.environ.get("RELIABILITY_DELTA_DELAY") or 0.005)

# Warnings and errors (with their tracebacks) go to stderr, which the tests read.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
