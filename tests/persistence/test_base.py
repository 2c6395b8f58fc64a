"""Value types and the small helpers of persistence.base."""

from __future__ import annotations

import dataclasses
import io
from datetime import UTC, datetime

import pytest

from django_pydantic_agent.persistence import (
    AttachmentRef,
    AttachmentStore,
    Conversation,
    ConversationMeta,
    ConversationStore,
    OpenedAttachment,
    StoreError,
    StoreLimitError,
    is_persistent,
)
from django_pydantic_agent.persistence.base import check_limit


def test_value_types_are_frozen_with_defaults() -> None:
    conversation = Conversation(thread_id="t1")
    assert conversation.messages == []
    assert conversation.owner_id is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        conversation.thread_id = "t2"  # type: ignore[misc]
    meta = ConversationMeta(thread_id="t1", title="Title")
    assert (meta.updated_at, meta.preview, meta.owner_id) == (None, "", None)
    ref = AttachmentRef(id="a1", name="x.txt", mime="text/plain", size=3)
    assert ref.url is None
    opened = OpenedAttachment(ref=ref, content=io.BytesIO(b"abc"))
    assert opened.content.read() == b"abc"


def test_value_types_construct_positionally_as_in_the_predecessor() -> None:
    # django-pydantic-agent 0.28.3 declared them @dataclass(frozen=True): code calling them
    # positionally must port unchanged, so the field order is the predecessor's.
    when = datetime(2024, 5, 1, tzinfo=UTC)
    assert Conversation("t1", [{"role": "user"}], "42") == Conversation(
        thread_id="t1", messages=[{"role": "user"}], owner_id="42"
    )
    assert ConversationMeta("t1", "Title", when, "latest", "42") == ConversationMeta(
        thread_id="t1", title="Title", updated_at=when, preview="latest", owner_id="42"
    )
    ref = AttachmentRef("a1", "x.txt", "text/plain", 3, "/files/a1/")
    assert ref == AttachmentRef(id="a1", name="x.txt", mime="text/plain", size=3, url="/files/a1/")
    content = io.BytesIO(b"abc")
    assert OpenedAttachment(ref, content) == OpenedAttachment(ref=ref, content=content)
    expected = {
        Conversation: ["thread_id", "messages", "owner_id"],
        ConversationMeta: ["thread_id", "title", "updated_at", "preview", "owner_id"],
        AttachmentRef: ["id", "name", "mime", "size", "url"],
        OpenedAttachment: ["ref", "content"],
    }
    for cls, names in expected.items():
        assert [f.name for f in dataclasses.fields(cls)] == names, cls.__name__
        assert cls.__dataclass_params__.frozen, cls.__name__  # type: ignore[attr-defined]


def test_protocols_are_runtime_checkable() -> None:
    assert not isinstance(object(), ConversationStore)
    assert not isinstance(object(), AttachmentStore)


def test_is_persistent_defaults_to_true() -> None:
    assert is_persistent(object()) is True


@pytest.mark.parametrize("limit", [0, -3, True, 2.5, "10"])
def test_check_limit_refuses_bad_values_by_name(limit: object) -> None:
    with pytest.raises(ValueError, match=f"limit={limit!r}"):
        check_limit(limit)  # type: ignore[arg-type]


def test_check_limit_accepts_none_and_positive() -> None:
    check_limit(None)
    check_limit(1)


def test_limit_error_is_a_store_error() -> None:
    assert issubclass(StoreLimitError, StoreError)
