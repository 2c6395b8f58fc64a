"""Settings for the example project, read from the environment with safe local defaults.

Environment variables (all optional):

``DJANGO_DEBUG``
    ``1`` (the default, for the demo) or ``0``.
``DJANGO_SECRET_KEY``
    Required for anything but local use; a development key is used (with a system-check
    warning) when it is unset.
``DJANGO_ALLOWED_HOSTS``
    Comma-separated host names; defaults to the loopback names.
``DJANGO_SECURE_COOKIES``
    With ``DEBUG`` off, send the session and CSRF cookies over HTTPS only (default ``1``).
``DATABASE_URL``
    A database URL such as ``postgres://user:password@host:5432/name`` (parsed by
    ``dj-database-url``); unset means SQLite.
``EXAMPLE_DATABASE_PATH``
    The SQLite file when ``DATABASE_URL`` is unset; defaults to ``db.sqlite3`` beside
    ``manage.py``.
``REDIS_URL``
    A Redis URL such as ``redis://127.0.0.1:6379/0``: Django's cache becomes Redis
    (``RedisCache``), shared by every worker: the throttle, run records of cache-backed stores,
    cancel intents and the relayed live runs that a second worker reattaches to. Unset means a
    per-process ``LocMemCache``, which is right for one process only.
``EXAMPLE_CACHE_PREFIX``
    The cache's ``KEY_PREFIX`` (default empty), to keep several projects apart on one Redis.
``EXAMPLE_SERVE_STATIC``
    Serve ``/static/`` from the ASGI application (default ``1``; fine for the demo only).
``EXAMPLE_MEDIA_ROOT``
    Where uploaded files are kept; defaults to ``media/`` beside ``manage.py``. It is never
    served as it is: files go out through ``/agent/attachments/<id>/``, to their owner only.
``AGENT_ATTACHMENT_MAX_BYTES``
    The upload size cap in bytes (default 5 MiB).
``AGENT_MODEL``
    A pydantic-ai model name such as ``openai:gpt-4o``; unset means the scripted demo model.
``DEMO_WORD_DELAY``
    Seconds between the scripted model's words (default ``0.04``).
``DEMO_ADMIN``
    ``1`` makes ``ensure_demo_user`` keep a superuser ``admin`` / ``admin-password`` for
    ``/admin/`` too (default: on while ``DEBUG`` is, off otherwise). Its password is published:
    never turn it on for a site anyone else can reach.
``AGENT_HEARTBEAT_SECONDS``
    Silence after which the stream gets a ``: ping`` comment (default ``15``).
``AGENT_RUN_HEARTBEAT_SECONDS``, ``AGENT_RUN_LEASE_SECONDS``, ``AGENT_SWEEP_SECONDS``
    Durable runs: seconds between a worker's heartbeats, without a heartbeat before its
    worker counts as dead, and between two sweeps that take such runs over (``0`` turns the
    sweeper off). Unset, each keeps ``RunOptions``' default (2, 8 and 5: a dead worker's run
    goes on on another worker within 10 s). See ``docs/deployment.md``.
``AGENT_DRAIN_SECONDS``
    At shutdown (``SIGTERM``), how long the worker lets its runs go on before it hands them
    over to another worker (default ``25``).
``AGENT_ON_WORKER_LOSS``
    A run whose worker drained or died: ``resume`` (another worker runs it on; the default)
    or ``error`` (the sweeper ends it ``errored``).
``AGENT_REQUESTS_PER_MINUTE``
    Runs plus uploads one user may start per minute (default ``30``; ``0`` turns the throttle
    off). Further requests get 429 with ``Retry-After``.
``AGENT_MAX_THREADS``, ``AGENT_MAX_FILES``, ``AGENT_MAX_UPLOAD_BYTES``
    Per-user quotas of the stores: threads (default ``200``), attachments (default ``200``)
    and attachment bytes (default 200 MiB). A request over one gets 413.
``AGENT_STORE``
    Where threads and uploads are kept: ``default`` (contrib.store's tables, the default) or
    ``memory-service`` (the Memory Service stores; see ``chat/stores.py``).
``DATAROBOT_ENDPOINT``, ``DATAROBOT_API_TOKEN``
    With ``AGENT_STORE=memory-service``: a real Memory Service endpoint (ending in ``/api/v2``)
    and its token. Without an endpoint the stores use the emulator mounted in this project.
``AGENT_MEMORY_SPACE``
    The deduplication key of the memory space the stores use (created on first use).
``AGENT_WEBHOOK_URL``, ``AGENT_WEBHOOK_SECRET``, ``AGENT_WEBHOOK_ALLOW_LOOPBACK``
    Where run and thread events are posted (``docs/webhooks.md``; none without a URL), the
    ``whsec_...`` secret that signs them, and whether a loopback URL (a local receiver) is
    allowed (default off).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name, "")
    items = [item.strip() for item in value.split(",") if item.strip()]
    return items or default


def _env_seconds(name: str) -> float | None:
    value = os.environ.get(name, "").strip()
    return float(value) if value else None


#: The key used when ``DJANGO_SECRET_KEY`` is unset; the ``example.W001`` check warns about it.
DEVELOPMENT_SECRET_KEY = "django-insecure-example-project-development-key-do-not-deploy"

DEBUG = _env_flag("DJANGO_DEBUG", True)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or DEVELOPMENT_SECRET_KEY
ALLOWED_HOSTS = _env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_pydantic_agent",
    # Tables, admin and maintenance commands behind DefaultConversationStore and
    # DefaultAttachmentStore (``manage.py migrate`` creates them).
    "django_pydantic_agent.contrib.store",
    "django_pydantic_agent.contrib.memory_service_emulator",
    # The chat page: its template, ES modules and CSS (chat/templates only adds the example's
    # own account menu, greeting and login page).
    "django_pydantic_agent.contrib.chat",
    "chat",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
ASGI_APPLICATION = "example_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES: dict[str, Any] = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("EXAMPLE_DATABASE_PATH") or str(BASE_DIR / "db.sqlite3"),
        # Concurrent runs write to the same file. IMMEDIATE takes the write lock when a
        # transaction begins, so a writer waits its turn (up to ``timeout`` seconds) instead of
        # failing with "database is locked"; WAL lets reads go on while one writes.
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }
}

if os.environ.get("DATABASE_URL", "").strip():
    # Several worker processes on one database (docs/deployment.md).
    import dj_database_url

    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"].strip())}

_REDIS_URL = os.environ.get("REDIS_URL", "").strip()
CACHES: dict[str, Any] = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache"
        if _REDIS_URL
        else "django.core.cache.backends.locmem.LocMemCache",
        "KEY_PREFIX": os.environ.get("EXAMPLE_CACHE_PREFIX", "").strip(),
        **({"LOCATION": _REDIS_URL} if _REDIS_URL else {}),
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
#: Serve static files from the ASGI application itself (no collectstatic, no web server).
#: Fine for the demo; put a web server or WhiteNoise in front for anything else.
EXAMPLE_SERVE_STATIC = _env_flag("EXAMPLE_SERVE_STATIC", True)

#: Uploaded files. Nothing here is served under a public URL: the AG-UI server's
#: ``attachments/<id>/`` route streams each file to its owner only.
MEDIA_ROOT = Path(os.environ.get("EXAMPLE_MEDIA_ROOT") or BASE_DIR / "media")

STORAGES = {
    "default": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": MEDIA_ROOT},
    },
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    # DefaultAttachmentStore keeps its files under this alias (and never falls back to default
    # storage if the alias is broken). In production, point it at a private bucket.
    "django_pydantic_agent_attachments": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {
            "location": MEDIA_ROOT / "attachments",
            "file_permissions_mode": 0o600,
            "directory_permissions_mode": 0o700,
        },
    },
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # the chat page reads the token from the cookie for X-CSRFToken
SESSION_COOKIE_SECURE = not DEBUG and _env_flag("DJANGO_SECURE_COOKIES", True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

AGENT_MODEL = os.environ.get("AGENT_MODEL", "").strip()
DEMO_WORD_DELAY = float(os.environ.get("DEMO_WORD_DELAY", "0.04"))
#: ``ensure_demo_user`` keeps the demo admin account (``admin`` / ``admin-password``) too.
DEMO_ADMIN = _env_flag("DEMO_ADMIN", DEBUG)
AGENT_HEARTBEAT_SECONDS = float(os.environ.get("AGENT_HEARTBEAT_SECONDS", "15"))
#: Durable runs: heartbeat, lease (a run silent that long is dead) and sweep interval, seconds;
#: ``None`` (unset) keeps ``RunOptions``' default.
AGENT_RUN_HEARTBEAT_SECONDS = _env_seconds("AGENT_RUN_HEARTBEAT_SECONDS")
AGENT_RUN_LEASE_SECONDS = _env_seconds("AGENT_RUN_LEASE_SECONDS")
AGENT_SWEEP_SECONDS = _env_seconds("AGENT_SWEEP_SECONDS")
#: At shutdown, seconds the worker's runs get to finish before they are handed over.
AGENT_DRAIN_SECONDS = float(os.environ.get("AGENT_DRAIN_SECONDS") or 25)
#: ``resume`` or ``error``; empty: the server's default (resume where the store can).
AGENT_ON_WORKER_LOSS = os.environ.get("AGENT_ON_WORKER_LOSS", "").strip() or None
#: Signed webhooks of runs and deleted threads (``urls.py``): none without a URL.
AGENT_WEBHOOK_URL = os.environ.get("AGENT_WEBHOOK_URL", "").strip()
AGENT_WEBHOOK_SECRET = os.environ.get("AGENT_WEBHOOK_SECRET", "").strip()
AGENT_WEBHOOK_ALLOW_LOOPBACK = _env_flag("AGENT_WEBHOOK_ALLOW_LOOPBACK", False)
#: Uploads: at most this many bytes, of these types (``AGUIServer`` enforces both; the ASGI
#: wrapper in ``asgi.py`` refuses an oversized body before Django reads it).
AGENT_ATTACHMENT_MAX_BYTES = int(os.environ.get("AGENT_ATTACHMENT_MAX_BYTES") or 5 * 1024 * 1024)
AGENT_ATTACHMENT_TYPES = ("text/*", "image/*", "application/pdf", "application/json")
#: Runs plus uploads per user and minute (``chat.throttle``); 0 turns the throttle off.
AGENT_REQUESTS_PER_MINUTE = int(os.environ.get("AGENT_REQUESTS_PER_MINUTE") or 30)
#: Per-user quotas of ``DefaultConversationStore`` and ``DefaultAttachmentStore`` (413 over).
AGENT_MAX_THREADS = int(os.environ.get("AGENT_MAX_THREADS") or 200)
AGENT_MAX_FILES = int(os.environ.get("AGENT_MAX_FILES") or 200)
AGENT_MAX_UPLOAD_BYTES = int(os.environ.get("AGENT_MAX_UPLOAD_BYTES") or 200 * 1024 * 1024)

#: Where threads and uploads live (``chat.stores.build_stores``).
#: ``manage.py check`` (and the first request) refuse any other value than the two below.
AGENT_STORE = os.environ.get("AGENT_STORE", "").strip().lower() or "default"
#: ``memory-service`` only: a real endpoint and token; no endpoint means the emulator mounted
#: here (``/api/v2/memory/``), reached in process.
AGENT_MEMORY_SERVICE_ENDPOINT = os.environ.get("DATAROBOT_ENDPOINT", "").strip()
AGENT_MEMORY_SERVICE_TOKEN = os.environ.get("DATAROBOT_API_TOKEN", "").strip()
AGENT_MEMORY_SPACE = os.environ.get("AGENT_MEMORY_SPACE", "").strip() or "example-project-chat"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {
        "django": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # One line per Memory Service request (AGENT_STORE=memory-service) is too chatty.
        "httpx": {"level": "WARNING"},
    },
}
