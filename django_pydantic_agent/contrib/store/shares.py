"""Share links on ``StoredShare`` rows: ``DefaultConversationStore``'s ``SharesThreads``.

Each owner-side method is one worker-thread hop that resolves the owner and filters by it;
``open_shared`` finds a row by its token's digest, compares the digest again in constant time
and answers only a live link. Revoking a link (or sharing its thread again) keeps the row for
the admin and empties its snapshot.

This module imports no models at import time (see ``stores``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from django_pydantic_agent.contrib.store.quotas import MAX_KEY
from django_pydantic_agent.persistence.outages import unit_of_work
from django_pydantic_agent.persistence.sharing import SharedThread, ShareLink, same_digest
from django_pydantic_agent.persistence.transactions import write_transaction

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from django.http import HttpRequest

    from django_pydantic_agent.contrib.store.models import StoredShare

__all__ = ["ShareRows"]


def _link(row: StoredShare, thread_id: str) -> ShareLink:
    return ShareLink(
        thread_id=thread_id,
        title=row.title,
        created_at=row.created_at,
        expires_at=row.expires_at,
        include_attachments=row.include_attachments,
    )


def _live(owner_id: str) -> QuerySet[StoredShare]:
    """The owner's links that still open."""
    from django_pydantic_agent.contrib.store.models import StoredShare

    return StoredShare.objects.filter(
        owner_id=owner_id, revoked_at__isnull=True, expires_at__gt=timezone.now()
    )


def _revoke(rows: QuerySet[StoredShare]) -> int:
    """End ``rows`` (live or expired, not yet revoked): the rows stay, the snapshots go."""
    return rows.filter(revoked_at__isnull=True).update(revoked_at=timezone.now(), snapshot=[])


class ShareRows:
    """``SharesThreads`` over ``StoredShare`` rows: a base listed after
    ``ModelConversationStore`` (whose ``_owner`` resolves the owner) by a store over
    ``StoredConversation``."""

    def _owner(self, request: HttpRequest) -> str:  # pragma: no cover - the store's comes first
        raise NotImplementedError

    def _share_sync(
        self,
        thread_id: str,
        digest: str,
        messages: list[Any],
        expires_at: datetime,
        include_attachments: bool,
        request: HttpRequest,
    ) -> ShareLink | None:
        from django_pydantic_agent.contrib.store.models import StoredConversation, StoredShare

        if len(thread_id) > MAX_KEY:
            return None
        owner_id = self._owner(request)
        with write_transaction():
            thread = (
                StoredConversation.objects.select_for_update()
                .filter(owner_id=owner_id, thread_id=thread_id)
                .only("pk", "title")
                .first()
            )
            if thread is None:
                return None
            _revoke(StoredShare.objects.filter(conversation=thread))
            row = StoredShare.objects.create(  # type: ignore[misc]  # JSONTextField takes lists
                conversation=thread,
                owner_id=owner_id,
                token_digest=digest,
                title=thread.title,
                snapshot=messages,
                include_attachments=include_attachments,
                expires_at=expires_at,
            )
        return _link(row, thread_id)

    async def share(
        self,
        thread_id: str,
        *,
        digest: str,
        messages: list[Any],
        expires_at: datetime,
        include_attachments: bool,
        request: HttpRequest,
    ) -> ShareLink | None:
        """Keep a link (by its token's ``digest``) to the snapshot ``messages`` of the owner's
        thread, revoking the thread's earlier links, in one transaction under the thread's
        row lock; ``None`` when the owner has no such thread."""
        return await unit_of_work(self._share_sync)(
            thread_id, digest, messages, expires_at, include_attachments, request
        )

    def _share_links_sync(self, thread_id: str | None, request: HttpRequest) -> list[ShareLink]:
        rows = _live(self._owner(request)).select_related("conversation")
        if thread_id is not None:
            rows = rows.filter(conversation__thread_id=thread_id)
        return [
            _link(row, row.conversation.thread_id)
            for row in rows.order_by("-created_at", "-pk").defer("snapshot")
        ]

    async def share_links(
        self, *, request: HttpRequest, thread_id: str | None = None
    ) -> list[ShareLink]:
        """The owner's live links, newest first (of ``thread_id`` only, when given); one query
        that reads no snapshot."""
        return await unit_of_work(self._share_links_sync)(thread_id, request)

    def _unshare_sync(self, thread_id: str, request: HttpRequest) -> bool:
        from django_pydantic_agent.contrib.store.models import StoredShare

        if len(thread_id) > MAX_KEY:
            return False
        owner_id = self._owner(request)
        threads = StoredShare.objects.filter(owner_id=owner_id, conversation__thread_id=thread_id)
        live = threads.filter(expires_at__gt=timezone.now(), revoked_at__isnull=True).exists()
        _revoke(threads)
        return live

    async def unshare(self, thread_id: str, *, request: HttpRequest) -> bool:
        """Revoke the owner's links of ``thread_id`` (expired ones too, so their snapshots go);
        whether one of them was live."""
        return await unit_of_work(self._unshare_sync)(thread_id, request)

    @staticmethod
    def _open_shared_sync(digest: str) -> SharedThread | None:
        from django_pydantic_agent.contrib.store.models import StoredShare

        row = StoredShare.objects.select_related("conversation").filter(token_digest=digest).first()
        if row is None or not same_digest(row.token_digest, digest) or not row.live:
            return None
        return SharedThread(
            thread_id=row.conversation.thread_id,
            owner_id=row.owner_id,
            title=row.title,
            messages=list(row.snapshot or ()),
            created_at=row.created_at,
            expires_at=row.expires_at,
            include_attachments=row.include_attachments,
        )

    async def open_shared(self, digest: str) -> SharedThread | None:
        """The live link whose token has ``digest`` (any owner's: the token is the
        credential); ``None`` for an unknown, revoked or expired one."""
        return await unit_of_work(self._open_shared_sync)(digest)
