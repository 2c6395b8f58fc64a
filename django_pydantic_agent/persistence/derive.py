"""Thread-drawer text derived from stored messages: a title and a one-line preview.

Messages are AG-UI wire records, as dicts or objects. Their ``content`` is either a string or
a list of parts; the text of ``{"type": "text", "text": ...}`` parts is read too, so a
message with an image and a caption still yields its caption. Nothing here raises on a
malformed message: it contributes no text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "DEFAULT_TITLE",
    "FORK_TITLE_MAX_CHARS",
    "PREVIEW_MAX_CHARS",
    "TITLE_MAX_CHARS",
    "derive_preview",
    "derive_title",
    "fork_title",
    "message_text",
    "normalize_title",
    "written_text",
]

DEFAULT_TITLE = "New conversation"
TITLE_MAX_CHARS = 60
PREVIEW_MAX_CHARS = 120
_ELLIPSIS = "\u2026"


def _field(obj: Any, name: str) -> Any:
    """Read ``name`` from a mapping key or an attribute; ``None`` when absent."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 1].rstrip() + _ELLIPSIS


def written_text(message: Any) -> str:
    """Return the message's text as it was written (markdown, line breaks and all), or ``""``.

    Reads a string ``content`` or the ``text`` of every text part of a list ``content``
    (joined by a blank line, so each part stays its own paragraph).
    """
    content = _field(message, "content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list | tuple):
        return ""
    texts = [
        text
        for part in content
        if _field(part, "type") == "text" and isinstance(text := _field(part, "text"), str)
    ]
    return "\n\n".join(texts)


def message_text(message: Any) -> str:
    """Return the message's text on one line (``written_text`` with whitespace collapsed), for
    titles and previews; ``""`` if it has none."""
    return _collapse(written_text(message))


def normalize_title(title: Any, limit: int | None = None) -> str:
    """``title`` as a store keeps a name: whitespace collapsed, NUL dropped (PostgreSQL's text
    cannot hold it), at most ``limit`` characters."""
    return _collapse(str(title).replace("\x00", ""))[:limit]


#: The longest title a fork's suffix may make; the thread routes accept titles this long.
FORK_TITLE_MAX_CHARS = 200
_FORK_SUFFIX = " (fork)"


def fork_title(title: str) -> str:
    """The title of a fork of a thread titled ``title``: ``"<title> (fork)"``, the title cut
    (with an ellipsis) so the whole stays within ``FORK_TITLE_MAX_CHARS``."""
    title = normalize_title(title)
    if title.endswith(_FORK_SUFFIX):
        return title[:FORK_TITLE_MAX_CHARS]
    return (
        _truncate(title or DEFAULT_TITLE, FORK_TITLE_MAX_CHARS - len(_FORK_SUFFIX)) + _FORK_SUFFIX
    )


def derive_title(messages: Iterable[Any]) -> str:
    """Title from the first user message with text: at most 60 characters, ellipsis if cut.

    Returns ``"New conversation"`` when no user message has text.
    """
    for message in messages:
        if _field(message, "role") == "user":
            text = message_text(message)
            if text:
                return _truncate(text, TITLE_MAX_CHARS)
    return DEFAULT_TITLE


def derive_preview(messages: Iterable[Any]) -> str:
    """Preview from the latest message with text, whatever its role: at most 120 characters.

    A tool result or system message that is the latest message with text is the preview, as
    in the predecessor; messages without text (an assistant turn carrying only tool calls)
    are passed over. Returns ``""`` when no message has text.
    """
    for message in reversed(list(messages)):
        text = message_text(message)
        if text:
            return _truncate(text, PREVIEW_MAX_CHARS)
    return ""
