"""Self-locating uuids: a chat uuid certifies itself, and every child uuid names its chat.

Layout (RFC 9562 version 8, "custom"):

- chat uuid: ``R`` (8 bytes, random, version nibble 8) followed by ``tag(R)`` (8 bytes of a
  SHA-256 over ``R``, variant bits ``10``). The second half proves the uuid is one of ours.
- child uuid (message, tool call, reasoning): the chat's ``R`` followed by 8 random bytes
  (variant bits ``10``). ``R || tag(R)`` is therefore the chat uuid of any child.

The reference mints uuid4s; they never pass :func:`is_own_chat_uuid`, so a reference-written
entity is resolved through its ``<kind>:<uuid>`` locator instead.
"""

from __future__ import annotations

import hashlib
import secrets
from uuid import UUID, uuid4

__all__ = ["chat_uuid_of", "is_own_chat_uuid", "mint_chat_uuid", "mint_child_uuid"]

_TAG_DOMAIN = b"django-pydantic-agent/chat-uuid\0"


def _with_version(head: bytes) -> bytes:
    """``head`` (8 bytes) with the version nibble (byte 6, high half) set to 8."""
    return head[:6] + bytes([(head[6] & 0x0F) | 0x80]) + head[7:]


def _with_variant(tail: bytes) -> bytes:
    """``tail`` (8 bytes) with the RFC variant bits (byte 0, top two bits) set to ``10``."""
    return bytes([(tail[0] & 0x3F) | 0x80]) + tail[1:]


def _tag(head: bytes) -> bytes:
    return _with_variant(hashlib.sha256(_TAG_DOMAIN + head).digest()[:8])


def mint_chat_uuid() -> UUID:
    """A fresh chat uuid whose second half certifies the first."""
    head = _with_version(secrets.token_bytes(8))
    return UUID(bytes=head + _tag(head))


def is_own_chat_uuid(value: UUID) -> bool:
    """Whether ``value`` was minted by :func:`mint_chat_uuid`."""
    raw = value.bytes
    return raw[6] >> 4 == 8 and raw[8:] == _tag(raw[:8])


def mint_child_uuid(chat_uuid: UUID) -> UUID:
    """A fresh uuid for a record of ``chat_uuid``; a uuid4 when the chat is not one of ours."""
    if not is_own_chat_uuid(chat_uuid):
        return uuid4()
    return UUID(bytes=chat_uuid.bytes[:8] + _with_variant(secrets.token_bytes(8)))


def chat_uuid_of(value: UUID) -> UUID | None:
    """The chat uuid a child uuid names, or ``None`` for a uuid that carries none (uuid4)."""
    raw = value.bytes
    if raw[6] >> 4 != 8:
        return None
    return UUID(bytes=raw[:8] + _tag(raw[:8]))
