"""The run endpoint's input: parsing a body into a ``RunAgentInput``, and the checks that refuse it.

``accept_run`` is the whole intake of a run, in order: the JSON body under the route's cap, the
parsed input, the history and tool checks, the attachment references made the server's
(``server_attachment_refs``: each must name an upload of the caller, and is replaced by the
attachment store's ref, whatever the client wrote beside the id), and the history's conversion
for the model. Whatever it refuses is one JSON answer, before anything streams. A durable run
reads only the newest posted messages (``HistoryWindow.max_posted``): ``parse_newest`` builds
only those, and the older ones are checked as JSON, unread.

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

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from ag_ui.core import Message, RunAgentInput
from django.http import HttpRequest
from pydantic import TypeAdapter, ValidationError
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.ui.ag_ui import AGUIAdapter
from pydantic_core import SchemaValidator
from pydantic_core import core_schema as cs

from django_pydantic_agent.agui.errors import Refusal
from django_pydantic_agent.agui.http import NESTED_TOO_DEEPLY, read_json_body
from django_pydantic_agent.agui.ids import ID_RULE, is_valid_id
from django_pydantic_agent.agui.unstorable import (
    may_hold_unstorable_values,
    shown_id,
    unstorable_problem,
)
from django_pydantic_agent.persistence import (
    AttachmentRef,
    AttachmentStore,
    StoreError,
    attachment_refs,
    is_persistent,
)

__all__ = [
    "NESTED_TOO_DEEPLY",
    "RUN_TOO_BIG",
    "AcceptedRun",
    "RunInputError",
    "accept_run",
    "clashing_tool_problem",
    "history_problem",
    "may_hold_unstorable_values",
    "parse_newest",
    "parse_run_input",
    "ref_json",
    "server_attachment_refs",
    "server_tool_names",
    "unconvertible_history_problem",
    "unstorable_problem",
]

#: What the 413 of the run endpoint asks the caller to send instead.
RUN_TOO_BIG = "send a shorter history, or raise the limit."

_MAX_REPORTED_PROBLEMS = 5
# Roles pydantic-ai keeps out of the model's history: the server owns the system prompt.
_SYSTEM_ROLES = frozenset({"system", "developer"})
# A history ending on one of these has nothing for the model to answer.
_NOT_A_TURN = frozenset({"assistant", "reasoning"})


def history_problem(run_input: RunAgentInput) -> str | None:
    """Name what makes the posted messages a history the model cannot answer, or ``None``.

    Refused: a user message whose content is an empty list; a history of nothing but system or
    developer messages (the server owns the system prompt, so the model would get nothing); and
    a history ending on an assistant or reasoning message, unless the run resumes an interrupt.
    """
    for index, message in enumerate(run_input.messages):
        if message.role == "user" and isinstance(message.content, list) and not message.content:
            return (
                f"messages.{index} (id {shown_id(message.id)}) is a user message with an "
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
            f"messages.{index} (id {shown_id(last.id)}) is an {last.role} message, and a "
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


def server_tool_names(agent: AbstractAgent[Any, Any]) -> frozenset[str]:
    """The names of the tools ``agent`` declares up front (``_tool_names`` of its toolsets):
    the tools the server runs itself, as opposed to a client's."""
    names: set[str] = set()
    for toolset in agent.toolsets:
        names.update(_tool_names(toolset))
    return frozenset(names)


