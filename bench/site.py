"""The project ``bench.http`` serves under uvicorn: ``DJANGO_SETTINGS_MODULE=bench.site``.

It is ``bench.settings`` (the same SQLite file under ``BENCH_DIR``, or ``DATABASE_URL``) plus
these mounts of one agent, a pydantic-ai ``FunctionModel`` that streams ``BENCH_DELTAS``
(2,000) text deltas with no delay:

``off/``      ``NullConversationStore``: persistence off, the stateless stream
``default/``  ``DefaultConversationStore`` and ``DefaultAttachmentStore`` (uploads to 64 MB); the
              same server's AI SDK routes at ``default-chat`` (``VercelAITransport``)
``ms/``       ``MemoryServiceConversationStore`` on the emulator at ``BENCH_EMULATOR``
``ms20/``     the same, through a transport that adds 20 ms to every request
``slow/``     ``DefaultConversationStore``, a model that streams a delta every 10 ms for a
              minute: the live run that reattach and cancel measure (and ``slow-chat``, the
              AI SDK's resume)
``short/``    ``DefaultConversationStore``, a model answering with 5 deltas: the run path's
              append cost
``capacity/`` ``DefaultConversationStore``, the example project's scripted model at
              ``BENCH_WORD_DELAY`` (0.02) seconds a word: one worker's capacity

``api/v2/memory/`` is the emulator. Every mount authenticates the user ``bench`` (created by
``bench.http``) and is CSRF-exempt. ``REDIS_URL`` makes Django's cache a ``RedisCache`` (with
``BENCH_CACHE_PREFIX``), so two workers share cancel intents.
"""

from __future__ import annotations

import os

from bench.settings import *  # noqa: F403

ROOT_URLCONF = "bench.site_urls"
BENCH_DELTAS = int(os.environ.get("BENCH_DELTAS", "2000"))
BENCH_UPLOAD_MAX_BYTES = 64 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = None
FILE_UPLOAD_MAX_MEMORY_SIZE = 2_621_440  # Django's default: larger uploads spool to disk

if os.environ.get("REDIS_URL"):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": os.environ["REDIS_URL"],
            "KEY_PREFIX": os.environ.get("BENCH_CACHE_PREFIX", "dpa-bench"),
        }
    }

# Server errors (a 500) are printed with their traceback, so a failing run is visible.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["stderr"], "level": "ERROR"}},
}
