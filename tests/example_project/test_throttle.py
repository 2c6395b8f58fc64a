"""The example's per-user throttle: a sliding one-minute window in Django's cache."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from chat import throttle as throttle_module
from chat.throttle import per_user_per_minute
from django.core.cache import cache

#: A clock minute's start, so a test can place requests anywhere in a minute or the next.
MINUTE = 29_000_000 * 60


def request_from(pk: int) -> Any:
    return SimpleNamespace(user=SimpleNamespace(pk=pk))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    cache.clear()
    now = SimpleNamespace(value=float(MINUTE))
    monkeypatch.setattr(throttle_module.time, "time", lambda: now.value)
    return now


def test_the_request_after_the_limit_is_refused_per_user(clock: SimpleNamespace) -> None:
    throttle = per_user_per_minute(2)
    assert throttle is not None

    first, second, third = (throttle(request_from(1)) for _ in range(3))

    assert first is None
    assert second is None
    assert third is not None
    assert 0 < third <= 60 + 60 / 2
    assert throttle(request_from(2)) is None  # counted per user


def test_a_burst_across_the_minute_boundary_is_refused(clock: SimpleNamespace) -> None:
    """A fixed window lets 2 x limit through in two seconds; the sliding one does not."""
    throttle = per_user_per_minute(4)
    assert throttle is not None

    clock.value = MINUTE + 59.5
    before = [throttle(request_from(1)) for _ in range(4)]
    clock.value = MINUTE + 60.5
    after = [throttle(request_from(1)) for _ in range(4)]

    assert before == [None] * 4
    assert after[0] is not None
    assert after[1:] == [after[0]] * 3, "a refused request is not counted"


@pytest.mark.parametrize(
    ("burst_at", "retry_at"),
    [(59.5, 60.5), (10.0, 20.0), (10.0, 70.0)],
    ids=["across-the-boundary", "within-the-minute", "the-next-minute"],
)
def test_retry_after_is_when_the_next_request_fits(
    clock: SimpleNamespace, burst_at: float, retry_at: float
) -> None:
    limit = 4
    throttle = per_user_per_minute(limit)
    assert throttle is not None
    clock.value = MINUTE + burst_at
    for _ in range(limit):
        assert throttle(request_from(1)) is None

    clock.value = MINUTE + retry_at
    wait = throttle(request_from(1))
    assert wait is not None
    assert wait > 0

    clock.value += wait - 0.5
    assert throttle(request_from(1)) is not None, "half a second early is still refused"
    clock.value += 0.5
    assert throttle(request_from(1)) is None, "Retry-After is not longer than it must be"
    assert throttle(request_from(1)) is not None, "and that was the one request there was room for"


def test_the_previous_minute_stops_counting_once_it_has_slid_out(clock: SimpleNamespace) -> None:
    throttle = per_user_per_minute(2)
    assert throttle is not None
    clock.value = MINUTE + 30
    assert [throttle(request_from(1)) for _ in range(2)] == [None, None]

    clock.value = MINUTE + 60 + 45  # three quarters of the earlier minute slid out: 0.5 left
    assert throttle(request_from(1)) is None
    assert throttle(request_from(1)) is not None


def test_zero_turns_the_throttle_off_and_a_negative_limit_is_refused() -> None:
    assert per_user_per_minute(0) is None
    with pytest.raises(ValueError, match=r"^limit=-1 is not valid"):
        per_user_per_minute(-1)
