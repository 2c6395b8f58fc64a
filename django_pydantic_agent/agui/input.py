"""The run endpoint's input: parsing a body into a ``RunAgentInput``, and the checks that refuse it.

``parse_run_input`` turns the body into a ``RunAgentInput`` or raises ``RunInputError`` with a
safe message. pydantic validates the shape of the body; the other checks refuse what validates but
can never work:
a value no store can keep (NUL, an unpaired surrogate, NaN or Infinity), a history the model
cannot answer (it ends on an assistant message, holds only system or developer messages, or has a
user message with no content), and a client tool that shadows one of the agent's own. Each
returns a sentence naming the message or field, never echoing the submitted values (ids are
shown as a short ``repr``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ag_ui.core import RunAgentInput
from pydantic import ValidationError
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.ui.ag_ui import AGUIAdapter

from django_pydantic_agent.agui.ids import ID_RULE, is_valid_id

__all__ = [
    "NESTED_TOO_DEEPLY",
    "RunInputError",
    "clashing_tool_problem",
    "history_problem",
    "may_hold_unstorable_values",
    "parse_run_input",
    "unconvertible_history_problem",
    "unstorable_problem",
]

#: The 400 message for a JSON body nested deeper than the parser's recursion limit.
NESTED_TOO_DEEPLY = (
    "The request body is nested too deeply to parse; send at most a few hundred levels of "
    "nested arrays and objects."
)

_MAX_REPORTED_PROBLEMS = 5
_ID_SHOWN_CHARS = 40
# Roles pydantic-ai keeps out of the model's history: the server owns the system prompt.
_SYSTEM_ROLES = frozenset({"system", "developer"})
# A history ending on one of these has nothing for the model to answer.
_NOT_A_TURN = frozenset({"assistant", "reasoning"})
# The only ways NaN, Infinity, NUL or an unpaired surrogate can be spelled in valid JSON text
# (raw control characters and raw surrogates are not valid JSON, so the parser refuses them).
_SUSPECT_BYTES = (b"NaN", b"Infinity", b"\\u0000", b"\\ud", b"\\uD")


class _NonFinite:
    """Stands for a ``NaN``/``Infinity`` token while the body is walked."""


_NON_FINITE = _NonFinite()


def _shown_id(value: object) -> str:
    text = str(value)
    if len(text) > _ID_SHOWN_CHARS:
        text = text[:_ID_SHOWN_CHARS] + "..."
    return repr(text)


def _location(payload: Any, path: tuple[str | int, ...]) -> str:
    """``messages.2 (id 'u3') content.0.text`` for a path into the body."""
    if len(path) >= 2 and path[0] == "messages" and isinstance(path[1], int):
        message = payload["messages"][path[1]]
        named = f"messages.{path[1]}"
        if isinstance(message, dict) and isinstance(message.get("id"), str):
            named += f" (id {_shown_id(message['id'])})"
        rest = ".".join(str(part) for part in path[2:])
        return f"{named} {rest}".rstrip() if rest else named
    return ".".join(str(part) for part in path) or "(body)"


def may_hold_unstorable_values(body: bytes) -> bool:
    """Whether ``body`` could hold NaN, Infinity, NUL or an unpaired surrogate (a fast scan).

    ``False`` proves the body clean; ``True`` means it must be walked (``unstorable_problem``).
    """
    return any(token in body for token in _SUSPECT_BYTES)


def _walk(payload: Any) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), payload)]
    while stack:
        path, value = stack.pop()
        yield path, value
        if isinstance(value, dict):
            for key, item in reversed(value.items()):
                yield (*path, "(key)"), key
                stack.append(((*path, key), item))
        elif isinstance(value, list):
            stack.extend(((*path, index), item) for index, item in reversed(list(enumerate(value))))


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character, which no store can keep; remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return (
            "contains an unpaired surrogate (half of a UTF-16 pair), which is not valid "
            "Unicode; send valid UTF-8 text"
        )
    return None


def unstorable_problem(body: bytes) -> str | None:
    """Name the first NaN/Infinity, NUL or unpaired surrogate anywhere in the JSON ``body``.

    Returns ``None`` when there is none, or when ``body`` is not JSON at all (the parser words
    that refusal). The location is a dotted path, with the message id for a message.
    """

    def non_finite(token: str) -> _NonFinite:
        return _NON_FINITE

    try:
        payload = json.loads(body, parse_constant=non_finite)
    except (ValueError, RecursionError):  # pragma: no cover - callers pass bodies pydantic or
        return None  # json.loads already parsed; this only keeps the helper total
    for path, value in _walk(payload):
        problem = None
        if value is _NON_FINITE:
            problem = "is NaN or Infinity, which JSON cannot carry; send a finite number or null"
        elif isinstance(value, str):
            problem = _string_problem(value)
        if problem is not None:
            if path and path[-1] == "(key)":
                return f"A key in {_location(payload, path[:-1])} {problem}."
            return f"{_location(payload, path)} {problem}."
    return None


def history_problem(run_input: RunAgentInput) -> str | None:
    """Name what makes the posted messages a history the model cannot answer, or ``None``.

    Refused: a user message whose content is an empty list; a history of nothing but system or
    developer messages (the server owns the system prompt, so the model would get nothing); and
    a history ending on an assistant or reasoning message, unless the run resumes an interrupt.
    """
    for index, message in enumerate(run_input.messages):
        if message.role == "user" and isinstance(message.content, list) and not message.content:
            return (
                f"messages.{index} (id {_shown_id(message.id)}) is a user message with an "
                "empty content list; send text or at least one content part."
            )
    turns = [
        (index, message)
        for index, message in enumerate(run_input.messages)
        if message.role not in _SYSTEM_ROLES
    ]
    if not turns:
        return (
            "messages holds only system or developer messages, which this server does not "
            "take from clients; send the user's turn."
        )
    index, last = turns[-1]
    if last.role in _NOT_A_TURN and not getattr(run_input, "resume", None):
        return (
            f"messages.{index} (id {_shown_id(last.id)}) is an {last.role} message, and a "
            "history must end on the user's turn or a tool result; send the user's message last."
        )
    return None


def _tool_names(toolset: Any) -> Iterator[str]:
    """The tool names a toolset declares up front: function tools, also inside combinations.

    Wrappers (prefixed, renamed, filtered) are not looked into, since they change the names;
    pydantic-ai still refuses a clash with them when the run starts.
    """
    tools = getattr(toolset, "tools", None)
    if isinstance(tools, dict):
        yield from tools
    for inner in getattr(toolset, "toolsets", None) or ():
        yield from _tool_names(inner)


def clashing_tool_problem(agent: AbstractAgent[Any, Any], run_input: RunAgentInput) -> str | None:
    """Name a client tool whose name is also one of the agent's own tools, or ``None``.

    Only tools the agent declares up front are known here; a clash with a tool built per run
    is still refused by pydantic-ai, as a ``RUN_ERROR``.
    """
    server_tools: set[str] = set()
    for toolset in agent.toolsets:
        server_tools.update(_tool_names(toolset))
    for index, tool in enumerate(run_input.tools or ()):
        if tool.name in server_tools:
            return (
                f"tools.{index} is named {_shown_id(tool.name)}, like one of the agent's own "
                "tools; rename the client tool."
            )
    return None


class RunInputError(ValueError):
    """The request body is not a usable ``RunAgentInput``; the message is safe to return."""


def _describe_validation_error(exc: ValidationError) -> str:
    """Name the failing fields and error kinds, never the submitted values."""
    problems = []
    for error in exc.errors()[:_MAX_REPORTED_PROBLEMS]:
        location = ".".join(str(part) for part in error["loc"]) or "(body)"
        problems.append(f"{location} ({error['type']})")
    more = exc.error_count() - len(problems)
    suffix = f" and {more} more" if more > 0 else ""
    return "; ".join(problems) + suffix


def _load_json(body: bytes) -> Any:
    """``json.loads(body)``, raising ``RunInputError`` with a safe message on any failure."""
    try:
        return json.loads(body)
    except RecursionError as exc:
        raise RunInputError(NESTED_TOO_DEEPLY) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunInputError("The request body is not valid JSON; send a RunAgentInput.") from exc


def parse_run_input(body: bytes) -> RunAgentInput:
    """Parse a request body into a ``RunAgentInput`` (camelCase JSON).

    Raises ``RunInputError`` with a message naming what is wrong (not JSON, nested too deeply,
    not an object, NaN, NUL or an unpaired surrogate anywhere, the failing fields and error
    kinds, a ``threadId``/``runId`` outside the id alphabet of ``ids.py``, no messages) and
    never echoing the payload.
    """
    try:
        run_input = AGUIAdapter.build_run_input(body)
    except ValidationError as exc:
        # The body is parsed a second time only to word the refusal: pydantic rejects every
        # body that json.loads rejects, so the common, valid case is parsed once.
        payload = _load_json(body)
        # pydantic's parser refuses an unpaired surrogate as mere "invalid JSON"; name it.
        unstorable = unstorable_problem(body) if isinstance(payload, dict) else None
        if unstorable is not None:
            raise RunInputError(unstorable) from exc
        if not isinstance(payload, dict):
            raise RunInputError(
                f"The request body is a JSON {type(payload).__name__}, not an object; send a "
                "RunAgentInput object with threadId, runId and messages."
            ) from exc
        raise RunInputError(
            f"The request body is not a valid RunAgentInput: {_describe_validation_error(exc)}."
        ) from exc
    for name, value in (("threadId", run_input.thread_id), ("runId", run_input.run_id)):
        if not is_valid_id(value):
            raise RunInputError(f"{name} must be {ID_RULE}.")
    if not run_input.messages:
        raise RunInputError(
            "messages is empty: send at least one message (the user's turn) to run the agent."
        )
    # Only a body that could hold such a value is parsed a second time, to find it.
    unstorable = unstorable_problem(body) if may_hold_unstorable_values(body) else None
    if unstorable is not None:
        raise RunInputError(unstorable)
    return run_input


def unconvertible_history_problem(run_input: RunAgentInput) -> str:
    """Word the refusal of posted messages pydantic-ai could not convert to a model history.

    Names a tool message answering no earlier tool call when there is one; otherwise a general
    sentence. Never echoes values.
    """
    called: set[str] = set()
    for index, message in enumerate(run_input.messages):
        for call in getattr(message, "tool_calls", None) or ():
            called.add(call.id)
        if message.role == "tool" and message.tool_call_id not in called:
            return (
                f"messages.{index} is a tool message whose toolCallId answers no tool call "
                "of an earlier assistant message; send the history as it was streamed."
            )
    return (
        "The messages are not a usable conversation history (for example a file part with "
        "neither url nor data); send the history as it was streamed."
    )
