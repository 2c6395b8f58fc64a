"""What the admin shows of a message row and of a run: plain values, rendered by templates.

``message_display(row)`` reads a ``StoredMessage`` from its record columns only (``role``,
``content``, ``record``, ``tool_calls``, ``reasonings``, ``status``, ``run_id``) and never
raises on odd JSON: a value of the wrong type is shown as text or left out. Long texts are cut
(``TEXT_SHOWN``). ``render_message`` renders it with template autoescaping, so stored text is
never markup. ``token_totals`` and ``run_duration`` read ``StoredAgentRun`` rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from django.template.loader import render_to_string

from django_pydantic_agent.chat_history.records import decode_placeholder

if TYPE_CHECKING:
    from django.utils.safestring import SafeString

    from django_pydantic_agent.contrib.store.models import StoredAgentRun, StoredMessage

__all__ = [
    "TEXT_SHOWN",
    "MessageDisplay",
    "ReasoningDisplay",
    "TokenTotals",
    "ToolCallDisplay",
    "message_display",
    "render_message",
    "run_duration",
    "token_totals",
]

TEXT_SHOWN: Final[int] = 20_000
"""Characters of one text (message, arguments, result, reasoning) shown before it is cut."""

_TEMPLATE = "django_pydantic_agent_store/admin/message.html"


@dataclass(frozen=True, kw_only=True)
class ToolCallDisplay:
    """One tool call: ``arguments`` pretty-printed when they are JSON, ``result`` its text."""

    name: str
    tool_call_id: str
    arguments: str
    result: str
    has_result: bool
    status: str
    error: str


@dataclass(frozen=True, kw_only=True)
class ReasoningDisplay:
    content: str
    status: str
    error: str


@dataclass(frozen=True, kw_only=True)
class MessageDisplay:
    """A message as the admin shows it; ``time`` is ``None`` when the record has none."""

    role: str
    name: str
    text: str
    status: str
    run_id: str
    message_id: str
    time: datetime | None
    time_text: str
    error: str
    parts: list[str] = field(default_factory=list)
    attachments: list[str] = field(default_factory=list)
    tool_calls: list[ToolCallDisplay] = field(default_factory=list)
    reasonings: list[ReasoningDisplay] = field(default_factory=list)


def _cut(text: str) -> str:
    if len(text) <= TEXT_SHOWN:
        return text
    return f"{text[:TEXT_SHOWN]}\u2026 ({len(text):,} characters in all)"


def _text(value: Any) -> str:
    """A stored string as text (placeholder decoded); anything else as its JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return decode_placeholder(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # pragma: no cover - JSON columns hold JSON
        return repr(value)


def _arguments(value: Any) -> str:
    """Tool-call arguments, indented when they parse as JSON (they stream as a JSON string)."""
    text = _text(value)
    try:
        parsed = json.loads(text)
    except ValueError:
        return _cut(text)
    return _cut(json.dumps(parsed, indent=2, ensure_ascii=False))


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def _time(value: Any) -> tuple[datetime | None, str]:
    if not isinstance(value, str) or not value:
        return None, ""
    try:
        return datetime.fromisoformat(value), ""
    except ValueError:
        return None, value


def _part(part: Mapping[str, Any]) -> str:
    """One multimodal content part, named by its type and MIME type, never its bytes."""
    kind = _text(part.get("type")) or "part"
    mime = _text(part.get("mimeType") or part.get("mime_type"))
    source = part.get("source")
    if isinstance(source, Mapping):
        mime = mime or _text(source.get("mimeType") or source.get("mime_type"))
        if source.get("type") == "url" and isinstance(source.get("value"), str):
            return f"{kind} ({mime or 'url'}): {source['value'][:200]}"
    return f"{kind} ({mime})" if mime else kind


def _attachments(record: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    extra = record.get("wire_extra")
    if not isinstance(extra, Mapping):
        return names
    for item in _mappings(extra.get("attachments")):
        name = _text(item.get("name")) or _text(item.get("id")) or "attachment"
        mime = _text(item.get("mime") or item.get("mimeType"))
        names.append(f"{name} ({mime})" if mime else name)
    return names


def message_display(row: StoredMessage) -> MessageDisplay:
    """What the admin shows of ``row``, read from its record columns only (never raises)."""
    record: Mapping[str, Any] = row.record if isinstance(row.record, Mapping) else {}
    time, time_text = _time(record.get("timestamp"))
    calls = [
        ToolCallDisplay(
            name=_text(call.get("name")),
            tool_call_id=_text(call.get("tool_call_id") or call.get("agui_id")),
            arguments=_arguments(call.get("arguments")),
            result=_cut(_text(call.get("content"))),
            has_result=bool(
                call.get("has_result") is True
                or _text(call.get("content"))
                or call.get("result_message_id")
            ),
            status=_text(call.get("status")),
            error=_cut(_text(call.get("error"))),
        )
        for call in _mappings(row.tool_calls)
    ]
    steps = [
        ReasoningDisplay(
            content=_cut(_text(step.get("content"))),
            status=_text(step.get("status")),
            error=_cut(_text(step.get("error"))),
        )
        for step in _mappings(row.reasonings)
    ]
    parts = [
        _part(part)
        for part in _mappings(record.get("content_parts"))
        if part.get("type") != "text"  # text parts are ``content`` already
    ]
    return MessageDisplay(
        role=row.role or _text(record.get("role")),
        name=_text(record.get("name")),
        text=_cut(row.content or ""),
        status=row.status,
        run_id=row.run_id,
        message_id=row.message_id or _text(record.get("agui_id")),
        time=time,
        time_text=time_text,
        error=_cut(_text(record.get("error"))),
        parts=parts,
        attachments=_attachments(record),
        tool_calls=calls,
        reasonings=steps,
    )


def render_message(message: MessageDisplay) -> SafeString:
    """``message`` as HTML (the store's admin template, autoescaped)."""
    html: SafeString = render_to_string(_TEMPLATE, {"message": message})
    return html


# Runs -----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TokenTotals:
    """Token counts summed over the entries of one or more runs' ``usage``; ``estimated`` when
    an entry was estimated (a run stopped or failed before its provider reported it)."""

    input: int = 0
    output: int = 0
    total: int = 0
    estimated: bool = False

    def __add__(self, other: TokenTotals) -> TokenTotals:
        return TokenTotals(
            input=self.input + other.input,
            output=self.output + other.output,
            total=self.total + other.total,
            estimated=self.estimated or other.estimated,
        )

    def __str__(self) -> str:
        shown = f"{self.total:,} ({self.input:,} in, {self.output:,} out)"
        return f"{shown}, partly estimated" if self.estimated else shown


def _count(entry: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = entry.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def token_totals(usages: Iterable[Any]) -> TokenTotals:
    """The tokens of ``usages`` (``StoredAgentRun.usage`` values: ``{"tokens": [TokenUsage]}``).

    Anything that is not such a mapping counts as no tokens; a missing ``total_tokens`` is
    input plus output.
    """
    totals = TokenTotals()
    for usage in usages:
        if not isinstance(usage, Mapping):
            continue
        for entry in _mappings(usage.get("tokens")):
            tokens_in = _count(entry, "input_tokens", "inputTokens") or 0
            tokens_out = _count(entry, "output_tokens", "outputTokens") or 0
            total = _count(entry, "total_tokens", "totalTokens")
            totals += TokenTotals(
                input=tokens_in,
                output=tokens_out,
                total=tokens_in + tokens_out if total is None else total,
                estimated=entry.get("estimated") is True,
            )
    return totals


def _span(delta: timedelta) -> str:
    seconds = max(delta.total_seconds(), 0.0)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def run_duration(run: StoredAgentRun) -> str:
    """``finished_at - started_at`` for people (``"2.5 s"``, ``"3 min 4 s"``), or ``"running"``."""
    if run.finished_at is None:
        return "running" if run.status == "running" else "not recorded"
    return _span(run.finished_at - run.started_at)
