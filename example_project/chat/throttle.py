"""The example's throttle: a sliding one-minute window per user, counted in Django's cache.

``AccessPolicy(throttle=...)`` calls it for every run and upload, after authentication and
before the body is read; a number it returns is the 429's ``Retry-After``. The default
locmem cache counts per process: with several workers, configure Redis or Memcached.

The window slides: the requests of the previous clock minute still count, weighted by how
much of that minute is still inside the last 60 seconds. A fixed window would let a client
send ``limit`` requests in the last second of one minute and ``limit`` more in the first
second of the next; this one does not, and each request is still one atomic ``incr``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.core.cache import cache
from django.http import HttpRequest

__all__ = ["per_user_per_minute"]

_WINDOW = 60


def per_user_per_minute(limit: int) -> Callable[[HttpRequest], float | None] | None:
    """A throttle allowing about ``limit`` requests per user in any 60 seconds; ``None`` at 0."""
    if limit < 0:
        raise ValueError(f"limit={limit!r} is not valid: pass 0 (no throttle) or more.")
    if limit == 0:
        return None

    def throttle(request: HttpRequest) -> float | None:
        now = time.time()
        minute, elapsed = divmod(now, _WINDOW)
        prefix = f"example-throttle:{request.user.pk}:"
        key = f"{prefix}{int(minute)}"
        earlier = cache.get(f"{prefix}{int(minute) - 1}", 0)
        cache.add(key, 0, timeout=2 * _WINDOW)
        count = cache.incr(key)
        if earlier * (1 - elapsed / _WINDOW) + count <= limit:
            return None
        cache.decr(key)  # a refused request is not counted against the next one
        return _wait(earlier, count, elapsed, limit)

    return throttle


def _wait(earlier: int, count: int, elapsed: float, limit: int) -> float:
    """Seconds until a request that would be this minute's ``count``-th fits in the window."""
    if count <= limit:
        # This minute has room: wait until enough of the previous one has slid out.
        return _WINDOW * (1 - (limit - count) / earlier) - elapsed
    # This minute is full: its requests are next minute's "earlier", and the retry its first.
    return _WINDOW - elapsed + _WINDOW * (1 - (limit - 1) / (count - 1))
