"""A stored thread as the AI SDK's ``UIMessage`` list, and a stored answer as replayable parts.

A thread is stored as AG-UI wire messages (``agui.threads.stored_thread``). The AI SDK shows
it as turns: each user message is a ``UIMessage`` of its own, and everything between two user
messages (reasoning, answers, tool calls and their results, over one run or several: a client
tool's answer or an approval continues the turn) is **one assistant ``UIMessage``**, whose id
is the id of its first stored message. So ids are the stored ids: a reload, a resumed stream
and a posted-back transcript all name a turn the same way.

``answer_items`` reads a turn's stored messages into ``Item``s (a step boundary, a text, a
reasoning, a tool call in the state its result, denial or approval puts it in); ``ui_parts``
renders them as ``UIMessage`` parts, and the stream encoder (``vercel_ai.stream``) as chunks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai.ui.vercel_ai.request_types import (
    FileUIPart,
    ReasoningUIPart,
    StepStartUIPart,
    TextUIPart,
    ToolApprovalRequested,
    ToolApprovalRequestedPart,
    ToolApprovalResponded,
    ToolApprovalRespondedPart,
    ToolInputAvailablePart,
    ToolOutputAvailablePart,
    ToolOutputDeniedPart,
    ToolOutputErrorPart,
    UIMessage,
    UIMessagePart,
)

from django_pydantic_agent.persistence.wire import BOOKKEEPING_KEY

__all__ = [
    "Item",
    "ReasoningItem",
    "StepItem",
    "TextItem",
    "ToolItem",
    "ToolState",
    "answer_items",
    "answer_metadata",
    "last_answer",
    "result_outcome",
    "tool_input",
    "tool_output",
    "turns",
    "ui_messages",
    "ui_parts",
]

#: The state a tool call is in, as the AI SDK names a tool part's states.
ToolState = Literal[
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
]

#: Maps an attachment ref (``{"id", "name", "mime", "size", "url"?}``) to the URL of its file.
AttachmentURL = Callable[[dict[str, Any]], str | None]

# The media parts of AG-UI content, and the media type the AI SDK is told when a part names none.
_MEDIA_PARTS = {"image": "image", "audio": "audio", "video": "video", "document": "application"}
# Tool results pydantic-ai marks as not having succeeded (its ``outcome`` on the result).
_DENIED = "denied"


@dataclass(frozen=True, kw_only=True)
class StepItem:
    """The start of a step: one model response and the tool calls it made."""


@dataclass(frozen=True, kw_only=True)
class TextItem:
    """The text of one stored assistant message (``id`` is the message's)."""

    id: str
    text: str
    streaming: bool = False


@dataclass(frozen=True, kw_only=True)
class ReasoningItem:
    """One stored reasoning message."""

    id: str
    text: str


@dataclass(frozen=True, kw_only=True)
class ToolItem:
    """A tool call and what became of it.

    ``provider_executed``: the server ran it (one of the agent's own tools, or a result the
    server stored), so the AI SDK never asks the page for its output. ``approval_id`` is the
    id of the interrupt asking for its approval, when one did.
    """

    call_id: str
    name: str
    input: Any
    state: ToolState
    provider_executed: bool = False
    output: Any = None
    error_text: str | None = None
    approval_id: str | None = None
    approved: bool | None = None
    reason: str | None = None


Item = StepItem | TextItem | ReasoningItem | ToolItem


def tool_output(content: Any) -> Any:
    """A tool result's content as the AI SDK's ``output``: a JSON object or array parsed, any
    other text as it is (a tool returning ``"5"`` gives ``"5"``, not ``5``)."""
    if isinstance(content, str) and content[:1] in ("{", "["):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content


def _text(content: Any) -> str:
    """The text of a stored message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text") or "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def tool_input(arguments: Any) -> Any:
    """A tool call's ``arguments`` (a JSON string, streamed or stored) as its ``input``: the
    JSON value, ``{}`` for none, the text itself when it is not JSON."""
    if not isinstance(arguments, str):
        return arguments if arguments is not None else {}
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def result_outcome(encrypted_value: Any) -> str | None:
    """The outcome pydantic-ai recorded on a tool result (``denied``, ``failed``, ...), from
    its ``encryptedValue`` (``{"pydantic_ai": {"outcome": ...}}``); ``None`` for success and
    for any other value."""
    if not isinstance(encrypted_value, str) or "pydantic_ai" not in encrypted_value:
        return None
    try:
        claims = json.loads(encrypted_value).get("pydantic_ai")
    except (ValueError, AttributeError):
        return None
    outcome = claims.get("outcome") if isinstance(claims, dict) else None
    return outcome if isinstance(outcome, str) else None


def _outcomes(messages: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The run outcomes recorded on ``messages`` (the bookkeeping's ``runOutcome``), in order."""
    for message in messages:
        book = message.get(BOOKKEEPING_KEY)
        outcome = book.get("runOutcome") if isinstance(book, dict) else None
        if isinstance(outcome, dict):
            yield outcome


def _approvals(
    group: Sequence[dict[str, Any]],
) -> dict[str, tuple[str, dict[str, Any] | None]]:
    """``{tool call id: (interrupt id, its resume entry or None)}`` for every approval a run
    of ``group`` asked for."""
    found: dict[str, tuple[str, dict[str, Any] | None]] = {}
    for outcome in _outcomes(group):
        if outcome.get("type") != "interrupt":
            continue
        resolved = outcome.get("resolved") or {}
        for interrupt in outcome.get("interrupts") or ():
            call_id, interrupt_id = interrupt.get("toolCallId"), interrupt.get("id")
            if isinstance(call_id, str) and isinstance(interrupt_id, str):
                entry = resolved.get(interrupt_id) if isinstance(resolved, dict) else None
                found[call_id] = (interrupt_id, entry if isinstance(entry, dict) else None)
    return found


def _tool_item(
    call: dict[str, Any],
    result: dict[str, Any] | None,
    approval: tuple[str, dict[str, Any] | None] | None,
    server_tools: frozenset[str],
) -> ToolItem:
    function = call.get("function") or {}
    name = str(function.get("name") or "tool")
    call_id = str(call.get("id"))
    fields: dict[str, Any] = {
        "call_id": call_id,
        "name": name,
        "input": tool_input(function.get("arguments")),
        "provider_executed": name in server_tools,
    }
    if approval is not None:
        fields["approval_id"] = approval[0]
    if result is not None:
        # A result stored under the call's own id is a page's answer (vercel_ai.request);
        # any other is the server's.
        fields["provider_executed"] |= result.get("id") != call_id
        outcome = result_outcome(result.get("encryptedValue"))
        content = result.get("content")
        if outcome == _DENIED:
            return ToolItem(state="output-denied", approved=False, **fields)
        if outcome is not None or result.get("error"):
            text = result.get("error") or _text(content) or f"The tool call {outcome}."
            return ToolItem(state="output-error", error_text=str(text), **fields)
        return ToolItem(state="output-available", output=tool_output(content), **fields)
    if approval is not None:
        entry = approval[1]
        if entry is None:
            return ToolItem(state="approval-requested", **fields)
        raw = entry.get("payload")
        payload: dict[str, Any] = raw if isinstance(raw, dict) else {}
        approved = entry.get("status") != "cancelled" and payload.get("approved") is True
        reason = payload.get("reason")
        return ToolItem(
            state="approval-responded",
            approved=approved,
            reason=reason if isinstance(reason, str) and reason else None,
            **fields,
        )
    return ToolItem(state="input-available", **fields)


def answer_items(
    group: Sequence[dict[str, Any]], *, server_tools: frozenset[str] = frozenset()
) -> list[Item]:
    """The parts of one stored answer (the messages between two user messages), in order.

    A step starts with the answer and after each run of tool results; a tool call carries its
    stored result, denial or pending approval (see ``ToolItem``).
    """
    results = {str(m.get("toolCallId")): m for m in group if m.get("role") == "tool"}
    approvals = _approvals(group)
    items: list[Item] = []
    step_open = False

    def add(item: Item) -> None:
        nonlocal step_open
        if not step_open:  # a step shows once it has a part
            items.append(StepItem())
            step_open = True
        items.append(item)

    for message in group:
        role = message.get("role")
        if role == "tool":
            step_open = False
            continue
        if role not in ("assistant", "reasoning"):
            continue
        message_id = str(message.get("id"))
        text = _text(message.get("content"))
        if role == "reasoning":
            if text:
                add(ReasoningItem(id=message_id, text=text))
            continue
        if text:
            add(TextItem(id=message_id, text=text, streaming=message.get("status") == "active"))
        for call in message.get("toolCalls") or ():
            if isinstance(call, dict):
                call_id = str(call.get("id"))
                add(_tool_item(call, results.get(call_id), approvals.get(call_id), server_tools))
    return items


def answer_metadata(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """An answer's ``UIMessage.metadata``: ``{"runId", "status", "usage"}`` of its last run
    (``usage`` when the run recorded it), as the stream's ``finish`` part sends them."""
    metadata: dict[str, Any] = {}
    if group:
        last = group[-1]
        if isinstance(last.get("runId"), str):
            metadata["runId"] = last["runId"]
        metadata["status"] = last.get("status") or "complete"
    usage = None
    for outcome in _outcomes(group):
        usage = outcome.get("usage", usage)
    if usage:
        metadata["usage"] = usage
    return metadata


def _tool_part(item: ToolItem) -> UIMessagePart:
    common: dict[str, Any] = {
        "type": f"tool-{item.name}",
        "tool_call_id": item.call_id,
        "input": item.input,
    }
    if item.provider_executed:
        common["provider_executed"] = True
    requested = None if item.approval_id is None else ToolApprovalRequested(id=item.approval_id)
    if item.state == "output-available":
        return ToolOutputAvailablePart(output=item.output, approval=requested, **common)
    if item.state == "output-error":
        return ToolOutputErrorPart(error_text=item.error_text or "", approval=requested, **common)
    if item.state == "output-denied":
        denied = (
            None
            if item.approval_id is None
            else ToolApprovalResponded(id=item.approval_id, approved=False, reason=item.reason)
        )
        return ToolOutputDeniedPart(approval=denied, **common)
    if item.state == "approval-requested":
        return ToolApprovalRequestedPart(approval=requested, **common)
    if item.state == "approval-responded":
        assert item.approval_id is not None
        responded = ToolApprovalResponded(
            id=item.approval_id, approved=bool(item.approved), reason=item.reason
        )
        return ToolApprovalRespondedPart(approval=responded, **common)
    return ToolInputAvailablePart(**common)


def ui_parts(items: Iterable[Item]) -> list[UIMessagePart]:
    """``items`` as ``UIMessage`` parts."""
    parts: list[UIMessagePart] = []
    for item in items:
        if isinstance(item, StepItem):
            parts.append(StepStartUIPart())
        elif isinstance(item, TextItem):
            parts.append(
                TextUIPart(text=item.text, state="streaming" if item.streaming else "done")
            )
        elif isinstance(item, ReasoningItem):
            parts.append(ReasoningUIPart(text=item.text, state="done"))
        else:
            parts.append(_tool_part(item))
    return parts


def _media_type(part: dict[str, Any], source: dict[str, Any]) -> str:
    mime = source.get("mimeType")
    return mime if isinstance(mime, str) and mime else _MEDIA_PARTS[str(part.get("type"))]


def _file_part(part: dict[str, Any]) -> FileUIPart | None:
    """A media part of stored content (data or URL source) as a ``file`` part."""
    source = part.get("source")
    if not isinstance(source, dict) or not isinstance(source.get("value"), str):
        return None
    media_type = _media_type(part, source)
    if source.get("type") == "data":
        url = f"data:{media_type};base64,{source['value']}"
    else:
        url = source["value"]
    filename = (part.get("metadata") or {}).get("filename") if part.get("metadata") else None
    return FileUIPart(
        media_type=media_type, url=url, filename=filename if isinstance(filename, str) else None
    )


def _attachment_refs(message: dict[str, Any]) -> list[dict[str, Any]]:
    refs = message.get("attachments")
    if refs is None and isinstance(message.get("metadata"), dict):
        refs = message["metadata"].get("attachments")
    return [ref for ref in refs or () if isinstance(ref, dict) and isinstance(ref.get("id"), str)]


def _user_parts(message: dict[str, Any], attachment_url: AttachmentURL) -> list[UIMessagePart]:
    """A stored user message's parts: its attachments as ``file`` parts (first, as the AI
    SDK's ``sendMessage`` puts files), then its content."""
    parts: list[UIMessagePart] = []
    for ref in _attachment_refs(message):
        url = attachment_url(ref)
        if url is not None:
            mime = ref.get("mime")
            name = ref.get("name")
            parts.append(
                FileUIPart(
                    media_type=mime
                    if isinstance(mime, str) and mime
                    else "application/octet-stream",
                    filename=name if isinstance(name, str) else None,
                    url=url,
                )
            )
    content = message.get("content")
    if isinstance(content, str):
        parts.append(TextUIPart(text=content))
        return parts
    for part in content or ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            parts.append(TextUIPart(text=str(part.get("text") or "")))
        elif part.get("type") in _MEDIA_PARTS:
            file = _file_part(part)
            if file is not None:
                parts.append(file)
    return parts


def turns(messages: Sequence[dict[str, Any]]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """``messages`` as turns: ``("user", [message])``, ``("system", [message])``, and
    ``("assistant", [everything up to the next user message])``."""
    group: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("user", "system"):
            if group:
                yield "assistant", group
                group = []
            yield str(role), [message]
        elif role in ("assistant", "reasoning", "tool"):
            group.append(message)
    if group:
        yield "assistant", group


def last_answer(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answer that ends ``messages``: what follows the last user message (or ``[]``)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") in ("user", "system"):
            return [m for m in messages[index + 1 :] if m.get("role") != "developer"]
    return [m for m in messages if m.get("role") in ("assistant", "reasoning", "tool")]


def ui_messages(
    messages: Sequence[dict[str, Any]],
    *,
    attachment_url: AttachmentURL,
    server_tools: frozenset[str] = frozenset(),
) -> list[UIMessage]:
    """A stored thread (``stored_thread``'s messages) as ``UIMessage``s, for ``useChat``.

    ``attachment_url(ref)`` is where a quoted attachment can be downloaded (``None`` leaves
    it out); ``server_tools`` are the agent's own tools (see ``ToolItem``).
    """
    shown: list[UIMessage] = []
    for role, group in turns(messages):
        if role == "assistant":
            parts = ui_parts(answer_items(group, server_tools=server_tools))
            if parts:
                shown.append(
                    UIMessage(
                        id=str(group[0].get("id")),
                        role="assistant",
                        metadata=answer_metadata(group),
                        parts=parts,
                    )
                )
            continue
        message = group[0]
        message_id = str(message.get("id"))
        if role == "system":
            text = TextUIPart(text=_text(message.get("content")))
            shown.append(UIMessage(id=message_id, role="system", parts=[text]))
        else:
            parts = _user_parts(message, attachment_url)
            shown.append(UIMessage(id=message_id, role="user", parts=parts))
    return shown
