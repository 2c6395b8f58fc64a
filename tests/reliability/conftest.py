"""The reliability suite: ``pytest -m reliability`` (``make test-reliability``, and CI).

Every test module here sets ``pytestmark = pytest.mark.reliability``. Each test is bounded in
count and time, talks over loopback only, and prints its figure (a line starting ``FIGURE``), so
a re-run on another machine can be compared with docs/reliability.md.
"""

from __future__ import annotations

from tests.support.services import postgres_database, postgres_url, redis_url

__all__ = ["postgres_database", "postgres_url", "redis_url"]
