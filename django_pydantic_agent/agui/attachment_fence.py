"""Tell the model which files a user message quotes: the ``<attachments>`` fence.

pydantic-ai's AG-UI adapter passes a user message's text and content parts to the model, not
its ``attachments`` refs (a key outside the AG-UI schema). So before the history is converted,
``with_attachment_fences`` appends to each user message that quotes attachments one text part,
the fence::

    <attachments>
    Files attached to this message; read one with the read_attachment tool, passing its id.
    {"id": "6f1c…", "name": "notes.txt", "mime": "text/plain", "size": 37}
    </attachments>

one JSON object per file, with the ``id``, ``name``, ``mime`` and ``size`` of the ref the server
stored (the client's own copy of them is replaced at intake). Every ``<``, ``>`` and ``&`` in
it is written as a JSON ``\\u`` escape, so a file name such as ``</attachments>`` cannot close
the fence or open another; nor is any line break left raw, so a JSON line never spans two.
The file's content is not in the fence: the model reads it with ``tools.read_attachment``,
scoped to the run's owner.

Only what the model is sent changes: the stored message, ``GET threads/<id>/`` and the events
keep the message as it was posted. ``attachment_refs_in`` reads the fences back out of a text
(a scripted ``FunctionModel``'s way to learn the ids).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

from ag_ui.core import Message, TextInputContent, UserMessage

__all__ = [
    "ATTACHMENTS_FENCE_CLOSE",
    "ATTACHMENTS_FENCE_OPEN",
    "attachment_fence",
    "attachment_refs_in",
    "with_attachment_fences",
]

#: The line that opens the fence.
ATTACHMENTS_FENCE_OPEN: Final = "<attachments>"
#: The line that closes the fence.
ATTACHMENTS_FENCE_CLOSE: Final = "</attachments>"
_GUIDE: Final = (
    "Files attached to this message; read one with the read_attachment tool, passing its id."
)
_FENCE_RE: Final = re.compile(
    rf"^{re.escape(ATTACHMENTS_FENCE_OPEN)}\n(.*?)^{re.escape(ATTACHMENTS_FENCE_CLOSE)}$",
    re.MULTILINE | re.DOTALL,
)
_SHOWN_KEYS: Final = ("id", "name", "mime", "size")
# As Django's json_script: no character of the JSON can be read as markup; nor as a line break
# (JSON escapes the ASCII controls itself, not NEL or the Unicode line and paragraph separators).
_ESCAPES: Final = {
    ord(char): f"\\u{ord(char):04x}" for char in ("<", ">", "&", "\x85", "\u2028", "\u2029")
}


def _shown(ref: Any) -> dict[str, Any] | None:
    """The keys of ``ref`` the model is shown, or ``None`` for a ref without a string id."""
    if not isinstance(ref, dict) or not isinstance(ref.get("id"), str) or not ref["id"]:
        return None
    shown: dict[str, Any] = {}
    for key in _SHOWN_KEYS:
        value = ref.get(key)
        if isinstance(value, str) or (
            isinstance(value, int) and not isinstance(value, bool) and key == "size"
        ):
            shown[key] = value
    return shown


def attachment_fence(refs: Sequence[Any]) -> str | None:
    """The fence listing ``refs`` (attachment refs as stored), or ``None`` if none has an id."""
    lines = []
    for ref in refs:
        shown = _shown(ref)
        if shown is not None:
            lines.append(json.dumps(shown, ensure_ascii=False).translate(_ESCAPES))
    if not lines:
        return None
    return "\n".join([ATTACHMENTS_FENCE_OPEN, _GUIDE, *lines, ATTACHMENTS_FENCE_CLOSE])


def _quoted(message: UserMessage) -> list[Any]:
    """The refs ``message`` quotes: its ``attachments`` list, then ``metadata.attachments``."""
    refs: list[Any] = []
    for holder in (message.model_extra, message.metadata):
        if isinstance(holder, dict) and isinstance(holder.get("attachments"), list):
            refs.extend(holder["attachments"])
    return refs


def with_attachment_fences(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with the fence appended to each user message that quotes attachments.

    A message's string content becomes two text parts (its text, then the fence); a list of
    parts gets the fence as one more text part, after the others (so the index of every part
    the client sent is kept). Messages that quote nothing are returned as they are.
    """
    out: list[Message] = []
    for message in messages:
        fence = attachment_fence(_quoted(message)) if isinstance(message, UserMessage) else None
        if fence is None or not isinstance(message, UserMessage):
            out.append(message)
            continue
        content = message.content
        parts = [TextInputContent(text=content)] if isinstance(content, str) else list(content)
        parts.append(TextInputContent(text=fence))
        out.append(message.model_copy(update={"content": parts}))
    return out


def attachment_refs_in(text: str) -> list[dict[str, Any]]:
    """The refs listed by every fence in ``text``, in order (``[]`` when there is none).

    A line of a fence that is not a JSON object with a string ``id`` is skipped.
    """
    refs: list[dict[str, Any]] = []
    for match in _FENCE_RE.finditer(text):
        for line in match.group(1).split("\n"):
            try:
                ref = json.loads(line)
            except ValueError:
                continue
            shown = _shown(ref)
            if shown is not None:
                refs.append(shown)
    return refs
