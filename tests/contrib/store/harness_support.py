"""Requests for the harness store tests: an authenticated user's, and an anonymous one."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.contrib.sessions.backends.db import SessionStore
from django.http import HttpRequest
from django.test import RequestFactory


def user_request(pk: int) -> HttpRequest:
    """A request acting as an authenticated user; owner resolution needs only the pk."""
    request = RequestFactory().post("/agent/")
    request.user = User(pk=pk, username=f"user{pk}")
    return request


def anonymous_request(*, session: bool) -> HttpRequest:
    """An anonymous request with a session object, saved (given a key) only if ``session``."""
    request = RequestFactory().post("/agent/")
    request.user = AnonymousUser()
    request.session = SessionStore()
    if session:
        request.session.create()
    return request
