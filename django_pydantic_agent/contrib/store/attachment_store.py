"""``DefaultAttachmentStore``: uploads as ``StoredAttachment`` rows, bytes in Django ``Storage``.

This module imports no models at import time (see ``stores``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db.models import Max

from django_pydantic_agent.contrib.store.checks import store_app_installed
from django_pydantic_agent.contrib.store.deletion import delete_attachments
from django_pydantic_agent.contrib.store.quotas import MAX_KEY, check_quota, count, lock_owner
from django_pydantic_agent.persistence import (
    AttachmentRef,
    ModelAttachmentStore,
    OpenedAttachment,
    StoreLimitError,
)
from django_pydantic_agent.persistence.outages import StorageUnavailableError
from django_pydantic_agent.persistence.transactions import write_transaction

if TYPE_CHECKING:
    from django.core.checks import CheckMessage
    from django.core.files.storage import Storage
    from django.core.files.uploadedfile import UploadedFile

    from django_pydantic_agent.contrib.store.models import StoredAttachment

__all__ = ["DefaultAttachmentStore"]

logger = logging.getLogger("django_pydantic_agent.contrib.store")

_HASH_CHUNK = 64 * 1024
_DEDUP_PROBES = 8


def _short(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _display_name(raw: str | None) -> str:
    """The upload's base name (``/`` and ``\\`` both separate), or ``"attachment"``."""
    base = (raw or "").replace("\x00", "").replace("\\", "/").rsplit("/", 1)[-1].strip()
    return base[:MAX_KEY] or "attachment"


def _parse_id(attachment_id: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(attachment_id))
    except ValueError:
        return None


