"""What the model sees of a stored thread: ``HistoryWindow`` and the run path's bounded read.

A window is the newest messages of a thread that fit a token budget (and a message cap),
starting on a user turn. It cuts between records, and a record holds an assistant message
with its tool calls and their results, so a tool call is never separated from its result.
Tokens are estimated with ``pydantic_ai_harness.compaction.estimate_message_tokens`` when the
``harness`` extra is installed, else as about four characters per token.

``read_window`` is the one function the run path calls to read history: a repository that
declares ``RecentMessageReads`` is asked for the newest ``max_messages`` records only (one
bounded query), any other is read whole and cut in memory.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable
from uuid import UUID

from ag_ui.core import RunAgentInput, ToolMessage, UserMessage

from django_pydantic_agent.chat_history._inbound import SYSTEM_ROLES
from django_pydantic_agent.chat_history.agui_messages import tool_call_id
from django_pydantic_agent.chat_history.protocols import implements
from django_pydantic_agent.chat_history.records import Message, Role
from django_pydantic_agent.chat_history.summaries import (
    StoredSummary,
    SummaryStore,
    summary_request,
)
from django_pydantic_agent.chat_history.translate import replayed_ids

__all__ = [
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_MAX_TOKENS",
    "HistoryWindow",
    "ReadHistory",
    "RecentMessageReads",
    "checked_history",
    "estimate_record_tokens",
    "estimate_summary_tokens",
    "read_window",
    "record_model_messages",
]

DEFAULT_MAX_TOKENS: Final = 24_000
"""The default budget: the history leaves room for instructions, tools and the answer in a
32k-token context window."""

DEFAULT_MAX_MESSAGES: Final = 100
"""The default cap on the records a run reads, whatever their size (a run's read is bounded
by it, so its cost does not grow with the thread)."""

_CHARS_PER_TOKEN: Final = 4
_ECHO_LOOKUPS: Final = 8
# A record replays as one message and one more per tool call and reasoning step: a run takes
# this many posted messages for each message its window reads.
_POSTED_PER_MESSAGE: Final = 4


@runtime_checkable
class RecentMessageReads(Protocol):
    """A message repository that can read the newest records of a chat in one bounded query."""

    async def get_recent_messages(self, chat_uuid: UUID, limit: int) -> Sequence[Message]:
        """Return the newest ``limit`` messages of the chat, oldest first (``[]`` if unknown)."""
        ...


def _texts(message: Message) -> list[str]:
    texts = [message.content]
    for call in message.tool_calls:
        texts += [call.name, call.arguments, call.content]
    for step in message.reasonings:
        texts.append(step.content)
    if message.activity_content:
        texts.append(json.dumps(message.activity_content))
    return [text for text in texts if text]


def _fallback_tokens(message: Message) -> int:
    return max(1, sum(len(text) for text in _texts(message)) // _CHARS_PER_TOKEN)


def record_model_messages(message: Message) -> list[Any]:
    """The pydantic-ai messages a record stands for, as far as its text goes (its token
    count, a search of it): a request, or a response and the results of its tool calls."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    if message.role != Role.ASSISTANT.value:
        return [ModelRequest(parts=[UserPromptPart(content="\n".join(_texts(message)))])]
    parts: list[Any] = [ThinkingPart(content=step.content) for step in message.reasonings]
    if message.content:
        parts.append(TextPart(content=message.content))
    returns: list[Any] = []
    for call in message.tool_calls:
        call_id = tool_call_id(call)
        parts.append(ToolCallPart(tool_name=call.name, args=call.arguments, tool_call_id=call_id))
        if call.has_result:
            returns.append(
                ToolReturnPart(tool_name=call.name, content=call.content, tool_call_id=call_id)
            )
    out: list[Any] = [ModelResponse(parts=parts or [TextPart(content="")])]
    if returns:
        out.append(ModelRequest(parts=returns))
    return out


def estimate_record_tokens(messages: Sequence[Message]) -> list[int]:
    """Estimated tokens of each record as the model is sent it.

    With the ``harness`` extra, ``estimate_message_tokens`` over the pydantic-ai messages each
    record stands for; without it, about four characters per token.
    """
    try:
        from pydantic_ai_harness.compaction import estimate_message_tokens
    except ImportError:
        return [_fallback_tokens(message) for message in messages]
    model: list[Any] = []
    owners: list[int] = []
    for index, message in enumerate(messages):
        converted = record_model_messages(message)
        model += converted
        owners += [index] * len(converted)
    counts = [0] * len(messages)
    for owner, tokens in zip(owners, estimate_message_tokens(model), strict=True):
        counts[owner] += tokens
    return [max(1, count) for count in counts]


