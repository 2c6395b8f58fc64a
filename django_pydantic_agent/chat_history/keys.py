"""Deterministic key derivations shared by every chat-history backend.

The values are byte-identical to the ``datarobot`` reference (``chat_history/constants.py``), so
chats written by either implementation are found by the other.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final, Literal
from uuid import UUID

__all__ = [
    "DEDUPLICATION_KEY_LENGTH",
    "LOCATOR_KINDS",
    "LocatorKind",
    "chat_deduplication_key",
    "emitter_for_role",
    "locator_key",
    "normalize_participant_id",
    "participant_id",
    "session_deduplication_key",
]

DEDUPLICATION_KEY_LENGTH: Final[int] = 64
"""Memory Service deduplication keys may be up to 72 characters; the hex digest is cut to 64."""

LocatorKind = Literal["chat", "message", "tool_call", "reasoning"]
LOCATOR_KINDS: Final[tuple[LocatorKind, ...]] = ("chat", "message", "tool_call", "reasoning")
"""The entity kinds a locator key may name."""

_PARTICIPANT_RE = re.compile(r"[0-9a-f]{24}")


def session_deduplication_key(namespace: str, *parts: str) -> str:
    """Return a stable, namespaced deduplication key for idempotent session create.

    The namespace and the parts are joined with NUL separators (``namespace\\0p1\\0p2``; with no
    parts, ``namespace\\0``), encoded as UTF-8 and hashed with SHA-256; the lowercase hex digest
    is cut to :data:`DEDUPLICATION_KEY_LENGTH` characters.
    """
    raw = namespace + "\0" + "\0".join(parts)
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:DEDUPLICATION_KEY_LENGTH]


def chat_deduplication_key(user_uuid: UUID, thread_id: str) -> str:
    """Return the deduplication key of the chat of ``(user_uuid, thread_id)``.

    Case-sensitive in ``thread_id``; a retried create for the same pair adopts the same session.
    """
    return session_deduplication_key("chat", str(user_uuid), thread_id)


def normalize_participant_id(raw: str | None) -> str | None:
    """Return ``raw`` as a 24-character lowercase hex participant id, or ``None``.

    Surrounding whitespace is stripped and case folded; anything but exactly 24 hex digits
    (a ``0x`` prefix, a sign, underscores, other lengths) gives ``None``.
    """
    if not raw:
        return None
    candidate = raw.strip().lower()
    if _PARTICIPANT_RE.fullmatch(candidate) is None:
        return None
    return candidate


def participant_id(user_uuid: UUID, *, override: str | None = None) -> str:
    """Return a stable 24-hex participant id for a user.

    ``override`` (for example a DataRobot user id) is used when it normalizes to a valid id;
    otherwise the id is the SHA-256 of the 16 raw UUID bytes, cut to 24 hex characters.
    """
    normalized = normalize_participant_id(override)
    if normalized is not None:
        return normalized
    return hashlib.sha256(user_uuid.bytes).hexdigest()[:24]


def locator_key(kind: LocatorKind, uuid: UUID) -> str:
    """Return the locator key ``"<kind>:<uuid>"`` (at most 46 characters, never hashed).

    Raises:
        ValueError: If ``kind`` is not one of :data:`LOCATOR_KINDS`.
    """
    if kind not in LOCATOR_KINDS:
        raise ValueError(
            f"Unknown locator kind {kind!r}; expected one of {', '.join(LOCATOR_KINDS)}."
        )
    return f"{kind}:{uuid}"


def emitter_for_role(role: str, pid: str | None) -> tuple[Literal["user", "agent"], str | None]:
    """Return the event emitter of a message: ``("user", pid)`` for role user, else agent."""
    if role == "user":
        return "user", pid
    return "agent", None
