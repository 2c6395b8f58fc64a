"""StoreActors: the requests the contract suites act with."""

from __future__ import annotations

import pytest
from django.contrib.sessions.models import Session

from django_pydantic_agent.testing import StoreActors


@pytest.mark.django_db
def test_each_request_is_fresh_and_acts_as_its_actor() -> None:
    actors = StoreActors.create(prefix="t")
    alice = actors.request("alice")
    again = actors.request("alice")
    assert alice is not again
    assert alice.session is not again.session
    assert alice.user == actors.user("alice")
    assert actors.user("alice").get_username() == "t-alice"
    anon = actors.request("anon1")
    assert anon.user.is_authenticated is False
    assert anon.session.session_key == actors.session_key("anon1")
    assert Session.objects.filter(session_key=actors.session_key("anon2")).exists()


@pytest.mark.django_db
def test_unknown_actor_is_named() -> None:
    actors = StoreActors.create()
    with pytest.raises(KeyError, match="'carol'"):
        actors.request("carol")


def test_all_four_sessions_are_required() -> None:
    with pytest.raises(ValueError, match="anon2"):
        StoreActors(users={}, session_keys={"alice": "a", "bob": "b", "anon1": "c"})
