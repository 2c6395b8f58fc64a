"""Where webhooks may go: http(s) URLs whose host resolves only to addresses a project allows.

A webhook URL is checked when the server is configured (``Webhooks``) and again before every
attempt, since what a name resolves to can change (DNS rebinding). Every address the host
resolves to must pass: loopback addresses only with ``allow_loopback``, private ones (RFC 1918,
unique-local, carrier-grade NAT, documentation ranges) only with ``allow_private``, and
link-local (cloud metadata at 169.254.169.254), multicast, unspecified and reserved addresses
never. An IPv6 address that carries an IPv4 one (mapped ``::ffff:a.b.c.d``, 6to4, NAT64) is
judged by the IPv4 address. The attempt then connects to the address that was checked, not to
whatever the name resolves to a moment later.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import SplitResult, urlsplit

__all__ = [
    "MAX_URL_LENGTH",
    "WebhookTargetError",
    "check_target",
    "resolve_target",
    "shown_url",
]

#: The longest webhook URL accepted, in characters.
MAX_URL_LENGTH: Final[int] = 2000

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class WebhookTargetError(ValueError):
    """A webhook URL is not one webhooks may be sent to (its scheme, or where it resolves)."""


def shown_url(url: str) -> str:
    """``url`` as logs and errors show it: scheme, host, port and path, without the user info,
    query or fragment (where a receiver's token may sit)."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<unreadable URL>"
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"


def parse_url(url: object) -> SplitResult:
    """``url`` split, or ``WebhookTargetError`` unless it is an absolute http(s) URL."""
    if not isinstance(url, str) or len(url) > MAX_URL_LENGTH:
        raise WebhookTargetError(
            f"Webhook URL {url!r} is not a string of at most {MAX_URL_LENGTH} characters; "
            "pass one such as 'https://hooks.example.com/agent'."
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError as exc:
        raise WebhookTargetError(f"Webhook URL {url!r} cannot be read: {exc}.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookTargetError(
            f"Webhook URL {url!r} is not an http or https URL with a host; pass one such "
            "as 'https://hooks.example.com/agent'."
        )
    return parts


def _judged(address: _IP) -> _IP:
    """The address a check judges: the IPv4 address an IPv6 one carries, else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        carried = address.ipv4_mapped or address.sixtofour
        if carried is not None:
            return carried
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def refusal(address: str, *, allow_private: bool, allow_loopback: bool) -> str | None:
    """Why webhooks may not go to ``address`` (an IP address), or ``None`` when they may."""
    judged = _judged(ipaddress.ip_address(address.split("%", 1)[0]))
    if judged.is_loopback:
        return None if allow_loopback else "a loopback address (allow_loopback=True allows it)"
    if judged.is_link_local or judged.is_multicast or judged.is_unspecified or judged.is_reserved:
        return "a link-local, multicast, unspecified or reserved address (never allowed)"
    if judged.is_global or allow_private:
        return None
    return "a private address (allow_private=True allows it)"


def _check(url: str, host: str, addresses: list[str], **allowed: bool) -> str:
    """The first of ``addresses``, or ``WebhookTargetError`` if any of them is refused."""
    if not addresses:
        raise WebhookTargetError(
            f"Webhook host {host!r} of {shown_url(url)!r} resolves to no address."
        )
    for address in addresses:
        why = refusal(address, **allowed)
        if why is not None:
            raise WebhookTargetError(
                f"Webhook URL {shown_url(url)!r} is refused: {host!r} resolves to {address}, {why}."
            )
    return addresses[0]


def _addresses(infos: Sequence[tuple[Any, ...]]) -> list[str]:
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def check_target(url: str, *, allow_private: bool = False, allow_loopback: bool = False) -> None:
    """Check ``url`` where a project configures it (synchronous: it may resolve the host).

    Raises ``WebhookTargetError`` for a URL that is not http(s), or whose host resolves to an
    address that is not allowed. A host that does not resolve now passes: every attempt
    resolves and checks it again.
    """
    parts = parse_url(url)
    host = parts.hostname or ""
    try:
        infos = socket.getaddrinfo(host, parts.port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return
    _check(url, host, _addresses(infos), allow_private=allow_private, allow_loopback=allow_loopback)


async def resolve_target(url: str, *, allow_private: bool, allow_loopback: bool) -> str:
    """The IP address an attempt to ``url`` connects to, resolved and checked now.

    Raises ``WebhookTargetError`` as ``check_target`` does, and for a host that does not
    resolve.
    """
    parts = parse_url(url)
    host = parts.hostname or ""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, parts.port, type=socket.SOCK_STREAM
        )
    except (OSError, UnicodeError) as exc:
        raise WebhookTargetError(f"Webhook host {host!r} does not resolve ({exc}).") from None
    return _check(
        url,
        host,
        _addresses(list(infos)),
        allow_private=allow_private,
        allow_loopback=allow_loopback,
    )
