"""Serialise declared field values to JSON and validate them back, one cached adapter per type."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

logger = logging.getLogger("django_pydantic_agent.memory_service")

_ADAPTERS: dict[int, tuple[FieldInfo, TypeAdapter[Any]]] = {}


def _adapter(field: FieldInfo) -> TypeAdapter[Any]:
    # Keyed by identity; the FieldInfo is kept alive in the value so the id is never reused.
    cached = _ADAPTERS.get(id(field))
    if cached is not None and cached[0] is field:
        return cached[1]
    adapter: TypeAdapter[Any] = TypeAdapter(field.rebuild_annotation())
    _ADAPTERS[id(field)] = (field, adapter)
    return adapter


def dump_value(field: FieldInfo, value: Any) -> Any:
    """Return ``value`` as JSON-compatible data for its declared type (raw if that fails)."""
    try:
        return _adapter(field).dump_python(value, mode="json", warnings=False)
    except Exception:  # pydantic raises several types here; the raw value is the fallback
        return value


def load_value(owner: str, name: str, field: FieldInfo, raw: Any) -> Any:
    """Validate a wire value against its declared type; keep it raw (with a warning) if invalid.

    Reads never raise: data written by another client version stays readable.
    """
    try:
        return _adapter(field).validate_python(raw)
    except ValidationError as exc:
        logger.warning(
            "%s.%s holds %r, which does not validate as its declared type; the raw value is "
            "kept (%s).",
            owner,
            name,
            raw,
            exc.errors(include_url=False)[0]["msg"],
        )
        return raw


def field_default(field: FieldInfo) -> Any:
    """The value a field takes when the wire omits it: its default, else ``None``."""
    if field.is_required():
        return None
    return field.get_default(call_default_factory=True, validated_data={})
