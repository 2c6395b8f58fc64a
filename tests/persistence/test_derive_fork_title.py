"""``derive.fork_title``: what a fork is called."""

from __future__ import annotations

from django_pydantic_agent.persistence.derive import FORK_TITLE_MAX_CHARS, fork_title


def test_a_fork_is_titled_as_one_within_the_title_limit() -> None:
    assert fork_title("Trip plans") == "Trip plans (fork)"
    assert fork_title("") == "New conversation (fork)"
    assert fork_title("Trip plans (fork)") == "Trip plans (fork)"  # a fork of a fork
    long = fork_title("x" * 500)
    assert len(long) == FORK_TITLE_MAX_CHARS
    assert long.endswith("\u2026 (fork)")
