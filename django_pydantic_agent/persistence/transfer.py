"""Thread export and import: one JSON document per thread, and a readable Markdown view.

The document (``FORMAT``, version 1)::

    {"format": "django-pydantic-agent.thread", "version": 1, "title": "...",
     "messages": [{"parent": null | <index>, "active": true, "record": {...}, "wire": [...]}],
     "runs": [{"runId", "status", "usage", "startedAt", "finishedAt", "error"}]}

``messages`` is every message of every branch, each after its parent (``parent`` is the index
of the message it follows, ``null`` for a first message); the ``active`` ones are the active
branch. ``record`` is the chat-history record (role, content, status, run id, tool calls,
reasoning steps, the wire message's other keys such as attachment references), ``wire`` the
AG-UI messages ``load`` returns for it. This module reads and writes the format for every
store: one that keeps records (``ExportsThreads``) hands its tree to ``export_document`` and
writes what ``records_of`` and ``entries_tree`` read; any other exports every branch kept in
its messages as ``wire`` only (``export_thread``, ``import_thread``; ``message_tree``).

``check_document`` validates a whole document before anything is written and raises
``ImportProblem`` naming the first problem. An import never trusts what the file says about
ids, owners or attachments: the thread gets a new id and the caller as owner, every record a
new uuid, still-running messages become ``interrupted``, and the attachment references are
re-resolved by the transport against the caller's own uploads.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.chat_history.tree import Tree
from django_pydantic_agent.persistence.base import Conversation
from django_pydantic_agent.persistence.branching import thread_title
from django_pydantic_agent.persistence.derive import written_text
from django_pydantic_agent.persistence.feedback import FeedbackError, read_feedback
from django_pydantic_agent.persistence.message_tree import flatten, nest

if TYPE_CHECKING:
    from django.http import HttpRequest

    from django_pydantic_agent.chat_history import Message

__all__ = [
    "FORMAT",
    "IDENTITY_KEYS",
    "MAX_IMPORTED_MESSAGES",
    "MAX_IMPORTED_SUMMARIES",
    "MAX_SUMMARY_CHARS",
    "NOT_A_DOCUMENT",
    "VERSION",
    "ExportsThreads",
    "ImportProblem",
    "active_wire",
    "attachment_holders",
    "check_document",
    "document_bytes",
    "entries_tree",
    "export_document",
    "export_thread",
    "import_thread",
    "markdown",
    "nested_messages",
    "records_of",
    "render_record",
]

K = TypeVar("K")

FORMAT = "django-pydantic-agent.thread"
VERSION = 1
#: The most messages (all branches) one imported document may hold.
MAX_IMPORTED_MESSAGES = 10_000
#: The most compaction summaries one imported document may hold, and the longest of them.
MAX_IMPORTED_SUMMARIES = 100
MAX_SUMMARY_CHARS = 200_000
_RUNNING = "active"
_STOPPED = "interrupted"
#: The keys a record's identity is in: an export leaves them out, an import never takes them
#: from the file (it gives each record new ones).
IDENTITY_KEYS = frozenset({"message_uuid", "chat_uuid"})
#: What an exported record leaves out: its identity, and the wire copy a store keeps beside it.
_NOT_EXPORTED = IDENTITY_KEYS | {"wire", "wire_fingerprint"}


#: The ``ImportProblem`` (and the import route's 400) for a document that is not a JSON object.
NOT_A_DOCUMENT = "The document is not a JSON object; send what export/ returned."


class ImportProblem(ValueError):
    """A document ``check_document`` refuses; the message names the first problem."""


@runtime_checkable
class ExportsThreads(Protocol):
    """Optional: a store that exports and imports whole trees (every branch, every record)."""

    async def export(self, thread_id: str, *, request: HttpRequest) -> dict[str, Any] | None:
        """The owner's thread as a version-1 document, or ``None`` when it is missing."""
        ...

    async def import_document(
        self, document: dict[str, Any], thread_id: str, *, request: HttpRequest
    ) -> None:
        """Create the owner's thread ``thread_id`` from a checked document."""
        ...


def _problem(index: int, what: str) -> ImportProblem:
    return ImportProblem(f"messages.{index} {what}")


