"""``StoreFeatures``: what each store declares it can do, read in one place by every reader.

The shipped stores' features, a ``ModelConversationStore`` declaring its hooks (``overrides``)
instead of being inspected, ``ScopedConversationStore`` forwarding the features of the store it
wraps, and a ``__getattr__`` proxy reporting the wrapped store's on every supported Python.
"""

from __future__ import annotations

import re
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import pytest

from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
    RetentionPolicy,
)
from django_pydantic_agent.memory_service import DRMemoryServiceClient
from django_pydantic_agent.persistence import (
    DjangoSessionConversationStore,
    MemoryServiceConversationStore,
    NullAttachmentStore,
    NullConversationStore,
    ScopedConversationStore,
    StoreFeatures,
    store_features,
)
from django_pydantic_agent.persistence.runs import CacheRunStore
from tests.testapp.stores import MinimalThreadStore, ThreadStore


class Proxy:
    """A store wrapped the way a project wraps one: every attribute forwarded."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _on(features: StoreFeatures) -> set[str]:
    """The features that are on (truthy), by name."""
    return {name for name, value in asdict(features).items() if value}


def _memory_service() -> MemoryServiceConversationStore:
    client = DRMemoryServiceClient(endpoint="http://memory.invalid/api/v2", api_token="t")
    return MemoryServiceConversationStore(client, "chats")


CONVERSATION_STORES = {
    "default": (
        DefaultConversationStore,
        {
            "persistent",
            "repositories",
            "runs",
            "branches",
            "forks",
            "search",
            "archive",
            "export",
            "feedback",
        },
    ),
    "session": (DjangoSessionConversationStore, {"persistent", "branches", "archive"}),
    "memory-service": (
        _memory_service,
        {"persistent", "repositories", "branches", "archive", "export"},
    ),
    "model-minimal": (MinimalThreadStore, {"persistent", "branches"}),
    "model-archiving": (ThreadStore, {"persistent", "branches", "archive"}),
    "null": (NullConversationStore, set()),
}


@pytest.mark.parametrize(
    ("make", "expected"), CONVERSATION_STORES.values(), ids=CONVERSATION_STORES.keys()
)
def test_each_conversation_store_declares_what_it_can_do(make: Any, expected: set[str]) -> None:
    store = make()
    scoped = ScopedConversationStore(store, scope="s")

    assert _on(store_features(store)) == expected
    # A scope offers what it wraps, and so does a proxy, around the store or around the scope.
    for wrapper in (Proxy(store), scoped, Proxy(scoped)):
        assert store_features(wrapper) == store_features(store)


def test_attachment_stores_declare_whether_they_read_refs_at_once() -> None:
    assert _on(store_features(DefaultAttachmentStore())) == {"persistent", "refs"}
    assert _on(store_features(Proxy(DefaultAttachmentStore()))) == {"persistent", "refs"}
    assert _on(store_features(NullAttachmentStore())) == set()


def test_run_stores_declare_resume_usage_and_their_cache() -> None:
    assert _on(store_features(DefaultConversationStore().run_store())) == {
        "persistent",
        "resume",
        "usage",
    }
    cached = CacheRunStore(alias="runs")
    assert store_features(cached).cache_alias == "runs"
    assert store_features(Proxy(cached)).cache_alias == "runs"
    assert store_features(object()) == StoreFeatures()


def test_retention_is_part_of_the_default_stores_features() -> None:
    policy = RetentionPolicy(idle_days=30)
    store = DefaultConversationStore(retention=policy)

    assert store_features(store).retention is policy
    assert store_features(Proxy(ScopedConversationStore(store, scope="s"))).retention is policy
    assert store_features(DefaultConversationStore()).retention is None


def test_a_model_store_is_asked_what_it_overrides_not_inspected() -> None:
    class Searching(MinimalThreadStore):
        overrides = {"_find", "_archive"}  # any set of names; kept as a frozenset

    class Silent(ThreadStore):
        """Has ThreadStore's _archive, but says it overrides nothing: archive is not offered."""

        overrides = frozenset()

    assert Searching.overrides == frozenset({"_find", "_archive"})
    assert {"search", "archive"} <= _on(store_features(Searching()))
    assert "archive" not in _on(store_features(Silent()))


@pytest.mark.parametrize("overrides", [{"_list"}, "_archive", {"_archiv"}])
def test_overrides_names_only_the_capability_hooks(overrides: Any) -> None:
    with pytest.raises(TypeError, match=r"overrides=.* is not valid.*\['_archive', '_find'\]"):
        type("Wrong", (MinimalThreadStore,), {"overrides": overrides})


def test_a_features_attribute_of_another_kind_is_not_a_declaration() -> None:
    class Odd(NullConversationStore):
        features = ["search"]

    assert store_features(Odd()) == store_features(NullConversationStore())


def test_every_feature_defaults_to_a_store_that_does_none_of_it() -> None:
    defaults = StoreFeatures()

    assert defaults.persistent is True
    assert _on(defaults) == {"persistent"}
    assert {f.name for f in fields(StoreFeatures)} >= {"branches", "search", "archive", "usage"}


def test_the_stores_page_example_runs_as_printed() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "stores.md").read_text("utf-8")
    section = page.split("## What each store can do: `store_features`", 1)[1].split("\n## ")[0]
    [code] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    exec(compile(code, "docs/stores.md", "exec"), {})
