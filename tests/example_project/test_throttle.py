"""The example's per-user throttle: a fixed window in Django's cache."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from chat.throttle import per_user_per_minute
from django.core.cache import cache


def request_from(pk: int) -> Any:
    return SimpleNamespace(user=SimpleNamespace(pk=pk))


def test_the_request_after_the_limit_waits_for_the_next_minute() -> None:
    cache.clear()
    throttle = per_user_per_minute(2)
    assert throttle is not None

    first, second, third = (throttle(request_from(1)) for _ in range(3))

    assert first is None
    assert second is None
    assert third is not None
    assert 0 < third <= 60
    assert throttle(request_from(2)) is None  # counted per user


def test_zero_turns_the_throttle_off_and_a_negative_limit_is_refused() -> None:
    assert per_user_per_minute(0) is None
    with pytest.raises(ValueError, match=r"^limit=-1 is not valid"):
        per_user_per_minute(-1)