def check_document(document: Any) -> dict[str, Any]:
    """Return ``document`` if it is an importable version-1 thread; raise ``ImportProblem``.

    Checked: the format and version, a string title, a non-empty list of at most
    ``MAX_IMPORTED_MESSAGES`` messages, each an object whose ``parent`` is ``null`` or the
    index of an earlier message, whose ``active`` is a boolean, which has a ``record`` object
    or a ``wire`` list of objects; that the active messages form one path from a first
    message down (each active message's parent active, at most one active child each); and
    the optional ``summaries`` (compaction summaries, each naming the index of the last
    message it stands for as ``through``) and ``feedback`` (by message id).
    """
    if not isinstance(document, dict):
        raise ImportProblem(NOT_A_DOCUMENT)
    if document.get("format") != FORMAT or document.get("version") != VERSION:
        raise ImportProblem(
            f'format must be "{FORMAT}" and version {VERSION}; send a document that '
            "GET threads/<id>/export/?format=json returned."
        )
    title = document.get("title", "")
    if not isinstance(title, str) or len(title) > 255:
        raise ImportProblem("title must be a string of at most 255 characters.")
    messages = document.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ImportProblem("messages must be a non-empty list of messages.")
    if len(messages) > MAX_IMPORTED_MESSAGES:
        raise ImportProblem(
            f"messages holds {len(messages)} messages; an import takes at most "
            f"{MAX_IMPORTED_MESSAGES}."
        )
    active_children: dict[int | None, int] = {}
    active: list[bool] = []
    for index, entry in enumerate(messages):
        if not isinstance(entry, dict):
            raise _problem(index, "is not an object.")
        parent = entry.get("parent")
        if parent is not None and (
            isinstance(parent, bool) or not isinstance(parent, int) or not 0 <= parent < index
        ):
            raise _problem(index, "has a parent that is not the index of an earlier message.")
        if not isinstance(entry.get("active"), bool):
            raise _problem(index, "needs a boolean active.")
        record, wire = entry.get("record"), entry.get("wire")
        if record is not None and not isinstance(record, dict):
            raise _problem(index, "has a record that is not an object.")
        if wire is not None and (
            not isinstance(wire, list) or not all(isinstance(m, dict) for m in wire)
        ):
            raise _problem(index, "has a wire that is not a list of objects.")
        if record is None and not wire:
            raise _problem(index, "has neither a record nor wire messages.")
        if entry["active"]:
            if parent is not None and not active[parent]:
                raise _problem(index, "is active but its parent is not.")
            if active_children.get(parent):
                raise _problem(index, "is a second active message after the same parent.")
            active_children[parent] = 1
        active.append(entry["active"])
    if not any(active):
        raise ImportProblem("No message is active; mark the branch to show as active.")
    _check_summaries(document.get("summaries"), len(messages))
    _check_feedback(document.get("feedback"))
    return document


def _check_feedback(feedback: Any) -> None:
    """The optional ``feedback``: ``{message id: {"rating", "comment"}}`` (``read_feedback``)."""
    if feedback is None:
        return
    if not isinstance(feedback, dict) or len(feedback) > MAX_IMPORTED_MESSAGES:
        raise ImportProblem("feedback must be an object of message ids to {rating, comment}.")
    for message_id, value in feedback.items():
        if not message_id or len(message_id) > 255:
            raise ImportProblem("feedback names a message id of 1 to 255 characters.")
        try:
            read_feedback(value)
        except FeedbackError as exc:
            raise ImportProblem(f"feedback.{message_id}: {exc}") from None


def _check_summaries(summaries: Any, count: int) -> None:
    """The optional ``summaries``: a list of at most ``MAX_IMPORTED_SUMMARIES`` objects, each
    with ``through`` (the index of a message) and a non-empty string ``text``."""
    if summaries is None:
        return
    if not isinstance(summaries, list) or len(summaries) > MAX_IMPORTED_SUMMARIES:
        raise ImportProblem(
            f"summaries must be a list of at most {MAX_IMPORTED_SUMMARIES} summaries."
        )
    for index, entry in enumerate(summaries):
        through = entry.get("through") if isinstance(entry, dict) else None
        if isinstance(through, bool) or not isinstance(through, int) or not 0 <= through < count:
            raise ImportProblem(f"summaries.{index} needs through, the index of a message.")
        text = entry.get("text")
        if not isinstance(text, str) or not text or len(text) > MAX_SUMMARY_CHARS:
            raise ImportProblem(
                f"summaries.{index} needs a text of 1 to {MAX_SUMMARY_CHARS} characters."
            )
        for key in ("createdAt", "runId"):
            if not isinstance(entry.get(key, ""), str):
                raise ImportProblem(f"summaries.{index} has a {key} that is not a string.")


