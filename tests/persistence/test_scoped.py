"""ScopedConversationStore: construction rules and what a wrapper must not leak."""

from __future__ import annotations

import re

import pytest

from django_pydantic_agent.persistence import (
    Conversation,
    ConversationStore,
    DjangoSessionConversationStore,
    NullConversationStore,
    ScopedConversationStore,
    is_persistent,
)
from django_pydantic_agent.testing import StoreActors
from tests.testapp.stores import ThreadStore


@pytest.mark.parametrize("scope", ["admin:readonly", ":", "a:"])
def test_a_scope_containing_a_colon_is_refused(scope: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(scope))):
        ScopedConversationStore(NullConversationStore(), scope=scope)


@pytest.mark.parametrize("scope", ["", None, 3])
def test_a_scope_must_be_a_non_empty_string(scope: object) -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        ScopedConversationStore(NullConversationStore(), scope=scope)  # type: ignore[arg-type]


def test_the_inner_store_must_be_a_conversation_store() -> None:
    with pytest.raises(TypeError, match="is not a ConversationStore"):
        ScopedConversationStore(object(), scope="admin")  # type: ignore[arg-type]


def test_wrapper_exposes_scope_inner_and_persistence() -> None:
    inner = DjangoSessionConversationStore()
    scoped = ScopedConversationStore(inner, scope="admin")
    assert isinstance(scoped, ConversationStore)
    assert scoped.inner is inner
    assert scoped.scope == "admin"
    assert is_persistent(scoped) is True
    assert repr(scoped).startswith("ScopedConversationStore(DjangoSessionConversationStore(")


async def test_thread_ids_containing_colons_stay_inside_their_scope(actors: StoreActors) -> None:
    inner = ThreadStore()
    admin = ScopedConversationStore(inner, scope="admin")
    await admin.save(
        Conversation(thread_id="readonly:t1", messages=[]), request=actors.request("alice")
    )
    [row] = await admin.list(request=actors.request("alice"))
    assert row.thread_id == "readonly:t1"
    loaded = await admin.load("readonly:t1", request=actors.request("alice"))
    assert loaded is not None
    assert loaded.thread_id == "readonly:t1"
    # The unscoped view of the same store sees only the storage key.
    assert await inner.exists("readonly:t1", request=actors.request("alice")) is False
    assert await inner.exists("admin:readonly:t1", request=actors.request("alice")) is True
