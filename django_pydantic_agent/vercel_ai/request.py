"""The body ``useChat`` posts (``DefaultChatTransport``), parsed and made a run's input.

The body is validated with pydantic-ai's own models of it (``pydantic_ai.ui.vercel_ai``'s
``RequestData``: ``id``, ``messages``, ``trigger``, ``messageId``, and whatever the project's
``body`` adds). ``chat_run_input`` turns it into the ``RunAgentInput`` the run engine starts,
so the generic checks (``agui.input.accept_run``) and the stored-history checks of the storage
agent judge it exactly as they judge an AG-UI client's:

- a user ``UIMessage`` is a user message with the same id (its text, its inline files as
  content parts, files pointing at the attachment route as attachment references);
- an assistant ``UIMessage`` is an assistant message with its id (the stored id of the turn's
  first message; ``vercel_ai.messages``) and its tool calls: an echo the server recognises,
  or a forgery it refuses;
- a tool output the page added (``addToolOutput``: a tool part with an output that the
  server did not stream) is a tool result under the call's own id;
- an approval the page gave (``addToolApprovalResponse``) is a ``resume`` entry for the
  interrupt it answers.

A client may post only its last message (``prepareSendMessagesRequest``); ``message`` (one
message) is read as ``messages`` of one.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote_to_bytes

from ag_ui.core import (
    AssistantMessage,
    AudioPart,
    Context,
    DataSource,
    DocumentPart,
    FunctionCall,
    ImagePart,
    ResumeEntry,
    RunAgentInput,
    SystemMessage,
    TextPart,
    Tool,
    ToolCall,
    ToolMessage,
    UrlSource,
    UserMessage,
    VideoPart,
)
from pydantic import TypeAdapter, ValidationError
from pydantic_ai.ui.vercel_ai.request_types import (
    DynamicToolApprovalRespondedPart,
    DynamicToolOutputAvailablePart,
    DynamicToolOutputErrorPart,
    FileUIPart,
    RequestData,
    TextUIPart,
    ToolApprovalRespondedPart,
    ToolOutputAvailablePart,
    ToolOutputErrorPart,
    UIMessage,
    UIMessagePart,
)

from django_pydantic_agent.agui.http import NESTED_TOO_DEEPLY, nested_too_deeply
from django_pydantic_agent.agui.ids import ID_RULE, is_valid_id
from django_pydantic_agent.agui.input import RunInputError
from django_pydantic_agent.agui.unstorable import (
    may_hold_unstorable_values,
    shown_id,
    unstorable_problem,
)

__all__ = [
    "AGUI_FIELDS",
    "ChatRequest",
    "chat_run_input",
    "parse_chat_request",
]

#: The keys of the body that name AG-UI run fields (``tools`` declares the page's own tools);
#: any other key the project's ``body`` adds goes to ``forwardedProps``.
AGUI_FIELDS = ("tools", "context", "state", "forwardedProps")

_REQUEST = TypeAdapter(RequestData)
_TOOLS = TypeAdapter(list[Tool])
_CONTEXT = TypeAdapter(list[Context])
_MAX_REPORTED_PROBLEMS = 5
# Tool parts carrying an output the page added, and parts carrying an approval response.
_OUTPUTS = (
    ToolOutputAvailablePart,
    ToolOutputErrorPart,
    DynamicToolOutputAvailablePart,
    DynamicToolOutputErrorPart,
)
_APPROVALS = (ToolApprovalRespondedPart, DynamicToolApprovalRespondedPart)
_MEDIA = {"image": ImagePart, "audio": AudioPart, "video": VideoPart}

#: Maps a file part's URL to the attachment id it downloads, or ``None``.
AttachmentId = Callable[[str], str | None]


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """A validated ``useChat`` request: the thread (``id``), the posted messages, the trigger,
    the ``messageId`` the SDK sends with it, and the project's other ``body`` fields."""

    thread_id: str
    messages: list[UIMessage]
    trigger: Literal["submit-message", "regenerate-message"]
    message_id: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def continued_message_id(self) -> str | None:
        """The id of the answer this request continues (its last message is an assistant
        message: a tool output or an approval was added to it), or ``None``."""
        if self.messages and self.messages[-1].role == "assistant":
            return self.messages[-1].id
        return None


def _describe(exc: ValidationError) -> str:
    """The failing fields and error kinds of ``exc``, never the submitted values."""
    problems = []
    for error in exc.errors()[:_MAX_REPORTED_PROBLEMS]:
        location = ".".join(str(part) for part in error["loc"]) or "(body)"
        problems.append(f"{location} ({error['type']})")
    more = exc.error_count() - len(problems)
    return "; ".join(problems) + (f" and {more} more" if more > 0 else "")


