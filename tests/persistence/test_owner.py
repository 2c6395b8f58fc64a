"""Owner ids, session keys and harness memory namespaces."""

from __future__ import annotations

import hashlib
from importlib import import_module
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.contrib.sessions.models import Session
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.test import RequestFactory

from django_pydantic_agent.persistence import (
    AnonymousOperationError,
    aensure_session_key,
    ensure_session_key,
    memory_namespace,
    memory_namespace_for_user,
    resolve_owner_id,
)
from django_pydantic_agent.testing import StoreActors

SessionStore = import_module(settings.SESSION_ENGINE).SessionStore


def validate_store_path(path: str) -> None:
    """The harness's own path validator: the namespaces must satisfy the real thing."""
    store = pytest.importorskip(
        "pydantic_ai_harness.memory._store",
        reason='needs the harness extra: pip install -e ".[harness]"',
    )
    store.validate_store_path(path)


def _anonymous(session_key: str | None = None, *, with_session: bool = True) -> HttpRequest:
    request = RequestFactory().get("/")
    request.user = AnonymousUser()
    if with_session:
        request.session = SessionStore(session_key)
    return request


def _digest(identifier: str) -> str:
    return hashlib.sha256(identifier.encode()).hexdigest()[:40]


# -- resolve_owner_id ---------------------------------------------


@pytest.mark.django_db
def test_an_authenticated_user_owns_their_pk() -> None:
    actors = StoreActors.create()
    request = actors.request("alice")
    expected = str(actors.user("alice").pk)
    assert resolve_owner_id(request, allow_anonymous=False) == expected
    assert resolve_owner_id(request, allow_anonymous=True) == expected


def test_anonymous_is_refused_by_default_policy() -> None:
    with pytest.raises(AnonymousOperationError, match="allow_anonymous=True"):
        resolve_owner_id(_anonymous(), allow_anonymous=False)


def test_a_request_without_user_or_session_is_anonymous() -> None:
    request = RequestFactory().get("/")
    with pytest.raises(AnonymousOperationError):
        resolve_owner_id(request, allow_anonymous=False)
    with pytest.raises(AnonymousOperationError, match="no session"):
        resolve_owner_id(request, allow_anonymous=True)


@pytest.mark.django_db
def test_an_anonymous_session_owns_anon_key() -> None:
    session = SessionStore()
    session.create()
    request = _anonymous(session.session_key)
    assert resolve_owner_id(request, allow_anonymous=True) == f"anon:{session.session_key}"


@pytest.mark.django_db
def test_resolution_never_creates_a_session() -> None:
    with pytest.raises(AnonymousOperationError, match="ensure_session_key"):
        resolve_owner_id(_anonymous(), allow_anonymous=True)
    assert Session.objects.count() == 0


@pytest.mark.django_db
def test_a_forged_or_expired_session_key_is_no_owner() -> None:
    with pytest.raises(AnonymousOperationError):
        resolve_owner_id(_anonymous("a" * 32), allow_anonymous=True)


# -- ensure_session_key ---------------------------------------------


@pytest.mark.django_db
def test_ensure_session_key_creates_a_session_once() -> None:
    request = _anonymous()
    key = ensure_session_key(request)
    assert Session.objects.filter(session_key=key).exists()
    assert ensure_session_key(request) == key
    assert request.session.modified  # so SessionMiddleware sends the cookie
    assert resolve_owner_id(request, allow_anonymous=True) == f"anon:{key}"


@pytest.mark.django_db
def test_ensure_session_key_replaces_a_forged_key() -> None:
    key = ensure_session_key(_anonymous("b" * 32))
    assert key != "b" * 32
    assert Session.objects.filter(session_key=key).exists()


@pytest.mark.django_db(transaction=True)
async def test_aensure_session_key_keeps_the_loop_free() -> None:
    request = _anonymous()
    key = await aensure_session_key(request)
    assert await Session.objects.filter(session_key=key).aexists()


def test_ensure_session_key_without_session_middleware_says_so() -> None:
    with pytest.raises(ImproperlyConfigured, match="SessionMiddleware"):
        ensure_session_key(_anonymous(with_session=False))


