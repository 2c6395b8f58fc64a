"""The alphabet of the ids a client names on the wire: thread, run and attachment ids.

An id is 1 to ``MAX_ID_LENGTH`` printable characters (``str.isprintable``: no control
characters such as NUL or newlines, no unpaired surrogates, no format or separator characters
other than the plain space), without ``/``, and neither ``.`` nor ``..``. Every such id can be
saved by every shipped store and addressed as one URL path segment; an id with ``/`` could be
saved but never opened or deleted through ``threads/<id>/``, and ``.``/``..`` are rewritten by
clients that normalise paths.
"""

from __future__ import annotations

__all__ = ["ID_RULE", "MAX_ID_LENGTH", "is_valid_id"]

#: The longest thread, run or attachment id accepted, in characters. It leaves room for a
#: ``ScopedConversationStore`` prefix inside a 255-character column.
MAX_ID_LENGTH = 200

#: The rule, worded for error messages and docs.
ID_RULE = (
    f"a non-empty string of at most {MAX_ID_LENGTH} printable characters (no control "
    "characters or unpaired surrogates), without '/', and not '.' or '..'"
)


def is_valid_id(value: object) -> bool:
    """Whether ``value`` is a usable thread, run or attachment id (see the module docstring)."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_ID_LENGTH
        and value not in {".", ".."}
        and "/" not in value
        and value.isprintable()
    )
