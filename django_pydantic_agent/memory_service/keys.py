"""Field markers, constants and the ``description`` range-key encoding.

A :class:`~django_pydantic_agent.memory_service.DRSession` subclass routes each declared field to
one wire slot, chosen by the marker in its ``Annotated[...]`` metadata (the bare marker class or
an instance both count):

- :class:`DRDeduplicationKey`: the session ``deduplicationKey`` (at most one field);
- :class:`DRRangeKey`: one segment of the encoded ``description`` (declaration order);
- :class:`DRConcurrencyField`: mirrors the server ``version`` (at most one field, never sent);
- no marker: a key inside ``metadata``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic.fields import FieldInfo

__all__ = [
    "DEFAULT_SESSION_TTL_SECONDS",
    "MAX_DESCRIPTION_LENGTH",
    "SYSTEM_PARTICIPANT",
    "DRConcurrencyField",
    "DRDeduplicationKey",
    "DRRangeKey",
    "decode_description",
    "encode_description",
]

SYSTEM_PARTICIPANT: str = "000000000000000000000000"
"""Participant ObjectId for sessions that belong to no user (a client-side convention)."""

DEFAULT_SESSION_TTL_SECONDS: int = 63_072_000
"""Two years: the default ``soft_delete`` TTL sent on session create, and the service maximum."""

MAX_DESCRIPTION_LENGTH = 1000


class DRDeduplicationKey:
    """Marker: the field is the session ``deduplicationKey`` (point lookups, idempotent create).

    At most one field per session class. ``post()`` adopts the existing session on a
    deduplication conflict and ``get(space, <field>=value)`` finds a session by it.
    """


class DRRangeKey:
    """Marker: the field is one segment of the session ``description``, queryable by prefix.

    Segments follow the ``//prefix/k1/k2/`` scheme in declaration order. Values must be
    non-empty. The service's filter ignores case, so values differing only in case collide.
    """


class DRConcurrencyField:
    """Marker: the field mirrors the server ``version`` integer (read-only, never sent).

    At most one field per session class. The version is tracked for ``If-Match`` whether or
    not a field carries this marker.
    """


_MARKERS: tuple[type, ...] = (DRDeduplicationKey, DRRangeKey, DRConcurrencyField)


def markers_of(field: FieldInfo) -> list[type]:
    """Return the marker classes found in a field's metadata (class or instance form)."""
    found: list[type] = []
    for item in field.metadata:
        for marker in _MARKERS:
            if item is marker or isinstance(item, marker):
                found.append(marker)
    return found


@dataclass(frozen=True, kw_only=True)
class SessionRouting:
    """Where each declared field of a session class travels on the wire."""

    dedup: str | None
    concurrency: str | None
    range_keys: tuple[str, ...]
    metadata: tuple[str, ...]


def build_session_routing(class_name: str, fields: dict[str, FieldInfo]) -> SessionRouting:
    """Classify a session class's fields by marker.

    Raises:
        TypeError: If a field carries more than one marker, or two fields carry the
            deduplication or concurrency marker.
    """
    dedup: str | None = None
    concurrency: str | None = None
    range_keys: list[str] = []
    metadata: list[str] = []
    for name, field in fields.items():
        found = markers_of(field)
        if len(found) > 1:
            raise TypeError(
                f"{class_name}.{name} carries several markers "
                f"({', '.join(m.__name__ for m in found)}); keep exactly one."
            )
        marker = found[0] if found else None
        if marker is DRDeduplicationKey:
            if dedup is not None:
                raise TypeError(
                    f"{class_name} declares two DRDeduplicationKey fields ({dedup!r} and "
                    f"{name!r}); a session has one deduplication key, keep one marker."
                )
            dedup = name
        elif marker is DRConcurrencyField:
            if concurrency is not None:
                raise TypeError(
                    f"{class_name} declares two DRConcurrencyField fields ({concurrency!r} and "
                    f"{name!r}); a session has one version, keep one marker."
                )
            concurrency = name
        elif marker is DRRangeKey:
            range_keys.append(name)
        else:
            metadata.append(name)
    return SessionRouting(
        dedup=dedup,
        concurrency=concurrency,
        range_keys=tuple(range_keys),
        metadata=tuple(metadata),
    )


def _escape(value: str) -> str:
    return value.replace("%", "%25").replace("/", "%2F")


def _unescape(value: str) -> str:
    return value.replace("%2F", "/").replace("%25", "%")


def encode_description(prefix: str, segments: Sequence[str], *, complete: bool = True) -> str:
    """Encode ``//prefix/seg1/seg2/`` with ``%`` then ``/`` percent-escaped in each part.

    With ``complete=False`` the result is a query needle for a leading prefix of the segments;
    the encoding is identical (every part ends in ``/``), only the error wording differs.

    Raises:
        ValueError: If the encoded value is longer than 1000 characters.
    """
    encoded = "//" + _escape(prefix) + "/" + "".join(_escape(s) + "/" for s in segments)
    if len(encoded) > MAX_DESCRIPTION_LENGTH:
        what = "description" if complete else "description filter"
        raise ValueError(
            f"The encoded {what} {encoded[:60]!r}... is {len(encoded)} characters long, over "
            f"the service limit of {MAX_DESCRIPTION_LENGTH}; shorten the range-key values."
        )
    return encoded


def decode_description(prefix: str, stored: str | None, count: int) -> list[str] | None:
    """Decode ``count`` range-key segments from a stored description.

    Returns ``None`` when the description does not start with this prefix or holds fewer than
    ``count`` segments (the caller then leaves the range fields unset); extra segments are
    ignored.
    """
    head = "//" + _escape(prefix) + "/"
    if stored is None or not stored.startswith(head):
        return None
    parts = stored[len(head) :].split("/")
    # A well-formed value ends in "/", so the split leaves a trailing empty string.
    complete = parts[:-1]
    if len(complete) < count:
        return None
    return [_unescape(p) for p in complete[:count]]
