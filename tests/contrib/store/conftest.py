"""Fixtures for the contrib.store tests: users, requests acting as them, uploads."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.http import HttpRequest
from django.test import RequestFactory

from django_pydantic_agent.persistence import StoreLimitError


@pytest.fixture
def alice(django_user_model: type[User]) -> User:
    return django_user_model.objects.create_user("alice", password="pw")


@pytest.fixture
def bob(django_user_model: type[User]) -> User:
    return django_user_model.objects.create_user("bob", password="pw")


@pytest.fixture
def request_as() -> Callable[[Any], HttpRequest]:
    """Build a request whose ``user`` is the given user (``None``: anonymous)."""

    def build(user: Any) -> HttpRequest:
        request = RequestFactory().post("/agent/")
        request.user = user if user is not None else AnonymousUser()
        return request

    return build


@pytest.fixture
def upload() -> Callable[..., SimpleUploadedFile]:
    def build(
        content: bytes = b"hello", name: str = "hello.txt", mime: str = "text/plain"
    ) -> SimpleUploadedFile:
        return SimpleUploadedFile(name, content, content_type=mime)

    return build


@pytest.fixture
def on_commit(django_capture_on_commit_callbacks: Any) -> Any:
    """``with on_commit(execute=True):`` runs the on-commit callbacks (blob deletions)."""
    return django_capture_on_commit_callbacks


def race_to_the_quota(write: Callable[[int], object], writers: int = 8) -> list[str]:
    """Start ``writers`` threads at once, each calling ``write(i)``; each says ``"saved"`` or,
    when the store raised ``StoreLimitError``, ``"refused"`` (sorted: refused first)."""
    barrier = Barrier(writers)

    def worker(i: int) -> str:
        try:
            barrier.wait(timeout=10)
            write(i)
            return "saved"
        except StoreLimitError:
            return "refused"
        finally:
            connections.close_all()

    with ThreadPoolExecutor(writers) as pool:
        return sorted(pool.map(worker, range(writers)))