class DefaultAttachmentStore(ModelAttachmentStore):
    """A ``ModelAttachmentStore`` over ``StoredAttachment``: bytes in Django ``Storage``.

    Bytes go to the ``STORAGES`` alias ``"django_pydantic_agent_attachments"`` when defined,
    else to default storage; a defined alias that does not load raises rather than falling
    back. The public id is a random UUID, independent of the blob's file name.

    ``save`` hashes the upload (SHA-256, streamed in 64 KiB chunks) and, when the same owner
    already holds a live blob with that hash, points a new row at it instead of writing the
    bytes again. Deduplication never crosses owners, and every upload gets its own row, so it
    keeps its own name. A blob is deleted with the last row naming it. ``open`` returns
    ``None`` for a missing, cross-owner or blobless attachment; a missing blob also logs a
    warning naming the attachment, never the owner.


    Two optional quotas refuse an upload with ``StoreLimitError`` before its row is written:
    ``max_files_per_owner`` counts the owner's attachments (rows: a deduplicated re-upload is
    one more file), ``max_bytes_per_owner`` the bytes the owner's blobs take in storage (a
    deduplicated re-upload adds none). Both are checked inside the inserting transaction,
    under a per-owner lock on PostgreSQL, so concurrent uploads cannot overshoot them.
    """

    def __init__(
        self,
        *,
        allow_anonymous: bool = False,
        max_bytes_per_owner: int | None = None,
        max_files_per_owner: int | None = None,
    ) -> None:
        super().__init__(allow_anonymous=allow_anonymous)
        self.max_bytes_per_owner = check_quota(
            "max_bytes_per_owner", max_bytes_per_owner, "bytes of attachments"
        )
        self.max_files_per_owner = check_quota(
            "max_files_per_owner", max_files_per_owner, "attachments"
        )

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """The base's system checks, and E001 when ``contrib.store`` is not installed."""
        return [*super().check(**kwargs), *store_app_installed(self)]

    @property
    def _has_quota(self) -> bool:
        return self.max_bytes_per_owner is not None or self.max_files_per_owner is not None

    def _refuse_over_quota(self, owner_id: str, new_bytes: int) -> None:
        """Raise ``StoreLimitError`` if one more file of ``new_bytes`` stored bytes is too many.

        Stored bytes count each blob once, however many of the owner's rows name it.
        """
        from django_pydantic_agent.contrib.store.models import StoredAttachment

        rows = StoredAttachment.objects.filter(owner_id=owner_id)
        files_limit = self.max_files_per_owner
        if files_limit is not None and rows.count() >= files_limit:
            raise StoreLimitError(
                f"This attachment store keeps at most {count(files_limit, 'file')} per owner "
                f"(max_files_per_owner={files_limit}), and that many are stored already: "
                "delete an attachment to upload another."
            )
        bytes_limit = self.max_bytes_per_owner
        if bytes_limit is None:
            return
        blobs = rows.exclude(file="").values("file").annotate(blob_size=Max("size"))
        used = sum(int(blob["blob_size"]) for blob in blobs)
        if used + new_bytes > bytes_limit:
            raise StoreLimitError(
                f"This upload of {new_bytes} bytes would take the owner's attachments to "
                f"{used + new_bytes} bytes, over the limit of {bytes_limit} bytes "
                f"(max_bytes_per_owner={bytes_limit}): delete attachments or upload a "
                "smaller file."
            )

    def _reusable_blob(self, owner_id: str, sha256: str, storage: Storage) -> str | None:
        from django_pydantic_agent.contrib.store.models import StoredAttachment

        # Locked until the new row is inserted: a prune deleting a sibling waits for it and
        # then sees the new row name the blob, so it keeps the blob (see deletion._pass).
        names = (
            StoredAttachment.objects.select_for_update()
            .filter(owner_id=owner_id, sha256=sha256)
            .exclude(file="")
            .order_by("-created_at", "-pk")
            .values_list("file", flat=True)
        )
        seen: set[str] = set()
        for name in names[:_DEDUP_PROBES]:
            name = str(name)
            if name in seen:
                continue
            seen.add(name)
            if storage.exists(name):
                return name
        return None

    def _save(self, upload: UploadedFile[Any], owner_id: str) -> AttachmentRef:
        from django_pydantic_agent.contrib.store.models import (
            StoredAttachment,
            resolve_attachment_storage,
        )

        digest = hashlib.sha256()
        size = 0
        for chunk in upload.chunks(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
        sha256 = digest.hexdigest()
        storage = resolve_attachment_storage()
        row = StoredAttachment(
            owner_id=owner_id,
            name=_display_name(upload.name),
            mime=_short(upload.content_type, MAX_KEY).replace("\x00", "")
            or "application/octet-stream",
            size=size,
            sha256=sha256,
        )
        with write_transaction():
            if self._has_quota:
                lock_owner("attachments", owner_id)
            blob = self._reusable_blob(owner_id, sha256, storage)
            if blob is not None:
                if self._has_quota:
                    self._refuse_over_quota(owner_id, 0)
                row.file.name = blob
                row.save()
                return self._ref(row)
            if self._has_quota:  # refuse before writing the bytes; checked again below
                self._refuse_over_quota(owner_id, size)
        upload.seek(0)
        self._write_blob(row, upload, storage)
        blob_name = str(row.file.name)
        try:
            with write_transaction():
                if self._has_quota:
                    lock_owner("attachments", owner_id)
                    self._refuse_over_quota(owner_id, size)
                row.save()
        except BaseException:
            storage.delete(blob_name)
            raise
        return self._ref(row)

    @staticmethod
    def _write_blob(row: StoredAttachment, upload: UploadedFile[Any], storage: Storage) -> None:
        """Write the upload's bytes as the row's blob, or raise ``StorageUnavailableError``.

        A write that fails (a full disk, a ``Storage`` that raises) leaves nothing behind: what
        it wrote of the blob is deleted, and the row is never saved.
        """
        name = row.file.field.generate_filename(row, uuid.uuid4().hex)
        try:
            row.file.save(name.rsplit("/", 1)[-1], upload, save=False)
        except Exception as exc:
            with contextlib.suppress(Exception):  # a storage that failed may fail again
                if storage.exists(name):
                    storage.delete(name)
            logger.warning(
                "Writing an attachment's bytes to storage failed (%s: %s); nothing was stored.",
                type(exc).__name__,
                exc,
                exc_info=not isinstance(exc, OSError),
            )
            raise StorageUnavailableError.wrapping(exc) from exc

    def _refs(self, attachment_ids: Sequence[str], owner_id: str) -> dict[str, AttachmentRef]:
        """The owner's refs among ``attachment_ids``, from one query (no blob is opened)."""
        from django_pydantic_agent.contrib.store.models import StoredAttachment

        keys = {key: given for given in attachment_ids if (key := _parse_id(given)) is not None}
        rows = StoredAttachment.objects.filter(owner_id=owner_id, attachment_id__in=keys)
        return {keys[row.attachment_id]: self._ref(row) for row in rows}

    @staticmethod
    def _ref(row: StoredAttachment) -> AttachmentRef:
        return AttachmentRef(id=row.attachment_id.hex, name=row.name, mime=row.mime, size=row.size)

    def _open(self, attachment_id: str, owner_id: str) -> OpenedAttachment | None:
        from django_pydantic_agent.contrib.store.models import (
            StoredAttachment,
            resolve_attachment_storage,
        )

        key = _parse_id(attachment_id)
        if key is None:
            return None
        row = StoredAttachment.objects.filter(owner_id=owner_id, attachment_id=key).first()
        if row is None:
            return None
        try:
            if not row.file.name:
                raise FileNotFoundError(row.file.name)
            content = resolve_attachment_storage().open(row.file.name, "rb")
        except FileNotFoundError:
            # Never log the owner: an anonymous owner id embeds a live session key.
            logger.warning(
                "Attachment %s has no blob in storage (%r); open() returned None.",
                row.attachment_id.hex,
                row.file.name,
            )
            return None
        return OpenedAttachment(ref=self._ref(row), content=content)

    def _remove(self, attachment_id: str, owner_id: str) -> None:
        from django_pydantic_agent.contrib.store.models import StoredAttachment

        key = _parse_id(attachment_id)
        if key is None:
            return
        delete_attachments(StoredAttachment.objects.filter(owner_id=owner_id, attachment_id=key))
