"""Fixtures for the AI SDK transport's tests: request bodies and decoded UI message streams."""

from __future__ import annotations

import json
from typing import Any

from tests.agui.conftest import alice, bob, client, logged_in  # noqa: F401

__all__ = [
    "chat_body",
    "chunks",
    "done",
    "fold",
    "logged_in",
    "shown_parts",
    "text_of",
    "user_message",
]


def user_message(text: str, message_id: str = "u-1", *files: dict[str, Any]) -> dict[str, Any]:
    """A user ``UIMessage`` as ``useChat`` builds it: its files first, then its text."""
    return {"id": message_id, "role": "user", "parts": [*files, {"type": "text", "text": text}]}


def chat_body(
    thread_id: str = "chat-1",
    *messages: dict[str, Any],
    trigger: str = "submit-message",
    message_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The body ``DefaultChatTransport.sendMessages`` posts."""
    body: dict[str, Any] = {
        "id": thread_id,
        "messages": list(messages) or [user_message("What is 2 + 3?")],
        "trigger": trigger,
        **extra,
    }
    if message_id is not None:
        body["messageId"] = message_id
    return body


def chunks(body: str) -> list[dict[str, Any]]:
    """The chunks of a UI message stream body (comments and ``[DONE]`` left out)."""
    found = []
    for frame in body.split("\n\n"):
        for line in frame.split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                found.append(json.loads(line.removeprefix("data: ")))
    return found


def done(body: str) -> bool:
    """Whether the stream ended with ``[DONE]``."""
    return body.rstrip("\n").endswith("data: [DONE]")


def text_of(found: list[dict[str, Any]]) -> str:
    return "".join(c["delta"] for c in found if c["type"] == "text-delta")


def fold(found: list[dict[str, Any]]) -> dict[str, Any]:
    """The message a UI message stream builds: ``{"id", "metadata", "parts"}``, folded as the
    AI SDK's ``processUIMessageStream`` folds the chunks this transport sends (a test's
    yardstick for "the stream shows what a reload shows"; the e2e tests run the SDK itself).
    A ``start`` with a new id starts the message again, as a resumed stream does."""
    message: dict[str, Any] = {"id": None, "role": "assistant", "metadata": {}, "parts": []}
    texts: dict[str, dict[str, Any]] = {}
    tools: dict[str, dict[str, Any]] = {}
    for chunk in found:
        kind = chunk["type"]
        if kind == "start":
            if chunk.get("messageId") not in (None, message["id"]):
                message = {
                    "id": chunk["messageId"],
                    "role": "assistant",
                    "metadata": {},
                    "parts": [],
                }
                texts, tools = {}, {}
            message["metadata"].update(chunk.get("messageMetadata") or {})
        elif kind == "finish":
            message["metadata"].update(chunk.get("messageMetadata") or {})
        elif kind == "start-step":
            message["parts"].append({"type": "step-start"})
        elif kind in ("text-start", "reasoning-start"):
            part = {"type": kind.removesuffix("-start"), "text": "", "state": "streaming"}
            texts[chunk["id"]] = part
            message["parts"].append(part)
        elif kind in ("text-delta", "reasoning-delta"):
            texts[chunk["id"]]["text"] += chunk["delta"]
        elif kind in ("text-end", "reasoning-end"):
            texts.pop(chunk["id"])["state"] = "done"
        elif kind in ("tool-input-start", "tool-input-available"):
            part = tools.get(chunk["toolCallId"])
            if part is None:
                part = {"type": f"tool-{chunk['toolName']}", "toolCallId": chunk["toolCallId"]}
                tools[chunk["toolCallId"]] = part
                message["parts"].append(part)
            part["state"] = "input-streaming" if kind == "tool-input-start" else "input-available"
            if "input" in chunk:
                part["input"] = chunk["input"]
            if chunk.get("providerExecuted"):
                part["providerExecuted"] = True
        elif kind == "tool-output-available":
            part = tools[chunk["toolCallId"]]
            part.update(state="output-available", output=chunk["output"])
            if chunk.get("providerExecuted"):
                part["providerExecuted"] = True
        elif kind == "tool-output-error":
            tools[chunk["toolCallId"]].update(state="output-error", errorText=chunk["errorText"])
        elif kind == "tool-output-denied":
            tools[chunk["toolCallId"]]["state"] = "output-denied"
        elif kind == "tool-approval-request":
            part = tools[chunk["toolCallId"]]
            part.update(state="approval-requested", approval={"id": chunk["approvalId"]})
    return message


def shown_parts(parts: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a page shows of ``parts``: kinds, texts, tool calls and their states."""
    return [
        (p["type"], p.get("text"), p.get("toolCallId"), p.get("state"), p.get("output"))
        for p in parts
    ]
