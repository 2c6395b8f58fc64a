"""Inbound reconciliation: check a whole ``RunAgentInput`` against stored history, then plan.

Server-authoritative history: the stored chat is what the agent sees. An inbound message is
accepted when it is

- an echo of a stored record (any id ``translate_messages`` can emit, see ``replayed_ids``);
- a new ``user`` message;
- a ``tool`` message answering a stored tool call that has no result yet (client-side tools);

and ``input.resume`` must answer every open interrupt of the thread (AG-UI 1.0). Anything else
raises :class:`~django_pydantic_agent.chat_history.errors.InvalidInputError` naming the
offending message, before anything is written.

Edited echoes (S4): a known user id whose text differs from the stored text is refused, unless
it is the last message posted and the repositories keep branches (``StartsBranches``):

- posted messages that echo the stored history up to a stored user message and stop there
  *regenerate* the answer to it (when something follows it);
- the same with that user message's content changed *edits* it.

Without branches both are refused (an answered user message posted last, with nothing new after
it, cannot be answered again there). Either starts a new branch at that point
(``InboundPlan.branch_at``); the old branch is kept, and the model sees the new one. An edited
message keeps its id on the new branch; the stored record it replaces is renamed ``<id>~<8
hex>`` (``InboundPlan.renamed``), so ids stay unique in the thread and the old branch can be
switched back to.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ag_ui.core import ResumeEntry, RunAgentInput, ToolMessage, UserMessage

from django_pydantic_agent.chat_history.agui_messages import tool_call_id
from django_pydantic_agent.chat_history.errors import InvalidInputError
from django_pydantic_agent.chat_history.records import Message, ToolCall
from django_pydantic_agent.chat_history.translate import (
    NO_RESULT_TEXT,
    replayed_ids,
)

__all__ = [
    "SYSTEM_ROLES",
    "InboundPlan",
    "ToolAnswer",
    "derive_chat_name",
    "dump_parts",
    "flatten_content",
    "open_interrupts",
    "plan_inbound",
]

logger = logging.getLogger("django_pydantic_agent.chat_history")

_TOKEN = re.compile(r"\w+|[^\w\s]")
_NAME_LIMIT = 100


def flatten_content(content: Any) -> str:
    """Flatten AG-UI message content to text: text parts joined, others as ``[<type>]``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else getattr(part, "type", None)
            if kind == "text":
                text = part.get("text") if isinstance(part, dict) else getattr(part, "text", "")
                pieces.append(text or "")
            elif kind:
                pieces.append(f"[{kind}]")
            else:
                logger.warning("A content part without a type was skipped: %r.", part)
        return "".join(pieces)
    logger.warning("Content of type %s was stored as its string form.", type(content).__name__)
    return str(content)


def dump_parts(content: Any) -> list[dict[str, Any]] | None:
    """The raw AG-UI (camelCase) form of list content, or ``None`` for text content."""
    if not isinstance(content, list):
        return None
    dumped: list[dict[str, Any]] = []
    for part in content:
        if hasattr(part, "model_dump"):
            dumped.append(part.model_dump(mode="json", by_alias=True, exclude_none=True))
        elif isinstance(part, dict):
            dumped.append(dict(part))
    return dumped


def derive_chat_name(text: str) -> str:
    """A chat title from the first message: at most 100 characters, cut on a word boundary."""
    if not text.strip():
        return "New Chat"
    if len(text) <= _NAME_LIMIT:
        return text.strip()
    end = 0
    for match in _TOKEN.finditer(text[: _NAME_LIMIT + 1]):
        if match.end() <= _NAME_LIMIT:
            end = match.end()
    if end == 0 or end < _NAME_LIMIT - 30:
        return text[:_NAME_LIMIT].strip()
    return text[:end].strip()


@dataclass(frozen=True, kw_only=True)
class ToolAnswer:
    """A client tool result for a stored, unanswered tool call."""

    message: Message
    call: ToolCall
    result_id: str
    content: str
    content_parts: list[dict[str, Any]] | None
    error: str | None
    encrypted_value: str | None


