"""The default stores: nothing is kept, so the server stays stateless."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from django_pydantic_agent.persistence.base import (
    AttachmentRef,
    Conversation,
    ConversationMetaList,
    OpenedAttachment,
    check_limit,
)
from django_pydantic_agent.persistence.errors import PersistenceDisabledError

if TYPE_CHECKING:
    from django.core.checks import CheckMessage
    from django.core.files.uploadedfile import UploadedFile
    from django.http import HttpRequest

__all__ = ["NullAttachmentStore", "NullConversationStore", "PersistenceDisabledError"]


class NullConversationStore:
    """The default conversation store: "persistence off".

    ``load`` returns ``None``, ``list`` returns ``[]``, ``exists`` returns ``False`` and
    ``save``, ``delete`` and ``rename`` do nothing, so the conversation lives entirely in the
    client's posted history. ``persistent`` is ``False``: a transport reads it (through
    ``is_persistent``) to mount no thread routes and run statelessly.
    """

    persistent: ClassVar[bool] = False

    def __repr__(self) -> str:
        return "NullConversationStore()"

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """Nothing to report (``ChecksItself``): a Null store needs nothing installed."""
        return []

    async def load(self, thread_id: str, *, request: HttpRequest) -> Conversation | None:
        """Always ``None``."""
        return None

    async def save(self, conversation: Conversation, *, request: HttpRequest) -> None:
        """Discard the conversation."""
        return None

    async def delete(self, thread_id: str, *, request: HttpRequest) -> None:
        """Do nothing."""
        return None

    async def list(self, *, request: HttpRequest, limit: int | None = None) -> ConversationMetaList:
        """Always ``[]``; ``ValueError`` for an invalid ``limit``, like every store."""
        check_limit(limit)
        return []

    async def exists(self, thread_id: str, *, request: HttpRequest) -> bool:
        """Always ``False``."""
        return False

    async def rename(self, thread_id: str, title: str, *, request: HttpRequest) -> None:
        """Do nothing."""
        return None


class NullAttachmentStore:
    """The default attachment store: "uploads off".

    ``save`` raises ``PersistenceDisabledError``; ``open`` returns ``None`` (every download is
    a 404); ``delete`` does nothing. ``persistent`` is ``False``: a transport reads it (through
    ``is_persistent``) to answer uploads with ``410 Gone`` or not mount them at all.
    """

    persistent: ClassVar[bool] = False

    def __repr__(self) -> str:
        return "NullAttachmentStore()"

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """Nothing to report (``ChecksItself``): a Null store needs nothing installed."""
        return []

    async def save(self, upload: UploadedFile[bytes], *, request: HttpRequest) -> AttachmentRef:
        """Refuse: raises ``PersistenceDisabledError``."""
        raise PersistenceDisabledError(
            f"Cannot store the upload {upload.name!r}: this endpoint uses "
            "NullAttachmentStore, which keeps no files. Pass a real attachment store "
            "(for example contrib.store's DefaultAttachmentStore) to enable uploads."
        )

    async def open(self, attachment_id: str, *, request: HttpRequest) -> OpenedAttachment | None:
        """Always ``None``."""
        return None

    async def delete(self, attachment_id: str, *, request: HttpRequest) -> None:
        """Do nothing."""
        return None