@pytest.mark.django_db
def test_ensure_session_key_with_signed_cookie_sessions() -> None:
    from django.contrib.sessions.backends.signed_cookies import SessionStore as CookieStore

    request = _anonymous(with_session=False)
    request.session = CookieStore()
    assert ensure_session_key(request)


# -- memory namespaces ---------------------------------------------


def _user(pk: object) -> SimpleNamespace:
    return SimpleNamespace(pk=pk, is_authenticated=True)


@pytest.mark.parametrize(
    ("pk", "expected"),
    [
        (42, "u-42"),
        ("abc_DEF.9-x", "u-abc_DEF.9-x"),
        ("alice@example.com", f"u-{_digest('alice@example.com')}"),
        ("tenant/42", f"u-{_digest('tenant/42')}"),
        ("tenant-42", "u-tenant-42"),
        ("a..b", f"u-{_digest('a..b')}"),
        ("", "u-"),
        ("x" * 198, "u-" + "x" * 198),
        ("x" * 199, f"u-{_digest('x' * 199)}"),
        ("\u00e9", f"u-{_digest(chr(0xE9))}"),
    ],
)
def test_memory_namespace_for_user(pk: object, expected: str) -> None:
    namespace = memory_namespace_for_user(_user(pk))
    assert namespace == expected
    validate_store_path(f"{namespace}/agent/notes.md")


def test_unsafe_identifiers_never_collide() -> None:
    assert memory_namespace_for_user(_user("tenant/42")) != memory_namespace_for_user(
        _user("tenant-42")
    )


@pytest.mark.parametrize("user", [None, AnonymousUser(), SimpleNamespace(pk=1)])
def test_every_unauthenticated_user_shares_anon(user: object) -> None:
    assert memory_namespace_for_user(user) == "anon"
    validate_store_path("anon")


@pytest.mark.django_db
def test_memory_namespace_for_requests_is_always_a_valid_segment() -> None:
    actors = StoreActors.create()
    alice = memory_namespace(actors.request("alice"))
    assert alice == f"u-{actors.user('alice').pk}"
    anon1 = memory_namespace(actors.request("anon1"))
    anon2 = memory_namespace(actors.request("anon2"))
    assert anon1 == f"anon-{actors.session_key('anon1')}"
    assert anon1 != anon2
    for namespace in (alice, anon1, anon2):
        validate_store_path(f"{namespace}/agent/notes.md")


@pytest.mark.django_db
@pytest.mark.parametrize("cookie", [None, "c" * 32], ids=["no-cookie", "expired-cookie"])
def test_memory_namespace_creates_the_anonymous_session_it_keys_to(cookie: str | None) -> None:
    # The seed: it "can key an anonymous caller to their browser session", creating one
    # (the predecessor did too) -- so a first-time visitor gets a namespace of their own.
    request = _anonymous(cookie)
    namespace = memory_namespace(request)
    key = request.session.session_key
    assert key
    assert key != cookie
    assert namespace == f"anon-{key}"
    assert Session.objects.filter(session_key=key).exists()
    assert request.session.modified  # so SessionMiddleware sends the cookie
    assert memory_namespace(request) == namespace  # created once
    assert memory_namespace(_anonymous()) != namespace  # another visitor, another session
    validate_store_path(f"{namespace}/agent/notes.md")


def test_memory_namespace_without_session_middleware_says_so() -> None:
    with pytest.raises(ImproperlyConfigured, match="SessionMiddleware"):
        memory_namespace(_anonymous(with_session=False))


def test_harness_rejects_what_resolve_owner_id_would_give() -> None:
    # Why memory_namespace exists: the owner id's colon is not a valid harness segment.
    with pytest.raises(ValueError, match="invalid memory path"):
        validate_store_path("anon:abc/agent/notes.md")


def test_owner_user_uuid_is_one_deterministic_mapping() -> None:
    import uuid

    from django_pydantic_agent.persistence import owner_user_uuid
    from django_pydantic_agent.persistence.owner import OWNER_UUID_NAMESPACE

    assert owner_user_uuid("42") == owner_user_uuid("42")
    assert owner_user_uuid("42") != owner_user_uuid("anon:42")
    assert owner_user_uuid("42") == uuid.uuid5(OWNER_UUID_NAMESPACE, "42")
    assert owner_user_uuid("42").version == 5