@dataclass(kw_only=True)
class InboundPlan:
    """What an accepted input writes before the run: new user messages, answers, resumes."""

    users: list[UserMessage] = field(default_factory=list)
    answers: list[ToolAnswer] = field(default_factory=list)
    resume_carrier: Message | None = None
    resolved: dict[str, dict[str, Any]] = field(default_factory=dict)
    branch_at: Message | None = None
    """The stored record where a new branch starts (it and what follows leave the active
    branch), or ``None``."""
    kept: int | None = None
    """With ``branch_at``: how many records of the history stay on the active branch."""
    renamed: tuple[Message, str] | None = None
    """An edit's replaced user record and the id it is renamed to."""


def _last_outcome(history: Sequence[Message]) -> Message | None:
    for message in reversed(history):
        if message.run_outcome:
            return message
    return None


def open_interrupts(history: Sequence[Message]) -> tuple[Message | None, list[dict[str, Any]]]:
    """The message carrying the thread's last run outcome, and its unanswered interrupts."""
    carrier = _last_outcome(history)
    if carrier is None or carrier.run_outcome is None:
        return None, []
    outcome = carrier.run_outcome
    if outcome.get("type") != "interrupt":
        return carrier, []
    resolved = outcome.get("resolved") or {}
    pending = [i for i in outcome.get("interrupts") or [] if i.get("id") not in resolved]
    return carrier, pending


def _expired(interrupt: dict[str, Any], now: datetime) -> bool:
    raw = interrupt.get("expiresAt")
    if not raw:
        return False
    try:
        when = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return False
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when <= now


def _plan_resume(run_input: RunAgentInput, history: Sequence[Message], plan: InboundPlan) -> None:
    carrier, pending = open_interrupts(history)
    entries: list[ResumeEntry] = list(run_input.resume or [])
    open_ids = [str(i.get("id")) for i in pending]
    if pending and not entries:
        raise InvalidInputError(
            f"Thread {run_input.thread_id!r} has open interrupts {open_ids!r}; answer each of "
            "them with a `resume` entry before starting another run.",
            message_id=open_ids[0],
        )
    answered_before: set[str] = set()
    for message in history:
        answered_before.update((message.run_outcome or {}).get("resolved") or {})
    now = datetime.now(UTC)
    by_id = {str(i.get("id")): i for i in pending}
    for entry in entries:
        interrupt = by_id.get(entry.interrupt_id)
        if interrupt is None:
            if entry.interrupt_id in answered_before:
                continue  # a resume is idempotent
            raise InvalidInputError(
                f"The resume entry for interrupt {entry.interrupt_id!r} answers no open "
                f"interrupt of thread {run_input.thread_id!r} (open: {open_ids!r}).",
                message_id=entry.interrupt_id,
            )
        if _expired(interrupt, now):
            raise InvalidInputError(
                f"Interrupt {entry.interrupt_id!r} expired at {interrupt.get('expiresAt')}; it "
                "can no longer be resumed, start a new run without it.",
                message_id=entry.interrupt_id,
            )
        plan.resolved[entry.interrupt_id] = entry.model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
    missing = [i for i in open_ids if i not in plan.resolved]
    if missing:
        raise InvalidInputError(
            f"The resume leaves interrupts {missing!r} of thread {run_input.thread_id!r} "
            "unanswered; a resume must answer every open interrupt.",
            message_id=missing[0],
        )
    if plan.resolved:
        plan.resume_carrier = carrier


SYSTEM_ROLES = frozenset({"system", "developer"})
"""The roles of the messages a client posts as instructions rather than as turns."""


def _branch_cut(run_input: RunAgentInput, history: Sequence[Message]) -> tuple[int, bool] | None:
    """Where a regenerate or an edit starts a new branch: ``(index into history, edited)``,
    or ``None`` when the posted messages are neither."""
    if run_input.resume:
        return None
    turns = [m for m in run_input.messages if m.role not in SYSTEM_ROLES]
    if not turns or not isinstance(turns[-1], UserMessage):
        return None
    last = turns[-1]
    index = next(
        (i for i, m in enumerate(history) if m.role == "user" and m.agui_id == last.id), None
    )
    if index is None:
        return None
    edited = flatten_content(last.content) != history[index].content
    if not edited and index == len(history) - 1:
        return None  # nothing answered it yet: the run answers it, no branch
    before = replayed_ids(history[:index])
    if any(m.id not in before for m in turns[:-1]):
        return None
    return (index, True) if edited else (index + 1, False)


