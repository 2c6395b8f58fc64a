"""The example's throttle: a fixed one-minute window per user, counted in Django's cache.

``AGUIServer(throttle=...)`` calls it for every run and upload, after authentication and
before the body is read; a number it returns is the 429's ``Retry-After``. The default
locmem cache counts per process: with several workers, configure Redis or Memcached.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.core.cache import cache
from django.http import HttpRequest

__all__ = ["per_user_per_minute"]

_WINDOW = 60


def per_user_per_minute(limit: int) -> Callable[[HttpRequest], float | None] | None:
    """A throttle allowing ``limit`` requests per user and minute; ``None`` when ``limit`` is 0."""
    if limit < 0:
        raise ValueError(f"limit={limit!r} is not valid: pass 0 (no throttle) or more.")
    if limit == 0:
        return None

    def throttle(request: HttpRequest) -> float | None:
        now = time.time()
        window = int(now // _WINDOW)
        key = f"example-throttle:{request.user.pk}:{window}"
        cache.add(key, 0, timeout=2 * _WINDOW)
        if cache.incr(key) <= limit:
            return None
        return (window + 1) * _WINDOW - now

    return throttle
