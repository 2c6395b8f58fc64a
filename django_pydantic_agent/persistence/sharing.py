"""Share links: a read-only snapshot of a thread's active branch, opened by an unguessable token.

A store that keeps share links implements ``SharesThreads`` (``StoreFeatures.share``). The
owner's side is owner-scoped like every store method (another owner's thread reads as
missing); ``open_shared`` is the one read that takes no request: the token is the credential.

Tokens are 256 random bits, URL-safe (``new_share_token``). A store keeps only their SHA-256
(``share_digest``), so a copy of the database opens no link; it finds a link by the digest and
compares it again in constant time (``same_digest``), so a database whose text comparison
folds case or trailing spaces cannot let a near miss in. ``snapshot_messages`` copies what a
link may show of a thread: the messages of the active branch a reader sees, without the
store's bookkeeping, inline file bytes, or attachment references unless the owner chose to
include them.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from datetime import datetime

    from django.http import HttpRequest

__all__ = [
    "TOKEN_BYTES",
    "ShareLink",
    "SharedThread",
    "SharesThreads",
    "is_share_token",
    "new_share_token",
    "same_digest",
    "share_digest",
    "shared_attachment_ids",
    "snapshot_messages",
]

#: Random bytes in a token: 256 bits, 43 URL-safe characters.
TOKEN_BYTES = 32
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
#: The roles a reader of a shared thread sees (the chat page renders these); system and
#: developer messages are the agent's instructions, never shared.
_SHOWN_ROLES = frozenset({"user", "assistant", "reasoning", "tool"})
#: The keys of a wire message a snapshot keeps (``content``, ``toolCalls`` and
#: ``attachments`` are copied field by field).
_KEPT_KEYS = ("id", "role", "toolCallId", "status", "error")


def new_share_token() -> str:
    """A fresh token: ``TOKEN_BYTES`` from ``secrets``, base64url without padding."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def is_share_token(value: object) -> bool:
    """Whether ``value`` has the shape of a token (anything else opens nothing)."""
    return isinstance(value, str) and _TOKEN.fullmatch(value) is not None


def share_digest(token: str) -> str:
    """What a store keeps of ``token``: its SHA-256, in hex."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def same_digest(stored: str, computed: str) -> bool:
    """Whether two digests are equal, compared in constant time."""
    return hmac.compare_digest(stored.encode(), computed.encode())


@dataclass(frozen=True, kw_only=True)
class ShareLink:
    """A live link of the owner's, as the owner lists it: never its token (a store keeps only
    the digest, so a link is shown once, when it is made)."""

    thread_id: str
    title: str
    created_at: datetime
    expires_at: datetime
    include_attachments: bool


@dataclass(frozen=True, kw_only=True)
class SharedThread:
    """What a live link opens: the snapshot, and (for the server only, never on the wire) the
    thread and owner it was taken from."""

    thread_id: str
    owner_id: str
    title: str
    messages: list[Any]
    created_at: datetime
    expires_at: datetime
    include_attachments: bool


@runtime_checkable
class SharesThreads(Protocol):
    """Optional: a store that keeps share links (one live link per thread)."""

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
        thread, ending the thread's live link if it has one; ``None`` (nothing kept) when the
        owner has no such thread."""
        ...

    async def share_links(
        self, *, request: HttpRequest, thread_id: str | None = None
    ) -> list[ShareLink]:
        """The owner's live links (not revoked, not expired), newest first; only the one of
        ``thread_id`` when it is given."""
        ...

    async def unshare(self, thread_id: str, *, request: HttpRequest) -> bool:
        """End the live link of the owner's thread; whether there was one."""
        ...

    async def open_shared(self, digest: str) -> SharedThread | None:
        """The live link whose token has ``digest`` (compared with ``same_digest``); ``None``
        for an unknown, revoked or expired one."""
        ...


def _refs(message: Mapping[str, Any]) -> list[Any]:
    """The attachment references of a wire message: ``attachments``, else
    ``metadata.attachments``."""
    refs = message.get("attachments")
    if not isinstance(refs, list):
        metadata = message.get("metadata")
        refs = metadata.get("attachments") if isinstance(metadata, Mapping) else None
    return refs if isinstance(refs, list) else []


def _ref(ref: Any) -> dict[str, Any] | None:
    """A reference as a snapshot keeps it: id, name, type and size (never a direct URL)."""
    if isinstance(ref, str):
        ref = {"id": ref}
    if not isinstance(ref, Mapping) or not isinstance(ref.get("id"), str):
        return None
    kept = {"id": ref["id"], "name": str(ref.get("name") or "attachment")}
    if isinstance(ref.get("mime"), str):
        kept["mime"] = ref["mime"]
    size = ref.get("size")
    if isinstance(size, int) and not isinstance(size, bool):
        kept["size"] = size
    return kept


def _content(content: Any) -> Any:
    """Text as is; of a list of parts, only the text parts (file parts carry bytes or URLs)."""
    if not isinstance(content, list):
        return content if isinstance(content, str) else ""
    return [
        {"type": "text", "text": part["text"]}
        for part in content
        if isinstance(part, Mapping)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    ]


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    kept = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping) and isinstance(call.get("id"), str):
            kept.append(
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": str(function.get("name", "")),
                        "arguments": str(function.get("arguments", "")),
                    },
                }
            )
    return kept


def snapshot_messages(messages: list[Any], *, include_attachments: bool) -> list[dict[str, Any]]:
    """What a link shows of ``messages`` (the active branch, each with its ``status``).

    User, assistant, reasoning and tool messages only; of each its id, role, text, tool calls
    and results, status and error. Metadata, bookkeeping, encrypted reasoning and file parts
    are left out; attachment references (id, name, type, size) only with
    ``include_attachments``, otherwise none at all (not even the file names).
    """
    snapshot = []
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") not in _SHOWN_ROLES:
            continue
        kept = {key: message[key] for key in _KEPT_KEYS if key in message}
        kept["content"] = _content(message.get("content"))
        calls = _tool_calls(message.get("toolCalls"))
        if calls:
            kept["toolCalls"] = calls
        if include_attachments:
            refs = [ref for ref in map(_ref, _refs(message)) if ref is not None]
            if refs:
                kept["attachments"] = refs
        snapshot.append(kept)
    return snapshot


def shared_attachment_ids(messages: list[Any]) -> set[str]:
    """The attachment ids a snapshot quotes: the only files its link may serve."""
    return {
        ref["id"]
        for message in messages
        if isinstance(message, Mapping)
        for ref in message.get("attachments") or ()
        if isinstance(ref, Mapping) and isinstance(ref.get("id"), str)
    }
