"""Standard Webhooks signatures: ``whsec_`` secrets and the ``webhook-*`` headers they sign.

The scheme (standardwebhooks.com, spec 1.0): the key is the base64-decoded part of a
``whsec_<base64>`` secret, and ``webhook-signature`` is ``v1,<base64 HMAC-SHA256 of
"{webhook-id}.{webhook-timestamp}.{body}">``, one such entry per secret, space-delimited (a
secret being rotated signs beside the new one). ``webhook-timestamp`` is the attempt's time in
whole Unix seconds; ``webhook-id`` stays the same on every retry of one event.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Final

__all__ = ["SECRET_PREFIX", "new_secret", "secret_key", "signature", "signed_headers"]

#: How a Standard Webhooks symmetric secret starts.
SECRET_PREFIX: Final[str] = "whsec_"
#: The spec's bounds on a symmetric key, in bytes (192 to 512 bits).
_MIN_KEY_BYTES, _MAX_KEY_BYTES = 24, 64


def new_secret() -> str:
    """A fresh ``whsec_`` secret of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_<base64>`` secret.

    Raises ``TypeError``/``ValueError`` saying what is wrong with it; the message never
    repeats the secret, so it is safe to log.
    """
    if not isinstance(secret, str):
        raise TypeError(
            f"A webhook secret must be a string 'whsec_<base64>', not a {type(secret).__name__}."
        )
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(
            "The webhook secret does not start with 'whsec_': pass a Standard Webhooks secret, "
            "for example one from django_pydantic_agent.webhooks.new_secret()."
        )
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except binascii.Error:
        raise ValueError(
            "The part of the webhook secret after 'whsec_' is not valid base64; copy the "
            "whole secret, or make one with django_pydantic_agent.webhooks.new_secret()."
        ) from None
    if not _MIN_KEY_BYTES <= len(key) <= _MAX_KEY_BYTES:
        raise ValueError(
            f"The webhook secret decodes to {len(key)} bytes; Standard Webhooks keys have "
            f"{_MIN_KEY_BYTES} to {_MAX_KEY_BYTES}. Make one with "
            "django_pydantic_agent.webhooks.new_secret()."
        )
    return key


def signature(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` entry: the HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` with ``key``."""
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signed_headers(
    keys: Sequence[bytes], webhook_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The headers of one delivery attempt of ``body`` (JSON), signed with each of ``keys``."""
    return {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(k, webhook_id, timestamp, body) for k in keys),
    }