def renamed_id(agui_id: str, message: Message) -> str:
    """The id an edited user record is renamed to when its edit takes over its id."""
    return f"{agui_id}~{message.message_uuid.hex[:8]}"


def plan_inbound(
    run_input: RunAgentInput, history: Sequence[Message], *, branches: bool = False
) -> InboundPlan:
    """Check the whole inbound list against ``history`` and return what to write.

    With ``branches`` (the repositories keep them), a regenerate or an edit plans a new
    branch (see the module docstring); without, both are refused.

    Raises:
        InvalidInputError: For the first message (or resume entry) the server refuses.
    """
    cut = _branch_cut(run_input, history)
    if cut is not None and not branches and not cut[1]:
        question = history[cut[0] - 1]
        raise InvalidInputError(
            f"Message {question.agui_id!r} (role user) is already answered, and this store "
            "keeps no branches, so it cannot be answered again (a regenerate): send the "
            "question again as a new message, or start a new thread.",
            message_id=question.agui_id,
            role="user",
        )
    if cut is not None and branches:
        at, edited = cut
        kept = list(history[:at])
        posted = list(run_input.messages)
        last = next(m for m in reversed(posted) if m.role not in SYSTEM_ROLES)
        if edited:
            posted.remove(last)
        plan = plan_inbound(run_input.model_copy(update={"messages": posted}), kept)
        plan.branch_at, plan.kept = history[at], at
        if edited:
            stored = history[at]
            plan.users.append(last)  # type: ignore[arg-type]
            plan.renamed = (stored, renamed_id(stored.agui_id or last.id, stored))
        return plan
    known = replayed_ids(history)
    users = {m.agui_id: m for m in history if m.agui_id and m.role == "user"}
    calls: dict[str, tuple[Message, ToolCall]] = {}
    for message in history:
        for call in message.tool_calls:
            calls.setdefault(tool_call_id(call), (message, call))
    plan = InboundPlan()
    seen: set[str] = set()
    answered: set[str] = set()
    for inbound in run_input.messages:
        role = inbound.role
        mid = inbound.id
        if isinstance(inbound, UserMessage):
            known_user = users.get(mid)
            if known_user is not None:
                if flatten_content(inbound.content) != known_user.content:
                    raise InvalidInputError(
                        f"Message {mid!r} (role user) differs from the stored message with "
                        "that id; stored history cannot be edited, send the change as a new "
                        "message or start a new thread.",
                        message_id=mid,
                        role=role,
                    )
                continue
            if mid in known or mid in seen:
                continue
            seen.add(mid)
            plan.users.append(inbound)
            continue
        if isinstance(inbound, ToolMessage):
            found = calls.get(inbound.tool_call_id)
            if found is not None and inbound.content == NO_RESULT_TEXT.format(
                status=found[1].status
            ):
                continue  # an echo of the "no result" placeholder the replay showed
            if found is not None and not found[1].answered and inbound.tool_call_id not in answered:
                message, call = found
                answered.add(inbound.tool_call_id)
                plan.answers.append(
                    ToolAnswer(
                        message=message,
                        call=call,
                        result_id=mid,
                        content=flatten_content(inbound.content),
                        content_parts=dump_parts(inbound.content),
                        error=inbound.error,
                        encrypted_value=inbound.encrypted_value,
                    )
                )
                continue
            if found is not None and mid in known:
                continue  # an echo of a stored result
            what = "an unknown tool call" if found is None else "a tool call that has a result"
            raise InvalidInputError(
                f"Message {mid!r} (role tool) answers {what} ({inbound.tool_call_id!r}); only "
                "a stored tool call still waiting for its result can be answered.",
                message_id=mid,
                role=role,
            )
        if mid in known:
            continue
        raise InvalidInputError(
            f"Message {mid!r} (role {role}) is not in the stored history; a client may only "
            "add user messages and results of pending tool calls.",
            message_id=mid,
            role=role,
        )
    _plan_resume(run_input, history, plan)
    return plan
