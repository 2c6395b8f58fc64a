"""``attachment_refs``: the owner's refs by id, through ``refs`` or ``open`` and close."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from django_pydantic_agent.persistence import (
    AttachmentRef,
    NullAttachmentStore,
    OpenedAttachment,
    ResolvesAttachmentRefs,
    attachment_refs,
)
from django_pydantic_agent.testing import StoreActors
from tests.testapp.stores import UploadStore


class OpenOnly:
    """An ``AttachmentStore`` without ``refs``: it can only open, and records what it opened."""

    def __init__(self, refs: dict[str, AttachmentRef]) -> None:
        self._refs = refs
        self.streams: list[io.BytesIO] = []

    async def save(self, upload: Any, *, request: Any) -> AttachmentRef:
        raise NotImplementedError

    async def open(self, attachment_id: str, *, request: Any) -> OpenedAttachment | None:
        ref = self._refs.get(attachment_id)
        if ref is None:
            return None
        stream = io.BytesIO(b"bytes")
        self.streams.append(stream)
        return OpenedAttachment(ref=ref, content=stream)

    async def delete(self, attachment_id: str, *, request: Any) -> None:
        raise NotImplementedError


async def test_a_store_that_can_only_open_is_opened_once_per_id_and_closed() -> None:
    ref = AttachmentRef(id="a", name="a.txt", mime="text/plain", size=5)
    store = OpenOnly({"a": ref})
    assert not isinstance(store, ResolvesAttachmentRefs)
    found = await attachment_refs(store, ["a", "missing", "a"], request=None)  # type: ignore[arg-type]
    assert found == {"a": ref}
    assert len(store.streams) == 1
    assert store.streams[0].closed
    assert await attachment_refs(store, [], request=None) == {}  # type: ignore[arg-type]


async def test_the_null_store_knows_no_id() -> None:
    assert await attachment_refs(NullAttachmentStore(), ["x"], request=None) == {}  # type: ignore[arg-type]


async def test_a_model_store_answers_in_one_hop_for_its_owner_only(
    actors: StoreActors,
) -> None:
    store = UploadStore()
    assert isinstance(store, ResolvesAttachmentRefs)
    alice, bob = actors.request("alice"), actors.request("bob")
    mine = await store.save(SimpleUploadedFile("a.txt", b"hello", "text/plain"), request=alice)
    theirs = await store.save(SimpleUploadedFile("b.txt", b"hi", "text/plain"), request=bob)
    found = await attachment_refs(store, [theirs.id, mine.id, "nope"], request=alice)
    assert found == {mine.id: AttachmentRef(id=mine.id, name="a.txt", mime="text/plain", size=5)}
    assert list(await store.refs([theirs.id], request=bob)) == [theirs.id]


@pytest.mark.parametrize("ids", [[], ["only-missing"]])
async def test_nothing_found_is_an_empty_answer(actors: StoreActors, ids: list[str]) -> None:
    assert await attachment_refs(UploadStore(), ids, request=actors.request("alice")) == {}