def _record(fields: dict[str, Any], chat_uuid: uuid.UUID) -> Message:
    """The record an export holds (its identity keys ignored) in the chat ``chat_uuid``."""
    from django_pydantic_agent.chat_history import Message
    from django_pydantic_agent.chat_history.records import WIRE_CONTEXT

    kept = {k: v for k, v in fields.items() if k not in IDENTITY_KEYS}
    return Message.model_validate({**kept, "chat_uuid": chat_uuid}, context=dict(WIRE_CONTEXT))


def render_record(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The wire messages of an exported record (``ValueError`` when it is not a record)."""
    from django_pydantic_agent.persistence.wire import records_to_wire

    return records_to_wire([_record(record, uuid.uuid4())])


def records_of(document: dict[str, Any], chat_uuid: uuid.UUID) -> list[Message]:
    """The chat-history records of a checked document's messages, under new uuids of
    ``chat_uuid``, a message still running stopped as ``interrupted`` (``ImportProblem`` for
    a record that is not one)."""
    from pydantic import ValidationError

    from django_pydantic_agent.persistence.wire import wire_to_records

    records = []
    for index, entry in enumerate(document["messages"]):
        record = entry.get("record")
        try:
            if record is None:
                read = wire_to_records(entry["wire"], chat_uuid=chat_uuid).messages
                if len(read) != 1:
                    raise ImportProblem(
                        f"messages.{index} has wire messages that are not one message; export "
                        "records with the thread, or send one message per entry."
                    )
                message = read[0]
            else:
                message = _record(record, chat_uuid)
        except ValidationError as exc:
            where = ".".join(str(p) for p in exc.errors()[0]["loc"]) or "(record)"
            raise ImportProblem(
                f"messages.{index} record is not a message: {where} "
                f"({exc.errors()[0]['type']}); send the record as export/ wrote it."
            ) from exc
        message.message_uuid = uuid.uuid4()
        for call in message.tool_calls:
            call.uuid = uuid.uuid4()
            if call.status == _RUNNING:
                call.status = _STOPPED
        for step in message.reasonings:
            step.uuid = uuid.uuid4()
            if step.status == _RUNNING:
                step.status = _STOPPED
        if message.status == _RUNNING or message.in_progress:
            message.status, message.in_progress = _STOPPED, False
        records.append(message)
    return records


def _wire(entry: dict[str, Any], render: Any = render_record) -> list[Any]:
    """A document entry's wire messages (``render(record)`` for one exported without)."""
    wire = entry.get("wire")
    if wire is None and render is not None:
        wire = render(entry["record"])
    return list(wire or [])


def active_wire(document: dict[str, Any], render: Any = render_record) -> list[Any]:
    """The wire messages of the document's active branch, in order (``render(record)`` gives
    those of a message exported without ``wire``)."""
    return [m for entry in document["messages"] if entry["active"] for m in _wire(entry, render)]


def export_document(
    tree: Tree[K],
    *,
    title: str,
    wire: Callable[[K], list[Any]],
    record: Callable[[K], Message] | None = None,
    order: Iterable[K] | None = None,
    times: Mapping[str, str] | None = None,
    runs: Sequence[dict[str, Any]] = (),
    summaries: Sequence[tuple[K, dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """A version-1 document of ``tree`` (``Tree.shape`` in ``order``): each message's parent
    index, whether it is active, its ``record`` (without its identity or a wire copy kept
    beside it; left out without ``record``) and ``wire``. ``times`` (``createdAt``,
    ``updatedAt``) go before the messages; ``summaries`` are ``(the key of the last message
    each stands for, the rest)``, kept when that message is exported."""
    shape = tree.shape(order)
    messages: list[dict[str, Any]] = []
    for key, parent, active in shape:
        entry: dict[str, Any] = {"parent": parent, "active": active}
        if record is not None:
            entry["record"] = record(key).model_dump(mode="json", exclude=set(_NOT_EXPORTED))
        entry["wire"] = wire(key)
        messages.append(entry)
    document = {"format": FORMAT, "version": VERSION, "title": title, **(times or {})}
    document.update(messages=messages, runs=list(runs))
    if summaries is not None:
        index = {key: i for i, (key, _, _) in enumerate(shape)}
        document["summaries"] = [
            {"through": index[key], **rest} for key, rest in summaries if key in index
        ]
    return document


def entries_tree(document: dict[str, Any]) -> Tree[int]:
    """The tree of a checked document's messages, keyed by index; its active branch is the
    document's (``check_document``: one path from a first message down)."""
    return Tree.of(
        (index, entry.get("parent"), "", entry["active"])
        for index, entry in enumerate(document["messages"])
    )


def nested_messages(document: dict[str, Any], wire_of: Callable[[int], list[Any]]) -> list[Any]:
    """What a store that keeps branches in its messages saves of a checked document: its
    active branch, continued down the newest branch below its last active message, the other
    branches inside it (``message_tree.nest``); ``wire_of(index)`` gives a message's wire."""
    tree = entries_tree(document)
    return nest(tree, wire_of, tree.path(tree.active[-1]))


async def export_thread(
    store: Any, thread_id: str, *, request: HttpRequest
) -> dict[str, Any] | None:
    """The owner's thread as a document: the store's own (``ExportsThreads``), else every
    branch of its stored messages as wire messages, one entry each (``message_tree``);
    ``None`` when the thread is missing."""
    if implements(store, ExportsThreads):
        return await store.export(thread_id, request=request)
    conversation = await store.load(thread_id, request=request)
    if conversation is None:
        return None
    title = await thread_title(store, thread_id, request=request)
    flat = flatten(conversation.messages)
    return export_document(flat.tree, title=title, wire=lambda key: [flat.messages[key]])


def _stopped(wire: list[Any]) -> list[Any]:
    return [
        {**m, "status": _STOPPED} if isinstance(m, dict) and m.get("status") == _RUNNING else m
        for m in wire
    ]


async def import_thread(
    store: Any,
    document: dict[str, Any],
    thread_id: str,
    *,
    request: HttpRequest,
    render: Any = render_record,
) -> None:
    """Create the owner's thread ``thread_id`` from a checked ``document``: the store's own
    import (``ExportsThreads``), else a ``save`` (``nested_messages``) and a ``rename``."""
    if implements(store, ExportsThreads):
        await store.import_document(document, thread_id, request=request)
        return

    messages = nested_messages(document, lambda i: _stopped(_wire(document["messages"][i], render)))
    await store.save(Conversation(thread_id=thread_id, messages=messages), request=request)
    if document.get("title"):
        await store.rename(thread_id, document["title"], request=request)


def attachment_holders(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(where, holder)`` of every ``attachments`` list of a checked document's messages:
    in each record's ``wire_extra`` and each wire message, top level or in ``metadata``."""
    found: list[tuple[str, dict[str, Any]]] = []
    for index, entry in enumerate(document["messages"]):
        record = entry.get("record")
        candidates: list[tuple[str, Any]] = []
        if isinstance(record, dict):
            candidates.append((f"messages.{index}.record.wire_extra", record.get("wire_extra")))
        for number, wire in enumerate(entry.get("wire") or ()):
            candidates.append((f"messages.{index}.wire.{number}", wire))
        for where, message in candidates:
            if not isinstance(message, dict):
                continue
            metadata = message.get("metadata")
            for name, holder in (("", message), (".metadata", metadata)):
                if isinstance(holder, dict) and holder.get("attachments") is not None:
                    found.append((f"{where}{name}.attachments", holder))
    return found


_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool", "reasoning": "Reasoning"}


def _fence(text: str) -> str:
    """A backtick fence longer than any run of backticks in ``text``, so it cannot close early."""
    longest = 0
    run = 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


def markdown(document: dict[str, Any], render: Any = render_record) -> str:
    """The active branch of an exported document as Markdown: each message's text as it was
    written (tables, code fences, lists and line breaks kept), under its role."""
    lines = [f"# {document.get('title') or 'Conversation'}", ""]
    others = sum(1 for m in document["messages"] if not m["active"])
    if others:
        lines += [f"_{others} more message(s) on other branches are in the JSON export._", ""]
    for message in active_wire(document, render):
        if not isinstance(message, dict):
            continue
        role = str(message.get("role") or "message")
        label = _LABELS.get(role, role.capitalize())
        text = written_text(message).strip()
        if role == "reasoning":
            lines += [f"> **{label}:** " + text.replace("\n", "\n> "), ""]
            continue
        lines += [f"**{label}:**", "", text, ""] if text else [f"**{label}:**", ""]
        for call in message.get("toolCalls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                arguments = str(function.get("arguments") or "")
                fence = _fence(arguments)
                lines += [
                    f"Tool call `{function.get('name')}`:",
                    "",
                    f"{fence}json",
                    arguments,
                    fence,
                    "",
                ]
        for ref in message.get("attachments") or ():
            if isinstance(ref, dict):
                lines += [f"Attachment: {ref.get('name') or ref.get('id')}", ""]
    return "\n".join(lines).rstrip() + "\n"


def document_bytes(document: dict[str, Any]) -> bytes:
    """The document as compact UTF-8 JSON."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