@dataclass(frozen=True, kw_only=True)
class HistoryWindow:
    """The part of a stored thread the model is sent: the newest messages that fit.

    Args:
        max_tokens: The token budget of the history (``None``: no budget). The newest message
            is kept even when it alone is over it.
        max_messages: At most this many stored messages are read and sent (``None``: the
            whole thread is read, and a run's cost grows with it).
        estimate: Tokens of each record (default ``estimate_record_tokens``).

    Raises:
        ValueError: When a bound is below 1.
    """

    max_tokens: int | None = DEFAULT_MAX_TOKENS
    max_messages: int | None = DEFAULT_MAX_MESSAGES
    estimate: Callable[[Sequence[Message]], list[int]] = estimate_record_tokens

    def __post_init__(self) -> None:
        for name in ("max_tokens", "max_messages"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(
                    f"HistoryWindow({name}={value!r}) must be a positive int, or None for no bound."
                )

    @classmethod
    def whole(cls) -> HistoryWindow:
        """A window that sends the whole thread (the behaviour before windows existed)."""
        return cls(max_tokens=None, max_messages=None)

    @property
    def max_posted(self) -> int | None:
        """The newest posted messages a run with this window reads: four for each message it
        reads (400 by default), or ``None`` (all of them) when ``max_messages`` is ``None``.

        What a client posts before them is older than anything the run reads (a client that
        posts its transcript back posts one message for each stored message and tool result),
        and is dropped unread (``checked_history``).
        """
        return None if self.max_messages is None else _POSTED_PER_MESSAGE * self.max_messages

    def select(self, messages: Sequence[Message], *, reserved: int = 0) -> list[Message]:
        """The newest of ``messages`` (oldest first) that fit, starting on a user turn.

        ``reserved`` tokens of the budget are already spent (on a stored summary sent ahead
        of the messages). A cut that would begin on an assistant or tool record moves forward
        to the next user message (when there is one), so the model never sees an answer
        without its question.
        """
        # A read of ``max_messages`` records may have left older ones behind: align it too.
        cut = self.max_messages is not None and len(messages) >= self.max_messages
        if self.max_messages is not None and len(messages) > self.max_messages:
            messages = messages[-self.max_messages :]
        start = 0
        if self.max_tokens is not None and messages:
            counts = self.estimate(messages)
            total = 0
            start = len(messages)
            for index in range(len(messages) - 1, -1, -1):
                total += counts[index]
                if total + reserved > self.max_tokens and start < len(messages):
                    break
                start = index
        if start == 0 and not cut:
            return list(messages)
        return self._on_a_turn(messages, start)

    @staticmethod
    def _on_a_turn(messages: Sequence[Message], start: int) -> list[Message]:
        for index in range(start, len(messages)):
            if messages[index].role == Role.USER.value:
                return list(messages[index:])
        return list(messages[start:])


@dataclass(frozen=True, kw_only=True)
class ReadHistory:
    """What a run read of a thread: the stored messages, and the window the model is sent."""

    read: list[Message]
    """The messages read, oldest first (the newest ``max_messages``, or the whole thread)."""
    window: list[Message]
    """The newest of ``read`` that fit the window: what the model is sent."""
    whole: bool
    """Whether ``read`` is the whole thread."""
    summary: StoredSummary | None = None
    """The stored compaction summary the model is sent ahead of ``window`` (which then holds
    only messages after the last one it stands for), or ``None``."""
    max_posted: int | None = None
    """The newest posted messages a run on this read checks (``HistoryWindow.max_posted``);
    ``None``: all of them."""


async def read_window(repo: Any, chat_uuid: UUID, window: HistoryWindow) -> ReadHistory:
    """Read what ``window`` needs of a chat and cut it to the window.

    One bounded read (``get_recent_messages``) on a repository that declares
    ``RecentMessageReads`` and a window with ``max_messages``; the whole chat otherwise.
    """
    if window.max_messages is not None and implements(repo, RecentMessageReads):
        stored = list(await repo.get_recent_messages(chat_uuid, window.max_messages))
        whole = len(stored) < window.max_messages
    else:
        stored = list(await repo.get_chat_messages(chat_uuid))
        whole = True
    summary = await _summary(repo, chat_uuid, stored, whole)
    posted = window.max_posted
    if summary is None:
        return ReadHistory(
            read=stored, window=window.select(stored), whole=whole, max_posted=posted
        )
    after = stored
    for index, message in enumerate(stored):
        if message.message_uuid == summary.through_uuid:
            after = stored[index + 1 :]
            break
    reserved = estimate_summary_tokens(summary)
    return ReadHistory(
        read=stored,
        window=window.select(after, reserved=reserved),
        whole=whole,
        summary=summary,
        max_posted=posted,
    )


def estimate_summary_tokens(summary: StoredSummary) -> int:
    """Estimated tokens of ``summary`` as the model is sent it (``summary_request``): a
    window spends them before it counts the messages after the summary."""
    try:
        from pydantic_ai_harness.compaction import estimate_message_tokens
    except ImportError:
        return max(1, len(summary.text) // _CHARS_PER_TOKEN)
    return max(1, sum(estimate_message_tokens([summary_request(summary)])))


async def _summary(
    repo: Any, chat_uuid: UUID, stored: Sequence[Message], whole: bool
) -> StoredSummary | None:
    """The chat's newest stored summary, when it stands for messages of the active branch
    (an edit before its end started another branch: it then stands for none of them)."""
    lookups: Any = repo
    if not implements(repo, SummaryStore):
        return None
    summary = await repo.get_latest_summary(chat_uuid)
    if summary is None or any(m.message_uuid == summary.through_uuid for m in stored):
        return summary
    if whole:
        return None
    twin = await lookups.get_message_by_agui_id(chat_uuid, summary.through_id)
    return summary if twin is not None and twin.message_uuid == summary.through_uuid else None


async def checked_history(
    repo: Any, chat_uuid: UUID, run_input: RunAgentInput, loaded: ReadHistory
) -> tuple[list[Message], RunAgentInput]:
    """The stored messages ``run_input`` is checked against (server-authoritative history),
    and the input to check against them.

    Only the newest ``loaded.max_posted`` posted messages are checked; the older ones are
    dropped unread (the run endpoint does not even build them, ``agui.input.accept_run``).
    What was read, when it is the whole thread or the input names nothing older:

    - A client that posts its transcript back (every AG-UI client does) is checked from the
      first message it posts that was read. What it posts before that is older than the read
      and is dropped unread: the server sends the model its own history, never a client's
      copy, so an older message the client changed or made up reaches neither the model nor
      the store (system and developer messages are kept, and checked as before).
    - A posted user message the read does not hold is looked up by its id (at most
      ``_ECHO_LOOKUPS`` of them, one indexed query each): an echo of an older message is
      known, a new one is not.
    - Any other unknown message, or more of them, reads the whole thread, and the whole input
      is checked against it.
    """
    run_input = _newest_posted(run_input, loaded.max_posted)
    if loaded.whole:
        return loaded.read, run_input
    # Every id the replay of the read shows (0.2 ms for 100 records): gathered once, and only
    # when a posted message needs it.
    known = functools.cache(functools.partial(replayed_ids, loaded.read))
    posted = _from_the_read(run_input, known)
    history = await _with_echoes(repo, chat_uuid, posted, loaded.read, known)
    if history is None:
        return list(await repo.get_chat_messages(chat_uuid)), run_input
    return history, posted


def _newest_posted(run_input: RunAgentInput, most: int | None) -> RunAgentInput:
    """``run_input`` with only its newest ``most`` messages (all when ``most`` is ``None``)."""
    if most is None or len(run_input.messages) <= most:
        return run_input
    return run_input.model_copy(update={"messages": run_input.messages[-most:]})


def _from_the_read(run_input: RunAgentInput, known: Callable[[], set[str]]) -> RunAgentInput:
    """``run_input`` from the first message it posts that the read holds (``known()``, its
    ids), its system and developer messages before that kept; as it is when it posts none of
    them, or a single message (nothing comes before it)."""
    messages = run_input.messages
    if len(messages) < 2:
        return run_input
    ids = known()
    at = next((i for i, m in enumerate(messages) if m.id in ids), 0)
    if at == 0:
        return run_input
    kept = [m for m in messages[:at] if m.role in SYSTEM_ROLES]
    return run_input.model_copy(update={"messages": [*kept, *messages[at:]]})


async def _with_echoes(
    repo: Any,
    chat_uuid: UUID,
    posted: RunAgentInput,
    read: list[Message],
    known: Callable[[], set[str]],
) -> list[Message] | None:
    """``read``, after the older user messages ``posted`` echoes (looked up by id), or
    ``None`` when only the whole thread can check it."""
    stored_users = {m.agui_id for m in read if m.role == Role.USER.value}
    calls = {tool_call_id(call) for m in read for call in m.tool_calls}
    users: list[str] = []
    for inbound in posted.messages:
        if isinstance(inbound, UserMessage):
            if inbound.id not in stored_users:
                users.append(inbound.id)  # new, or older than what was read: looked up
            continue
        if isinstance(inbound, ToolMessage) and inbound.tool_call_id in calls:
            continue
        if inbound.id not in known():
            return None
    if len(users) > _ECHO_LOOKUPS:
        return None
    twins: list[Message] = []
    for agui_id in users:
        twin = await repo.get_message_by_agui_id(chat_uuid, agui_id)
        if twin is not None:
            twins.append(twin)
    # Older than what was read: before it, so the newest run outcome stays last.
    return twins + read
