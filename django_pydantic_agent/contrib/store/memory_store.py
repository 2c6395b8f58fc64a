"""``DefaultMemoryStore``: the pydantic-ai-harness ``MemoryStore`` on the Django ORM.

It satisfies ``MemoryStore`` and ``MetadataMemoryStore`` structurally and partitions every
row by an owner resolved on the server, so a mis-resolved memory namespace never reaches
another user's rows. Also here: the path rule it enforces (``validate_memory_path``) and the
``<memory>`` fence escaping applied on write (``neutralize_memory_tags``). Each protocol
method is one ``sync_to_async`` hop that resolves the owner and runs its queries (in one
transaction where there are several). Needs the ``harness`` extra and the
``django_pydantic_agent.contrib.store`` app installed.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

from asgiref.sync import sync_to_async
from django.db import IntegrityError
from django.db.models import Count, Q, Sum
from django.db.models.functions import Length, Substr
from django.utils import timezone
from pydantic_ai import ModelRetry

from django_pydantic_agent.contrib.store._harness_extra import harness_missing
from django_pydantic_agent.persistence.transactions import write_transaction

try:
    from pydantic_ai_harness.memory import (
        MemoryConflictError,
        MemoryFile,
        MemoryMutation,
        MemoryOperation,
        MemoryOperationConflictError,
    )
except ModuleNotFoundError as exc:
    raise harness_missing(exc, "DefaultMemoryStore") from None

from django_pydantic_agent.contrib.store._owner_scoped import OwnerScoped
from django_pydantic_agent.contrib.store.models.harness import (
    MEMORY_PATH_MAX_LENGTH,
    StoredMemoryFile,
    StoredMemoryOperation,
)
from django_pydantic_agent.persistence.owner import ANONYMOUS_MEMORY_NAMESPACE

if TYPE_CHECKING:
    from django.http import HttpRequest

__all__ = [
    "DEFAULT_MAX_MEMORY_FILES",
    "DEFAULT_MAX_MEMORY_TOTAL_CHARS",
    "DefaultMemoryStore",
    "neutralize_memory_tags",
    "validate_memory_path",
]

_logger = logging.getLogger(__name__)

#: ``DefaultMemoryStore``'s default ceiling on the number of memory files one owner keeps.
DEFAULT_MAX_MEMORY_FILES = 64
#: ``DefaultMemoryStore``'s default ceiling on the characters stored across one owner's files.
DEFAULT_MAX_MEMORY_TOTAL_CHARS = 262_144

# The harness's own path-segment rule, copied (its validator is private API).
_SEGMENT_RE = re.compile(r"[A-Za-z0-9_.-]{1,200}")
# The "<" opening a <memory> or </memory> tag: any case, whitespace allowed around the "/".
_MEMORY_TAG_RE = re.compile(r"<(?=\s*/?\s*memory\b)", re.IGNORECASE)
_MAX_METADATA_CHARS = 4_096
# Above every path character, so ``prefix <= path < prefix + _PREFIX_END`` is "starts with".
_PREFIX_END = "\U0010ffff"
# The largest count handed to SQL (substr length, LIMIT): PostgreSQL's substr() takes a 32-bit
# int and SQLite's misreads larger ones. No text column or owner's file list is that long, so
# clamping changes no result.
_SQL_COUNT_MAX = 2**31 - 1


def validate_memory_path(path: str) -> None:
    """Raise ``ValueError`` unless ``path`` is a memory path the harness and this store accept.

    The harness rule: ``/``-separated segments of 1-200 characters from ``[A-Za-z0-9_.-]``,
    none of them ``.`` or containing ``..`` (so no empty segment, no leading or trailing
    ``/``). This store also caps the whole path at 500 characters, the column's width.
    """
    if not all(
        _SEGMENT_RE.fullmatch(segment) and ".." not in segment and segment != "."
        for segment in path.split("/")
    ):
        raise ValueError(
            f"Invalid memory path {path!r}: every '/'-separated segment must be 1-200 "
            "characters from A-Z, a-z, 0-9, '_', '.' and '-', and must not be '.' or contain "
            "'..'. Build paths as '<namespace>/<agent_name>/<file>.md'."
        )
    if len(path) > MEMORY_PATH_MAX_LENGTH:
        raise ValueError(
            f"Memory path {path[:40]!r}... is {len(path)} characters long; this store keeps "
            f"paths of at most {MEMORY_PATH_MAX_LENGTH}. Use a shorter namespace or file name."
        )


def _validate_prefix(prefix: str) -> None:
    if prefix:
        validate_memory_path(prefix.removesuffix("/"))


def neutralize_memory_tags(text: str) -> str:
    """Return ``text`` with every ``<memory>``/``</memory>`` tag made inert.

    The ``<`` that opens such a tag (any letter case, any whitespace before or after the
    ``/``, any attributes or spacing before the ``>``) becomes ``&lt;``, so stored text can
    neither close the ``<memory>`` block it is injected into nor open a forged one. Harness
    0.62 escapes the same character when it renders the block; 0.75 renders it as stored (with
    a note), so there this is the fence's only escape. The word "memory" and every other ``<``
    are left alone. Idempotent: the result contains no tag to escape again.
    """
    return _MEMORY_TAG_RE.sub("&lt;", text)


def _encode_metadata(metadata: Mapping[str, str] | None) -> str | None:
    """Validate write metadata as the harness stores do and return its JSON, or ``None``."""
    if not metadata:
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise TypeError(f"Memory metadata keys and values must be strings; got {dict(metadata)!r}.")
    if any("\x00" in k or "\x00" in v for k, v in metadata.items()):
        raise ValueError("Memory metadata keys and values must not contain NUL characters.")
    encoded = json.dumps(dict(metadata), ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    if len(encoded) > _MAX_METADATA_CHARS:
        raise ValueError(
            f"Memory metadata is {len(encoded)} characters as JSON; the limit is "
            f"{_MAX_METADATA_CHARS}. Record less about each write."
        )
    return encoded


def _decode_metadata(encoded: str | None) -> dict[str, str] | None:
    if encoded is None:
        return None
    try:
        value = json.loads(encoded)
    except ValueError:
        value = None
    if isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return cast("dict[str, str]", value) or None
    _logger.warning("Ignoring stored memory metadata that is not a JSON object of strings.")
    return None


class DefaultMemoryStore(OwnerScoped):
    """A durable, owner-scoped harness ``MemoryStore`` over ``StoredMemoryFile`` rows.

    Two ways to build it, both failing closed:

    * ``DefaultMemoryStore(request)``: the owner is ``resolve_owner_id(request)``, and paths
      (``<namespace>/<agent>/<file>.md``) are looked up only inside that owner's rows, whatever
      namespace the capability was handed. An anonymous request without
      ``allow_anonymous=True`` (or without a session) is not served: reads return
      ``None``/``[]``, and writes and deletes change nothing while reporting success (a write
      reports a fresh version), because the memory tools run mid-run and a raise would abort it.
    * ``DefaultMemoryStore()``: for a ``Memory`` capability built once at mount time, whose
      namespace comes from ``memory_namespace_for_user(ctx.deps.user)``. The owner of a path is
      its first segment (the server-resolved namespace). Listing needs a prefix naming that
      namespace (``list_paths("")`` lists nothing), ``get_operation`` returns ``None`` (a
      receipt is still replayed atomically by ``write``/``delete``), and the shared anonymous
      namespaces (``anon``, ``anon-*``) are served only with ``allow_anonymous=True``.

    Versions are random UUID hex strings, so a version never repeats, even after a delete
    and recreate. Write and delete are compare-and-set on ``expected_version`` (``None``: the
    path must not exist) and raise the harness's ``MemoryConflictError``; an ``operation``'s
    receipt is checked and recorded in the same transaction, so a replay returns the first
    result (``replayed=True``) and a reused id with another fingerprint raises
    ``MemoryOperationConflictError``. Content passes through ``neutralize_memory_tags`` on
    write. ``max_files`` (checked when a write creates a path) and ``max_total_chars`` (all the
    owner's files after the write) are raised as ``ModelRetry`` so the model can tidy up;
    ``None`` disables a ceiling. Paths are listed and sorted by code point on every database.
    """

    def __init__(
        self,
        request: HttpRequest | None = None,
        *,
        allow_anonymous: bool = False,
        max_files: int | None = DEFAULT_MAX_MEMORY_FILES,
        max_total_chars: int | None = DEFAULT_MAX_MEMORY_TOTAL_CHARS,
    ) -> None:
        for name, value in (("max_files", max_files), ("max_total_chars", max_total_chars)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"{name} must be an int or None, got {value!r}.")
            if value is not None and value < 1:
                raise ValueError(
                    f"{name} must be at least 1, got {value!r}; pass None for no ceiling."
                )
        super().__init__(request, allow_anonymous=allow_anonymous)
        self._max_files = max_files
        self._max_total_chars = max_total_chars

    def _owner_of(self, path: str) -> str | None:
        """The owner ``path`` belongs to for this store, or ``None`` when it is not served."""
        if self._request is not None:
            return self._request_owner()
        namespace = path.split("/", 1)[0]
        if not namespace:
            return None
        anonymous = namespace == ANONYMOUS_MEMORY_NAMESPACE or namespace.startswith(
            f"{ANONYMOUS_MEMORY_NAMESPACE}-"
        )
        return None if anonymous and not self._allow_anonymous else namespace

    async def read(self, path: str, *, max_chars: int) -> MemoryFile | None:
        """The file at ``path`` cut to ``max_chars`` (``truncated`` set), or ``None``.

        The version is always the whole file's. ``ValueError`` for a bad path or
        ``max_chars <= 0``.
        """
        validate_memory_path(path)
        if max_chars <= 0:
            raise ValueError(f"max_chars must be positive, got {max_chars!r}.")

        def op(owner: str) -> MemoryFile | None:
            row = (
                StoredMemoryFile.objects.filter(owner_id=owner, path=path)
                .annotate(
                    head=Substr("content", 1, min(max_chars, _SQL_COUNT_MAX)),
                    size=Length("content"),
                )
                .values("head", "size", "version", "operation_id", "write_metadata")
                .first()
            )
            if row is None:
                return None
            return MemoryFile(
                content=row["head"],
                version=row["version"],
                operation_id=row["operation_id"],
                truncated=row["size"] > max_chars,
                metadata=_decode_metadata(row["write_metadata"]),
            )

        return await self._call(op, None, path=path)

    async def get_operation(self, operation: MemoryOperation) -> MemoryMutation | None:
        """The earlier result of ``operation`` with ``replayed=True``, or ``None``.

        Raises ``MemoryOperationConflictError`` if the id was used with another fingerprint.
        Always ``None`` for a store built without a request (see the class docs).
        """
        if self._request is None:
            return None
        return await self._call(lambda owner: _receipt(owner, operation), None)

    async def write(
        self,
        path: str,
        content: str,
        *,
        expected_version: str | None,
        operation: MemoryOperation | None = None,
    ) -> MemoryMutation:
        """Create or replace ``path`` if its version is ``expected_version``; no metadata."""
        return await self.write_with_metadata(
            path, content, expected_version=expected_version, metadata=None, operation=operation
        )

    async def write_with_metadata(
        self,
        path: str,
        content: str,
        *,
        expected_version: str | None,
        metadata: Mapping[str, str] | None,
        operation: MemoryOperation | None = None,
    ) -> MemoryMutation:
        """``write``, recording ``metadata`` (replacing the previous writer's) atomically.

        Raises ``MemoryConflictError`` (stale version), ``MemoryOperationConflictError``
        (an owner ceiling, or a NUL character in ``content``, which PostgreSQL cannot store),
        ``ValueError``/``TypeError`` (bad path or metadata).
        """
        validate_memory_path(path)
        encoded = _encode_metadata(metadata)
        if "\x00" in content:
            raise ModelRetry(
                f"The text for {path!r} contains a NUL character (\\u0000), which memory "
                "cannot store; nothing was written. Remove it and write again."
            )
        stored = neutralize_memory_tags(content)

        def apply(owner: str, current: str | None) -> MemoryMutation:
            self._check_ceilings(owner, path, len(stored), creating=current is None)
            version = uuid.uuid4().hex
            operation_id = None if operation is None else operation.id
            if current is None:
                try:
                    with write_transaction():
                        StoredMemoryFile.objects.create(
                            owner_id=owner,
                            path=path,
                            content=stored,
                            version=version,
                            operation_id=operation_id,
                            write_metadata=encoded,
                        )
                except IntegrityError as exc:  # pragma: no cover - a create racing ours
                    raise MemoryConflictError(
                        f"Memory path {path!r} was created concurrently; read it and retry."
                    ) from exc
            else:
                updated = StoredMemoryFile.objects.filter(
                    owner_id=owner, path=path, version=current
                ).update(
                    content=stored,
                    version=version,
                    operation_id=operation_id,
                    write_metadata=encoded,
                    updated_at=timezone.now(),
                )
                if updated != 1:  # pragma: no cover - the row lock keeps the version
                    raise MemoryConflictError(
                        f"Memory path {path!r} changed while it was written; retry."
                    )
            return MemoryMutation(version=version, replayed=False, existed=current is not None)

        return await self._call(
            lambda owner: _compare_and_set(
                owner, path, expected_version, operation, "written", apply
            ),
            MemoryMutation(version=uuid.uuid4().hex, replayed=False, existed=False),
            path=path,
        )

    async def delete(
        self,
        path: str,
        *,
        expected_version: str | None,
        operation: MemoryOperation | None = None,
    ) -> MemoryMutation:
        """Delete ``path`` if its version is ``expected_version``; returns ``version=None``.

        Deleting a missing path with ``expected_version=None`` succeeds with
        ``existed=False``. Raises ``MemoryConflictError`` and ``MemoryOperationConflictError``
        like ``write``.
        """
        validate_memory_path(path)

        def apply(owner: str, current: str | None) -> MemoryMutation:
            if current is not None:
                StoredMemoryFile.objects.filter(owner_id=owner, path=path, version=current).delete()
            return MemoryMutation(version=None, replayed=False, existed=current is not None)

        return await self._call(
            lambda owner: _compare_and_set(
                owner, path, expected_version, operation, "deleted", apply
            ),
            MemoryMutation(version=None, replayed=False, existed=False),
            path=path,
        )

    async def list_paths(self, prefix: str = "", *, limit: int) -> list[str]:
        """The owner's paths starting with ``prefix``, in code-point order, at most ``limit``.

        Matching is a range comparison on a binary-collated column, so it is case-sensitive
        on every database. ``ValueError`` for a bad prefix or ``limit <= 0``.
        """
        _validate_prefix(prefix)
        if limit <= 0:
            raise ValueError(f"limit must be positive, got {limit!r}.")

        def op(owner: str) -> list[str]:
            rows = StoredMemoryFile.objects.filter(
                owner_id=owner, path__gte=prefix, path__lt=prefix + _PREFIX_END
            ).order_by("path")
            return list(rows.values_list("path", flat=True)[: min(limit, _SQL_COUNT_MAX)])

        return await self._call(op, [], path=prefix)

    def _check_ceilings(self, owner: str, path: str, size: int, *, creating: bool) -> None:
        if self._max_files is None and self._max_total_chars is None:
            return
        usage = StoredMemoryFile.objects.filter(owner_id=owner).aggregate(
            files=Count("pk"), others=Sum(Length("content"), filter=~Q(path=path))
        )
        files, others = usage["files"], usage["others"] or 0
        if creating and self._max_files is not None and files >= self._max_files:
            raise ModelRetry(
                f"Memory already holds {files} files, the most it keeps, so {path!r} cannot "
                "be created: add to an existing file or delete one you no longer need."
            )
        if self._max_total_chars is not None and others + size > self._max_total_chars:
            raise ModelRetry(
                f"Writing {path!r} would bring memory to {others + size} characters; the "
                f"limit is {self._max_total_chars}. Shorten this text, or condense or "
                "delete other memory files first."
            )

    @staticmethod
    def purge(owner_id: str) -> int:
        """Delete all memory files and receipts of ``owner_id``; return how many files went.

        ``owner_id`` is what the rows are partitioned by: the resolved owner id (``"42"``,
        ``"anon:<session>"``) for request-bound stores, the namespace (``"u-42"``) for stores
        built without a request. Synchronous; from async code wrap it in ``sync_to_async``.
        Raises ``ValueError`` for an empty owner id.
        """
        if not isinstance(owner_id, str) or not owner_id:
            raise ValueError(
                f"purge() needs the non-empty owner id whose memory to delete, got {owner_id!r}."
            )
        with write_transaction():
            StoredMemoryOperation.objects.filter(owner_id=owner_id).delete()
            _, per_model = StoredMemoryFile.objects.filter(owner_id=owner_id).delete()
        return per_model.get(StoredMemoryFile._meta.label, 0)

    @staticmethod
    async def apurge(owner_id: str) -> int:
        """Async twin of ``purge``: one worker-thread hop, off the event loop."""
        return await sync_to_async(DefaultMemoryStore.purge)(owner_id)


def _compare_and_set(
    owner: str,
    path: str,
    expected_version: str | None,
    operation: MemoryOperation | None,
    verb: str,
    apply: Callable[[str, str | None], MemoryMutation],
) -> MemoryMutation:
    """Replay ``operation``'s receipt, or ``apply(owner, current)`` if ``path`` is unchanged.

    One transaction: the receipt check, the version check (``MemoryConflictError`` naming the
    ``verb``), ``apply`` and the new receipt.
    """
    with write_transaction():
        if operation is not None and (receipt := _receipt(owner, operation)) is not None:
            return receipt
        current = _current_version(owner, path)
        if current != expected_version:
            raise MemoryConflictError(
                f"Memory path {path!r} changed before it could be {verb} (expected "
                f"version {expected_version!r}); read it again and retry."
            )
        mutation = apply(owner, current)
        if operation is not None:
            _record_receipt(owner, operation, mutation)
        return mutation


def _current_version(owner: str, path: str) -> str | None:
    """The path's version, locking its row where the database supports it."""
    return (
        StoredMemoryFile.objects.select_for_update()
        .filter(owner_id=owner, path=path)
        .values_list("version", flat=True)
        .first()
    )


def _receipt(owner: str, operation: MemoryOperation) -> MemoryMutation | None:
    row = StoredMemoryOperation.objects.filter(owner_id=owner, operation_id=operation.id).first()
    if row is None:
        return None
    if row.fingerprint != operation.fingerprint:
        raise MemoryOperationConflictError(
            f"Memory operation id {operation.id!r} was already used with different arguments; "
            "give each distinct operation its own id."
        )
    return MemoryMutation(version=row.version, replayed=True, existed=row.existed)


def _record_receipt(owner: str, operation: MemoryOperation, mutation: MemoryMutation) -> None:
    StoredMemoryOperation.objects.create(
        owner_id=owner,
        operation_id=operation.id,
        fingerprint=operation.fingerprint,
        version=mutation.version,
        existed=mutation.existed,
    )
