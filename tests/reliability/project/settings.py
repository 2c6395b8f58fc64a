"""Settings of the reliability site (see ``__init__.py``), read from the environment.

``RELIABILITY_DATABASE_URL``
    Any database ``dj_database_url`` parses (PostgreSQL in the suite). Unset: the SQLite file
    ``RELIABILITY_SQLITE``, with the example project's options (``IMMEDIATE`` transactions, a
    20 s lock timeout, WAL), which is what a SQLite deployment should run with.
``RELIABILITY_DELTA_DELAY``
    Seconds the scripted model pauses after each streamed delta (default ``0.005``).
``RELIABILITY_REDIS_URL`` (and ``RELIABILITY_CACHE_PREFIX``)
    Redis as the cache, shared by the site's workers; unset, a per-process ``LocMemCache``.
``RELIABILITY_RUN_HEARTBEAT``, ``RELIABILITY_RUN_LEASE``, ``RELIABILITY_SWEEP_SECONDS``,
``RELIABILITY_DRAIN_SECONDS``, ``RELIABILITY_ON_WORKER_LOSS``
    The mounts' ``run_heartbeat_seconds``, ``run_lease_seconds``, ``sweep_interval_seconds``
    and ``drain_seconds``; unset, ``AGUIServer``'s defaults.
``RELIABILITY_PARK_DIR``
    A folder: runs park where their message says, and say so there (``agent.py``).
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

if os.environ.get("RELIABILITY_REDIS_URL"):
    # Several workers sharing runs (the resume tests): Redis, as docs/deployment.md has it.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": os.environ["RELIABILITY_REDIS_URL"],
            "KEY_PREFIX": os.environ.get("RELIABILITY_CACHE_PREFIX", ""),
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

RELIABILITY_DELTA_DELAY = float(os.environ.get("RELIABILITY_DELTA_DELAY") or 0.005)


def _seconds(name: str) -> float | None:
    value = os.environ.get(name)
    return float(value) if value else None


#: Durable runs of the mounts: heartbeat, lease, sweep and drain seconds; ``None`` (unset)
#: leaves ``AGUIServer``'s default, whatever it is.
RELIABILITY_RUN_HEARTBEAT = _seconds("RELIABILITY_RUN_HEARTBEAT")
RELIABILITY_RUN_LEASE = _seconds("RELIABILITY_RUN_LEASE")
RELIABILITY_SWEEP_SECONDS = _seconds("RELIABILITY_SWEEP_SECONDS")
RELIABILITY_DRAIN_SECONDS = _seconds("RELIABILITY_DRAIN_SECONDS")
#: ``on_worker_loss`` of every mount ("resume" or "error"); unset, the server's default.
RELIABILITY_ON_WORKER_LOSS = os.environ.get("RELIABILITY_ON_WORKER_LOSS") or None
#: A folder: the scripted model parks runs at the point their message names (``agent.py``).
RELIABILITY_PARK_DIR = os.environ.get("RELIABILITY_PARK_DIR", "")

# Warnings and errors (with their tracebacks) go to stderr, which the tests read.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
