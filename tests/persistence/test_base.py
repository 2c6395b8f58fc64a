"""Value types and the small helpers of persistence.base."""

from __future__ import annotations

import dataclasses
import io
import uuid
from datetime import UTC, datetime

import pytest
from django.test import override_settings

from django_pydantic_agent.chat_history import InMemoryChatRepository, InMemoryMessageRepository
from django_pydantic_agent.persistence import (
    AttachmentRef,
    AttachmentStore,
    ChecksItself,
    Conversation,
    ConversationMeta,
    ConversationStore,
    DeclaresAnonymousPolicy,
    DjangoSessionConversationStore,
    NamesItsUser,
    NullAttachmentStore,
    NullConversationStore,
    OpenedAttachment,
    ProvidesRepositories,
    ProvidesRunStore,
    RefusesOverQuota,
    ReportsPersistence,
    ScopedConversationStore,
    StoreError,
    StoreLimitError,
    WrapsStore,
    is_persistent,
    own_run_store,
    refuse_over_quota,
    repository_user_uuid,
    serves_anonymous,
    store_checks,
    store_repositories,
    wrapped_stores,
)
from django_pydantic_agent.persistence.base import check_limit
from django_pydantic_agent.persistence.runs import CacheRunStore


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
        # The predecessor's five, then what 1.0 adds after them (keyword-only in practice).
        ConversationMeta: [
            "thread_id",
            "title",
            "updated_at",
            "preview",
            "owner_id",
            "archived",
            "pinned",
            "tags",
        ],
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


# -- optional store capabilities ---------------------------------------------------------


class _Flags:
    """A store-shaped object declaring every optional capability."""

    def __init__(self, *, persistent: bool = True, allow_anonymous: bool = False) -> None:
        self.persistent = persistent
        self.allow_anonymous = allow_anonymous
        self.calls: list[object] = []
        self.chats = InMemoryChatRepository()
        self.messages = InMemoryMessageRepository(self.chats)

    async def repositories(
        self, *, request: object
    ) -> tuple[InMemoryChatRepository, InMemoryMessageRepository]:
        self.calls.append(request)
        return self.chats, self.messages


class _Wrapper:
    def __init__(self, inner: object) -> None:
        self.inner = inner


def test_optional_capabilities_are_runtime_checkable_protocols() -> None:
    store = _Flags()
    assert isinstance(store, ReportsPersistence)
    assert isinstance(store, DeclaresAnonymousPolicy)
    assert isinstance(store, ProvidesRepositories)
    assert not isinstance(store, WrapsStore)
    assert isinstance(_Wrapper(store), WrapsStore)
    for protocol in (ReportsPersistence, DeclaresAnonymousPolicy, ProvidesRepositories, WrapsStore):
        assert not isinstance(object(), protocol), protocol.__name__


def test_null_and_scoped_stores_declare_their_capabilities() -> None:
    scoped = ScopedConversationStore(NullConversationStore(), scope="a")
    assert isinstance(NullConversationStore(), ReportsPersistence)
    assert isinstance(scoped, WrapsStore)
    assert is_persistent(scoped) is False
    assert is_persistent(ScopedConversationStore(DjangoSessionConversationStore(), scope="a"))
    assert is_persistent(_Flags(persistent=False)) is False


def test_wrapped_stores_walks_inner_outermost_first_and_survives_a_cycle() -> None:
    inner = _Flags()
    middle = _Wrapper(inner)
    outer = _Wrapper(middle)
    assert list(wrapped_stores(outer)) == [outer, middle, inner]
    loop = _Wrapper(None)
    loop.inner = loop
    assert list(wrapped_stores(loop)) == [loop]
    assert list(wrapped_stores(None)) == []


def test_serves_anonymous_reads_the_outermost_declared_flag() -> None:
    assert serves_anonymous(object()) is True
    assert serves_anonymous(_Flags(allow_anonymous=False)) is False
    assert serves_anonymous(_Wrapper(_Flags(allow_anonymous=True))) is True
    assert serves_anonymous(_Wrapper(_Wrapper(_Flags(allow_anonymous=False)))) is False
    # A non-bool flag is not a declaration: the walk goes on to the wrapped store.
    odd = _Wrapper(_Flags(allow_anonymous=False))
    odd.allow_anonymous = "yes"  # type: ignore[attr-defined]
    assert serves_anonymous(odd) is False


async def test_store_repositories_asks_a_capable_store_and_is_none_otherwise() -> None:
    store = _Flags()
    request = object()
    pair = await store_repositories(store, request=request)  # type: ignore[arg-type]
    assert pair == (store.chats, store.messages)
    assert store.calls == [request]
    assert await store_repositories(NullConversationStore(), request=request) is None  # type: ignore[arg-type]


class _RunRecording:
    """A store that records its runs itself, and a chat repository that names its user."""

    def __init__(self, run_store: object) -> None:
        self._run_store = run_store

    def run_store(self) -> object:
        return self._run_store


class _NamedChats:
    def __init__(self, user_uuid: object) -> None:
        self.user_uuid = user_uuid
        self.asked: list[str] = []

    async def refuse_over_quota(self, thread_id: str) -> None:
        self.asked.append(thread_id)
        if thread_id == "one-too-many":
            raise StoreLimitError("Over quota.")


def test_the_run_store_and_repository_capabilities_are_declared_protocols() -> None:
    cache_runs = CacheRunStore()
    assert isinstance(_RunRecording(cache_runs), ProvidesRunStore)
    assert isinstance(_NamedChats(None), NamesItsUser)
    assert isinstance(_NamedChats(None), RefusesOverQuota)
    for protocol in (ProvidesRunStore, NamesItsUser, RefusesOverQuota, ChecksItself):
        assert not isinstance(object(), protocol), protocol.__name__


def test_own_run_store_looks_through_wrappers_and_ignores_a_non_run_store() -> None:
    cache_runs = CacheRunStore()
    assert own_run_store(_Wrapper(_RunRecording(cache_runs))) is cache_runs
    assert own_run_store(_RunRecording(object())) is None
    assert own_run_store(NullConversationStore()) is None


def test_repository_user_uuid_is_a_uuid_or_none() -> None:
    user = uuid.uuid4()
    assert repository_user_uuid(_NamedChats(user)) == user
    assert repository_user_uuid(_NamedChats("not-a-uuid")) is None
    assert repository_user_uuid(InMemoryChatRepository()) is None


async def test_refuse_over_quota_asks_a_capable_repository_only() -> None:
    chats = _NamedChats(None)
    await refuse_over_quota(chats, "fine")
    with pytest.raises(StoreLimitError):
        await refuse_over_quota(chats, "one-too-many")
    assert chats.asked == ["fine", "one-too-many"]
    await refuse_over_quota(InMemoryChatRepository(), "anything")  # nothing to ask


def test_every_shipped_store_checks_itself_and_a_scope_forwards() -> None:
    session = DjangoSessionConversationStore()
    for store in (NullConversationStore(), NullAttachmentStore(), session):
        assert isinstance(store, ChecksItself)
    assert store_checks(object()) == []
    assert store_checks(NullConversationStore()) == []
    missing = [m for m in session.check() if m.id == "django_pydantic_agent.E003"]
    scoped = ScopedConversationStore(session, scope="a")
    assert store_checks(scoped) == session.check()
    with override_settings(MIDDLEWARE=[]):
        [error] = store_checks(ScopedConversationStore(session, scope="a"))
    assert missing == []
    assert error.id == "django_pydantic_agent.E003"
    assert error.obj is session
