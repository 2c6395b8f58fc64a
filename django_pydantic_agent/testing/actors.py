"""The people a contract test acts as: two users and two anonymous browser sessions."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.http import HttpRequest

__all__ = ["ACTORS", "ANONYMOUS_ACTORS", "USER_ACTORS", "StoreActors"]

USER_ACTORS = ("alice", "bob")
ANONYMOUS_ACTORS = ("anon1", "anon2")
ACTORS = USER_ACTORS + ANONYMOUS_ACTORS


class StoreActors:
    """Builds fresh requests for ``alice``, ``bob`` (users) and ``anon1``, ``anon2`` (visitors).

    Each actor has a saved session (users too, as after a login), and every ``request(actor)``
    call returns a *new* ``HttpRequest`` whose session is reloaded from the session backend,
    so a test that saves with one request and loads with another proves the data was really
    stored. Use ``create()`` inside a test with database access.
    """

    def __init__(self, *, users: dict[str, Any], session_keys: dict[str, str]) -> None:
        missing = [name for name in ACTORS if name not in session_keys]
        if missing:
            raise ValueError(f"session_keys lacks the actors {missing!r}; give all of {ACTORS}.")
        self._users = dict(users)
        self._session_keys = dict(session_keys)

    @classmethod
    def create(cls, *, prefix: str = "contract") -> StoreActors:
        """Create the two users (through ``get_user_model()``) and the four sessions."""
        from django.conf import settings
        from django.contrib.auth import get_user_model

        session_store = import_module(settings.SESSION_ENGINE).SessionStore
        user_model = get_user_model()
        users: dict[str, Any] = {}
        for name in USER_ACTORS:
            user = user_model(**{user_model.USERNAME_FIELD: f"{prefix}-{name}"})
            user.set_unusable_password()
            user.save()
            users[name] = user
        session_keys: dict[str, str] = {}
        for name in ACTORS:
            session = session_store()
            session.create()
            session_keys[name] = str(session.session_key)
        return cls(users=users, session_keys=session_keys)

    def user(self, actor: str) -> Any:
        """The user object of a user actor."""
        return self._users[actor]

    def session_key(self, actor: str) -> str:
        """The session key of any actor."""
        return self._session_keys[actor]

    def request(self, actor: str) -> HttpRequest:
        """A fresh ``GET /`` request acting as ``actor``, with its session freshly loaded."""
        from django.conf import settings
        from django.contrib.auth.models import AnonymousUser
        from django.test import RequestFactory

        if actor not in self._session_keys:
            raise KeyError(f"Unknown actor {actor!r}: use one of {ACTORS}.")
        request = RequestFactory().get("/")
        request.user = self._users.get(actor) or AnonymousUser()
        session_store = import_module(settings.SESSION_ENGINE).SessionStore
        request.session = session_store(session_key=self._session_keys[actor])
        return request