def parse_chat_request(body: bytes) -> ChatRequest:
    """Parse a ``useChat`` body, or raise ``RunInputError`` naming what is wrong (not JSON,
    nested too deeply, not an object, the failing fields, an ``id`` outside the id alphabet,
    no messages, a value no store can keep) without echoing the payload."""
    try:
        payload = json.loads(body)
    except RecursionError as exc:
        raise RunInputError(NESTED_TOO_DEEPLY) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunInputError(
            "The request body is not valid JSON; send the body useChat's transport sends."
        ) from exc
    if nested_too_deeply(payload):
        raise RunInputError(NESTED_TOO_DEEPLY)
    if not isinstance(payload, dict):
        raise RunInputError(
            f"The request body is a JSON {type(payload).__name__}, not an object; send "
            '{"id", "messages", "trigger"} as useChat does.'
        )
    if "messages" not in payload and isinstance(payload.get("message"), dict):
        payload["messages"] = [payload.pop("message")]
    payload.setdefault("trigger", "submit-message")
    if not is_valid_id(payload.get("id")):
        raise RunInputError(f"id (the chat id) must be {ID_RULE}.")
    try:
        data = _REQUEST.validate_python(payload)
    except RecursionError as exc:
        raise RunInputError(NESTED_TOO_DEEPLY) from exc
    except ValidationError as exc:
        raise RunInputError(
            f"The request body is not a valid useChat request: {_describe(exc)}."
        ) from exc
    if not data.messages:
        raise RunInputError("messages is empty: send at least the new message (the user's turn).")
    unstorable = unstorable_problem(body) if may_hold_unstorable_values(body) else None
    if unstorable is not None:
        raise RunInputError(unstorable)
    extras = dict(data.model_extra or {})
    message_id = getattr(data, "message_id", None) or extras.pop("messageId", None)
    return ChatRequest(
        thread_id=data.id,
        messages=data.messages,
        trigger=data.trigger,
        message_id=message_id if isinstance(message_id, str) else None,
        extras=extras,
    )


def _data_url(url: str) -> tuple[str, str] | None:
    """``(media type, base64 data)`` of a ``data:`` URL, or ``None`` if it is not one."""
    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:"):
        return None
    params = head.removeprefix("data:").split(";")
    if params[-1] == "base64":
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return None
        return params[0] or "text/plain", data
    return params[0] or "text/plain", base64.b64encode(unquote_to_bytes(data)).decode()


def _media_part(part: FileUIPart, where: str) -> Any:
    """An inline or linked file of a user message as an AG-UI media content part."""
    decoded = _data_url(part.url)
    kind = _MEDIA.get(part.media_type.split("/", 1)[0], DocumentPart)
    metadata = {"filename": part.filename} if part.filename else None
    if decoded is not None:
        media_type, data = decoded
        source: Any = DataSource(value=data, mime_type=part.media_type or media_type)
    elif part.url.startswith("data:"):
        raise RunInputError(
            f"{where} is a data: URL that is not valid base64; send the file again."
        )
    else:
        source = UrlSource(value=part.url, mime_type=part.media_type or None)
    return kind(source=source, metadata=metadata)


def _user_message(message: UIMessage, index: int, attachment_id: AttachmentId) -> UserMessage:
    texts: list[str] = []
    content: list[Any] = []
    refs: list[dict[str, str]] = []
    for position, part in enumerate(message.parts):
        where = f"messages.{index}.parts.{position}"
        if isinstance(part, TextUIPart):
            texts.append(part.text)
            content.append(TextPart(text=part.text))
        elif isinstance(part, FileUIPart):
            found = attachment_id(part.url)
            if found is not None:
                refs.append({"id": found})
            else:
                content.append(_media_part(part, where))
    wire: dict[str, Any] = {"id": message.id, "role": "user"}
    if content and all(isinstance(item, TextPart) for item in content) and len(content) == 1:
        wire["content"] = texts[0]
    elif content:
        wire["content"] = [
            item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in content
        ]
    elif refs:
        wire["content"] = ""
    else:
        raise RunInputError(
            f"messages.{index} (id {shown_id(message.id)}) is a user message with no text or "
            "file part; send the user's words."
        )
    if refs:
        wire["attachments"] = refs
    return UserMessage.model_validate(wire)