def clashing_tool_problem(agent: AbstractAgent[Any, Any], run_input: RunAgentInput) -> str | None:
    """Name a client tool whose name is also one of the agent's own tools, or ``None``.

    Only tools the agent declares up front are known here; a clash with a tool built per run
    is still refused by pydantic-ai, as a ``RUN_ERROR``.
    """
    server_tools = server_tool_names(agent)
    for index, tool in enumerate(run_input.tools or ()):
        if tool.name in server_tools:
            return (
                f"tools.{index} is named {shown_id(tool.name)}, like one of the agent's own "
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
        if any("recursion limit" in error["msg"] for error in exc.errors()):
            raise RunInputError(NESTED_TOO_DEEPLY) from exc  # pydantic's parser's limit
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
    suspect = may_hold_unstorable_values(body, parsed=True)
    unstorable = unstorable_problem(body) if suspect else None
    if unstorable is not None:
        raise RunInputError(unstorable)
    return run_input


def _object(fields: dict[str, cs.TypedDictField] | None = None) -> cs.CoreSchema:
    """A JSON object, of which only ``fields`` are built."""
    return cs.typed_dict_schema(fields or {}, extra_behavior="ignore")


_QUOTED: Final = cs.typed_dict_field(cs.any_schema(), required=False)


@functools.lru_cache(maxsize=8)
def _newest_validator(newest: int, *, quotes: bool = False) -> SchemaValidator:
    """The top level of a run body whose ``messages`` are older objects, then ``newest``
    messages: those validated as AG-UI messages and the older ones as objects, of which nothing
    is built; with ``quotes``, the older ones' role and attachment lists, and the newest ones
    as objects."""
    message: cs.CoreSchema = cs.definition_reference_schema("message")
    # Each older message validates to False, the object made of it freed at once: 10,000 dicts
    # held until the parse ends made a full garbage collection run every few turns.
    older: cs.CoreSchema = cs.no_info_after_validator_function(bool, _object())
    if quotes:
        message = older
        older = _object({"role": _QUOTED, "attachments": _QUOTED, "metadata": _QUOTED})
    messages = cs.tuple_schema([older, *[message] * newest], variadic_item_index=0)
    body = cs.typed_dict_schema(
        {"messages": cs.typed_dict_field(messages)},
        extra_behavior="ignore" if quotes else "allow",
    )
    definition: Any = {**TypeAdapter(Message).core_schema, "ref": "message"}
    return SchemaValidator(cs.definitions_schema(body, [definition]))


def parse_newest(body: bytes, newest: int) -> RunAgentInput | None:
    """``parse_run_input(body)`` with only the newest ``newest`` of its messages, or ``None``
    when the body has no more messages than that or is anything ``parse_run_input`` refuses or
    might (parse it whole then: that words the refusal).

    The older messages are checked as the rest of the JSON body is (valid JSON, nested at most
    ``MAX_JSON_DEPTH`` deep, no NaN, Infinity, NUL or unpaired surrogate) and must be objects,
    but nothing of them is built or validated as a message: a durable run never reads them
    (``HistoryWindow.max_posted``). The run path's figures at message 10,000 of a client that
    posts its transcript back (5 MB) are in docs/benchmarks.md, "posting the thread back":
    parsing it whole took 180 ms of the turn's 285.
    """
    try:
        parsed = _newest_validator(newest).validate_json(body)
        messages: Sequence[Any] = parsed.pop("messages")
        if len(messages) == newest:
            return None
        run_input = RunAgentInput.model_validate({**parsed, "messages": []})
    except ValidationError:
        return None
    # Validated as messages above: not again (400 messages, 3 ms)
    run_input = run_input.model_copy(update={"messages": list(messages[-newest:])})
    if not (is_valid_id(run_input.thread_id) and is_valid_id(run_input.run_id)):
        return None
    if may_hold_unstorable_values(body, parsed=True):
        return None
    return run_input


async def _older_quotes_pass(
    body: bytes, newest: int, store: AttachmentStore | None, request: HttpRequest
) -> bool:
    """Whether ``server_attachment_refs`` would take what the user messages older than the
    newest ``newest`` of ``body`` quote (they are never read, so their refs are only checked,
    never replaced)."""
    if body.rfind(b'"attachments"') < 0:
        return True
    try:
        older = _newest_validator(newest, quotes=True).validate_json(body)["messages"][:-newest]
    except ValidationError:  # pragma: no cover - parse_newest took the same objects
        return False
    ids: list[Any] = []
    for message in older:
        if message.get("role") != "user":
            continue
        for holder in (message, message.get("metadata")):
            refs = holder.get("attachments") if isinstance(holder, dict) else None
            if refs is None:
                continue
            if not isinstance(refs, list):
                return False
            ids += [ref.get("id") if isinstance(ref, dict) else None for ref in refs]
    if not ids:
        return True
    if not all(isinstance(i, str) and i for i in ids) or store is None or not is_persistent(store):
        return False
    known = await attachment_refs(store, ids, request=request)
    return all(i in known for i in ids)


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


def ref_json(ref: AttachmentRef) -> dict[str, Any]:
    """The wire form of ``ref``: ``{"id", "name", "mime", "size"}`` and ``"url"`` when set."""
    body: dict[str, Any] = {"id": ref.id, "name": ref.name, "mime": ref.mime, "size": ref.size}
    if ref.url is not None:
        body["url"] = ref.url
    return body


def _quoted_refs(run_input: RunAgentInput) -> list[tuple[int, str, dict[str, Any], list[Any]]]:
    """``(message index, where, wire message, refs list)`` of every user message quoting refs:
    its ``attachments`` list, and its ``metadata.attachments`` list."""
    found = []
    for index, message in enumerate(run_input.messages):
        if message.role != "user":
            continue
        wire = message.model_dump(mode="json", by_alias=True, exclude_unset=True)
        metadata = wire.get("metadata")
        for where, holder in (("attachments", wire), ("metadata.attachments", metadata)):
            if isinstance(holder, dict) and holder.get("attachments") is not None:
                found.append((index, where, wire, holder["attachments"]))
    return found


async def server_attachment_refs(
    run_input: RunAgentInput, store: AttachmentStore | None, *, request: HttpRequest
) -> RunAgentInput:
    """``run_input`` with each attachment reference of its user messages replaced by the ref
    the attachment store holds for the caller (the client's name, type and size are dropped).

    Raises ``RunInputError`` (a 400) naming the message and the id for a reference that is not
    an object with a string ``id``, an id that names no upload of the caller (a stranger's
    reads as missing), and any reference when the mount has no attachment store. The store's
    ``StoreError`` propagates. ``run_input`` is returned as is when nothing is quoted.
    """
    quoted = _quoted_refs(run_input)
    if not quoted:
        return run_input
    ids: list[str] = []
    for index, where, _wire, refs in quoted:
        message_id = shown_id(run_input.messages[index].id)
        if not isinstance(refs, list):
            raise RunInputError(
                f"messages.{index} (id {message_id}) {where} must be a list of attachment "
                'references ({"id": ...}); send the ids that attachments/ returned.'
            )
        for position, ref in enumerate(refs):
            if not isinstance(ref, dict) or not isinstance(ref.get("id"), str) or not ref["id"]:
                raise RunInputError(
                    f"messages.{index} (id {message_id}) {where}.{position} has no string "
                    "id; quote an upload by the id that attachments/ returned."
                )
            ids.append(ref["id"])
    if store is None or not is_persistent(store):
        raise RunInputError(
            f"messages.{quoted[0][0]} (id {shown_id(run_input.messages[quoted[0][0]].id)}) "
            f"quotes attachment {shown_id(ids[0])}, but this endpoint keeps no uploads (its "
            "attachment store is Null); send the file's content instead, or mount an "
            "attachment store."
        )
    known = await attachment_refs(store, ids, request=request)
    for index, where, _wire, refs in quoted:
        for position, ref in enumerate(refs):
            if ref["id"] not in known:
                raise RunInputError(
                    f"messages.{index} (id {shown_id(run_input.messages[index].id)}) "
                    f"{where}.{position} names attachment {shown_id(ref['id'])}, which is not "
                    "an upload of yours; upload the file to attachments/ and quote the id it "
                    "returns."
                )
    messages = list(run_input.messages)
    for index, where, wire, refs in quoted:
        replaced = [ref_json(known[ref["id"]]) for ref in refs]
        if where == "attachments":
            wire["attachments"] = replaced
        else:
            wire["metadata"] = {**wire["metadata"], "attachments": replaced}
        messages[index] = type(messages[index]).model_validate(wire)
    return run_input.model_copy(update={"messages": messages})


_Converted = TypeVar("_Converted")


@dataclass(frozen=True, kw_only=True)
class AcceptedRun(Generic[_Converted]):
    """A run the intake accepted: its input (attachment references made the server's), the
    client's ``Accept`` header, and what ``convert`` made of the input."""

    run_input: RunAgentInput
    accept: str | None
    converted: _Converted


async def accept_run(
    request: HttpRequest,
    *,
    agent: AbstractAgent[Any, Any],
    attachment_store: AttachmentStore | None,
    limit: int,
    convert: Callable[[RunAgentInput, str | None], _Converted],
    parse: Callable[[bytes], RunAgentInput] = parse_run_input,
    reads_newest: int | None = None,
) -> AcceptedRun[_Converted]:
    """The run ``request`` posts; raises the ``Refusal`` refusing it (nothing has streamed).

    ``parse`` turns the body into the run input (``parse_run_input``, AG-UI's; another
    transport passes its own, raising ``RunInputError``), and the checks below are every
    transport's. 415 or 413 for the body (``read_json_body``, at most ``limit`` bytes); 400,
    logged as one ``WARNING`` line, for an input ``parse``, ``history_problem``,
    ``clashing_tool_problem`` or ``server_attachment_refs`` refuses, or one that
    ``convert(run_input, accept)`` cannot convert (it raises ``ValueError``/``TypeError``;
    ``unconvertible_history_problem`` words it); the attachment store's refusal as
    ``errors.Refusal.of_store`` words it.

    ``reads_newest``: the run reads only that many of the newest posted messages (a durable
    run, ``HistoryWindow.max_posted``), and the input holds only those (``parse_newest``); an
    older one is checked as JSON, and the attachments a user message quotes as above, but
    never built (an AG-UI body; a transport with a ``parse`` of its own passes ``None``).
    ``None``: every posted message is read and checked.
    """
    body = read_json_body(request, limit=limit, too_big=RUN_TOO_BIG)
    try:
        accepted = None
        if reads_newest is not None:
            accepted = await _accept_newest(
                body, reads_newest, request, agent, attachment_store, convert
            )
        if accepted is None:  # every message read, and every refusal worded, as it is posted
            run_input = parse(body)
            accepted = await _accepted(run_input, request, agent, attachment_store, convert)
    except RunInputError as exc:
        raise Refusal.invalid(request, str(exc)) from None
    except StoreError as exc:
        raise Refusal.of_store(exc, store="attachment") from None
    return accepted


async def _accepted(
    run_input: RunAgentInput,
    request: HttpRequest,
    agent: AbstractAgent[Any, Any],
    store: AttachmentStore | None,
    convert: Callable[[RunAgentInput, str | None], _Converted],
) -> AcceptedRun[_Converted]:
    """``run_input`` checked, its attachment references made the server's and converted; raises
    ``RunInputError`` (see ``accept_run``)."""
    problem = history_problem(run_input) or clashing_tool_problem(agent, run_input)
    if problem is not None:
        raise RunInputError(problem)
    run_input = await server_attachment_refs(run_input, store, request=request)
    accept = request.headers.get("accept")
    try:
        converted = convert(run_input, accept)
    except (ValueError, TypeError) as exc:
        raise RunInputError(unconvertible_history_problem(run_input)) from exc
    return AcceptedRun(run_input=run_input, accept=accept, converted=converted)


async def _accept_newest(
    body: bytes,
    newest: int,
    request: HttpRequest,
    agent: AbstractAgent[Any, Any],
    store: AttachmentStore | None,
    convert: Callable[[RunAgentInput, str | None], _Converted],
) -> AcceptedRun[_Converted] | None:
    """The run of a body with more than ``newest`` messages, of which it holds only the newest
    ``newest``; ``None`` for any other body, and for any it would refuse: ``accept_run`` reads
    that one whole, and words the refusal with each message where it was posted."""
    run_input = parse_newest(body, newest)
    if run_input is None or not await _older_quotes_pass(body, newest, store, request):
        return None
    try:
        return await _accepted(run_input, request, agent, store, convert)
    except RunInputError:
        return None
