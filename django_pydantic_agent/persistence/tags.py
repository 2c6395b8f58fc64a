"""Pins and tags on threads, kept by stores that can (``StoreFeatures.tags``).

``PATCH threads/<id>/`` takes ``{"pinned": true}`` and ``{"tags": [...]}``; ``GET threads/``
shows both on each row, filters by ``?tag=`` and lists pinned threads first in every order
(``agui.threads``). A store keeps them by implementing ``TagsThreads``; the page hides the pin
and the tags on a store that does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from django.http import HttpRequest

__all__ = [
    "MAX_PINNED_THREADS",
    "MAX_TAGS",
    "MAX_TAG_CHARS",
    "PinLimitError",
    "TagError",
    "TagsThreads",
    "normalize_tag",
    "read_tags",
]

#: At most this many tags on one thread.
MAX_TAGS = 20
#: The longest tag, in characters (after normalising).
MAX_TAG_CHARS = 50
#: At most this many pinned threads per owner: they all lead the first page of the list.
MAX_PINNED_THREADS = 20


class TagError(ValueError):
    """A tag list that cannot be kept; the message names the problem and what to send."""


class PinLimitError(Exception):
    """The owner already has ``MAX_PINNED_THREADS`` pinned threads."""

    def __init__(self) -> None:
        super().__init__(
            f"You have {MAX_PINNED_THREADS} pinned conversations, the most there can be; "
            "unpin one first."
        )


def normalize_tag(tag: str) -> str:
    """``tag`` as it is kept: whitespace collapsed to one space, trimmed, lowercased."""
    return " ".join(tag.split()).lower()


def read_tags(value: Any) -> list[str]:
    """The tags a request or an export names, normalised (``normalize_tag``), without repeats,
    in their first order. Raises ``TagError`` for anything but a list of at most ``MAX_TAGS``
    non-empty printable strings of at most ``MAX_TAG_CHARS`` characters each."""
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise TagError('"tags" must be a list of strings, e.g. ["work", "travel"].')
    tags: list[str] = []
    for raw in value:
        tag = normalize_tag(raw)
        if not tag:
            raise TagError("A tag is empty; send words, or leave it out.")
        if len(tag) > MAX_TAG_CHARS:
            raise TagError(
                f"The tag {tag[:20]!r}… is {len(tag)} characters; the limit is {MAX_TAG_CHARS}."
            )
        if not tag.isprintable():
            raise TagError("A tag holds control or non-printable characters; send plain text.")
        if tag not in tags:
            tags.append(tag)
    if len(tags) > MAX_TAGS:
        raise TagError(f"{len(tags)} tags; a conversation keeps at most {MAX_TAGS}.")
    return tags


@runtime_checkable
class TagsThreads(Protocol):
    """Optional: a store that keeps a pinned flag and tags per thread, shown as
    ``ConversationMeta.pinned`` and ``.tags`` and filtered by ``ThreadQuery.pinned`` and
    ``.tag``."""

    async def set_labels(
        self,
        thread_id: str,
        *,
        pinned: bool | None = None,
        tags: Sequence[str] | None = None,
        request: HttpRequest,
    ) -> bool:
        """Set what is not ``None`` on the owner's ``thread_id`` (``tags`` replaces them);
        ``False`` when there is no such thread. Raises ``PinLimitError`` for a pin past
        ``MAX_PINNED_THREADS``."""
        ...
