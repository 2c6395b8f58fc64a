"""What an AG-UI client shows after a stream: its messages, built from the events as AG-UI's
``defaultApplyEvents`` builds them (a snapshot replaces the messages, deltas append).

Tests compare it with the thread as stored (``GET threads/<id>/``) to prove a client ends
with exactly what the server keeps, whatever it saw before a worker died.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def apply_events(
    events: Iterable[dict[str, Any]], messages: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """``messages`` (or none) after ``events``, camelCase dicts as on the wire."""
    shown = [dict(message) for message in messages or []]
    by_id = {message["id"]: message for message in shown}
    calls: dict[str, dict[str, Any]] = {}

    def add(message: dict[str, Any]) -> dict[str, Any]:
        shown.append(message)
        by_id[message["id"]] = message
        return message

    for event in events:
        kind = event["type"]
        if kind == "MESSAGES_SNAPSHOT":
            shown = [dict(message) for message in event["messages"]]
            by_id = {message["id"]: message for message in shown}
            calls = {
                call["id"]: call for message in shown for call in message.get("toolCalls") or []
            }
        elif kind in ("TEXT_MESSAGE_START", "REASONING_MESSAGE_START"):
            default = "reasoning" if kind.startswith("REASONING") else "assistant"
            role = event.get("role") or default
            if event["messageId"] not in by_id:
                add({"id": event["messageId"], "role": role, "content": ""})
        elif kind in ("TEXT_MESSAGE_CONTENT", "REASONING_MESSAGE_CONTENT"):
            target = by_id[event["messageId"]]
            target["content"] = (target.get("content") or "") + event["delta"]
        elif kind == "TOOL_CALL_START":
            parent = event.get("parentMessageId") or event["toolCallId"]
            owner = by_id.get(parent) or add({"id": parent, "role": "assistant"})
            call = {
                "id": event["toolCallId"],
                "type": "function",
                "function": {"name": event["toolCallName"], "arguments": ""},
            }
            owner.setdefault("toolCalls", []).append(call)
            calls[call["id"]] = call
        elif kind == "TOOL_CALL_ARGS":
            calls[event["toolCallId"]]["function"]["arguments"] += event["delta"]
        elif kind == "TOOL_CALL_RESULT":
            add(
                {
                    "id": event["messageId"],
                    "role": "tool",
                    "toolCallId": event["toolCallId"],
                    "content": event["content"],
                }
            )
    return shown


def visible(messages: Iterable[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """``(id, role, text)`` of each message a reader sees: what a client and the stored thread
    must agree on, byte for byte (tool calls by their names and arguments)."""
    rows = []
    for message in messages:
        text = message.get("content") or ""
        if not isinstance(text, str):
            text = repr(text)
        for call in message.get("toolCalls") or []:
            text += f"\n[{call['function']['name']}({call['function']['arguments']})]"
        rows.append((message["id"], message["role"], text))
    return rows