def _tool_name(part: UIMessagePart) -> str:
    name = getattr(part, "tool_name", None)
    return str(name) if name is not None else str(part.type).removeprefix("tool-")


def _assistant_messages(message: UIMessage) -> tuple[list[Any], list[ResumeEntry]]:
    """An assistant ``UIMessage`` as an assistant message (its id, its text and its tool
    calls), the tool results the page added to it, and the approvals it gave."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[ToolMessage] = []
    approvals: list[ResumeEntry] = []
    for part in message.parts:
        if isinstance(part, TextUIPart):
            texts.append(part.text)
            continue
        call_id = getattr(part, "tool_call_id", None)
        if call_id is None:
            continue
        arguments = json.dumps(getattr(part, "input", None) or {})
        calls.append(
            ToolCall(id=call_id, function=FunctionCall(name=_tool_name(part), arguments=arguments))
        )
        if isinstance(part, _OUTPUTS) and not part.provider_executed:
            # The page's answer (addToolOutput), under the call's own id: the stored result
            # of a page's answer has that id, so an echo of it is recognised.
            if isinstance(part, ToolOutputErrorPart | DynamicToolOutputErrorPart):
                results.append(
                    ToolMessage(
                        id=call_id,
                        tool_call_id=call_id,
                        content=part.error_text,
                        error=part.error_text,
                    )
                )
            else:
                output = part.output
                content = output if isinstance(output, str) else json.dumps(output)
                results.append(ToolMessage(id=call_id, tool_call_id=call_id, content=content))
        elif isinstance(part, _APPROVALS) and part.approval is not None:
            approval = part.approval
            approved = bool(getattr(approval, "approved", False))
            payload: dict[str, Any] = {"approved": approved}
            reason = getattr(approval, "reason", None)
            if reason:
                payload["reason"] = reason
            approvals.append(
                ResumeEntry(interrupt_id=approval.id, status="resolved", payload=payload)
            )
    assistant = AssistantMessage(
        id=message.id, content="".join(texts) or None, tool_calls=calls or None
    )
    return [assistant, *results], approvals


def _extras(extras: dict[str, Any]) -> dict[str, Any]:
    """The run fields the project's ``body`` sets: ``tools``, ``context`` and ``state`` as
    AG-UI reads them, and every other key in ``forwardedProps``."""
    fields: dict[str, Any] = {}
    forwarded: dict[str, Any] = {}
    for key, value in extras.items():
        if key == "tools":
            try:
                fields["tools"] = _TOOLS.validate_python(value)
            except ValidationError as exc:
                raise RunInputError(
                    f"tools must be AG-UI tool declarations: {_describe(exc)}."
                ) from exc
        elif key == "context":
            try:
                fields["context"] = _CONTEXT.validate_python(value)
            except ValidationError as exc:
                raise RunInputError(
                    f"context must be AG-UI context entries: {_describe(exc)}."
                ) from exc
        elif key == "state":
            fields["state"] = value
        elif key == "forwardedProps" and isinstance(value, dict):
            forwarded.update(value)
        else:
            forwarded[key] = value
    if forwarded:
        fields["forwarded_props"] = forwarded
    return fields


def chat_run_input(chat: ChatRequest, *, run_id: str, attachment_id: AttachmentId) -> RunAgentInput:
    """The run ``chat`` asks for, as run ``run_id`` (see the module docstring).

    ``attachment_id(url)`` names the upload a ``file`` part's URL downloads (``None`` for any
    other URL). Raises ``RunInputError`` for a message it cannot translate.
    """
    messages: list[Any] = []
    resume: list[ResumeEntry] = []
    last = len(chat.messages) - 1
    for index, message in enumerate(chat.messages):
        if message.role == "user":
            messages.append(_user_message(message, index, attachment_id))
        elif message.role == "system":
            text = "".join(p.text for p in message.parts if isinstance(p, TextUIPart))
            messages.append(SystemMessage(id=message.id, content=text))
        else:
            translated, approvals = _assistant_messages(message)
            messages.extend(translated)
            if index == last:
                resume = approvals
    fields: dict[str, Any] = {"state": {}, "tools": [], "context": [], "forwarded_props": {}}
    fields.update(_extras(chat.extras))
    return RunAgentInput(
        thread_id=chat.thread_id,
        run_id=run_id,
        # AG-UI 1.0: an approval ends the run with an ``interrupt`` outcome, a stop with
        # ``cancelled``.
        protocol_version="1.0",
        messages=messages,
        resume=resume or None,
        **fields,
    )
