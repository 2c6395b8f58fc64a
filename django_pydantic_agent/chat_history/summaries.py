"""Stored compaction summaries: what ``SummarizingCompaction`` wrote, kept as a row of its own.

When a compaction capability of the served agent (pydantic-ai-harness's
``SummarizingCompaction``, or ``TieredCompaction`` with a summarizing tier) summarises inside a
run, the summary is a ``CompactionPart`` marked as the harness's own in the run's messages.
``written_summary`` finds it, ``summary_through`` says which stored message is the last one it
stands for, and a repository that declares ``SummaryStore`` keeps it beside the messages (which
stay, and which the user still sees). The next run starts from the stored summary
(``summary_request``) followed by the messages after it, so it does not summarise them again.

Nothing here imports the harness: a summary is recognised by the harness's metadata marker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol, runtime_checkable
from uuid import UUID

from django_pydantic_agent.chat_history.records import Message, Role

__all__ = [
    "SUMMARY_METADATA_KEY",
    "SUMMARY_TIME_METADATA_KEY",
    "ReplaysSummaries",
    "StoredSummary",
    "SummaryStore",
    "WrittenSummary",
    "summary_request",
    "summary_through",
    "written_summary",
]

SUMMARY_METADATA_KEY: Final = "pydantic-ai-harness.compaction.summary.v1"
"""The harness's ``CompactionPart.metadata`` marker of a summary ``SummarizingCompaction`` wrote."""

SUMMARY_TIME_METADATA_KEY: Final = "pydantic-ai-harness.compaction.summary.created_at"
"""The harness's ``CompactionPart.metadata`` key of when the summary was written (ISO 8601)."""

_KEPT_USER_MARKER: Final = "pydantic-ai-harness.compaction.kept-user-message.v1"


@dataclass(frozen=True, kw_only=True)
class StoredSummary:
    """A summary a compaction wrote, as a store keeps it.

    ``through_uuid`` / ``through_id`` name the last stored message it stands for (its
    ``message_uuid`` and AG-UI id): it stands for every message of the thread up to that one.
    """

    summary_id: UUID
    text: str
    through_uuid: UUID
    through_id: str
    created_at: datetime
    run_id: str = ""

    def as_json(self) -> dict[str, Any]:
        """The summary as the thread JSON's ``modelView.summary`` shows it (camelCase)."""
        return {
            "id": str(self.summary_id),
            "through": self.through_id,
            "createdAt": self.created_at.isoformat(),
            "text": self.text,
        }


@runtime_checkable
class SummaryStore(Protocol):
    """A message repository that keeps compaction summaries beside a chat's messages."""

    async def get_latest_summary(self, chat_uuid: UUID) -> StoredSummary | None:
        """The newest summary of the chat, or ``None`` (one indexed query)."""
        ...

    async def add_summary(
        self, chat_uuid: UUID, *, text: str, through_uuid: UUID, created_at: datetime, run_id: str
    ) -> StoredSummary | None:
        """Store a summary standing for the chat's messages up to ``through_uuid``; ``None``
        when the chat or that message is gone."""
        ...


@runtime_checkable
class ReplaysSummaries(Protocol):
    """An inner agent that sends its model a stored summary ahead of the replayed history
    (``replayed_summary``, set before the run) and says which one a compaction wrote during
    the run (``written_summary``, once it completed)."""

    replayed_summary: StoredSummary | None
    written_summary: WrittenSummary | None


@dataclass(frozen=True, kw_only=True)
class WrittenSummary:
    """A summary a run's compaction wrote, and where the messages it kept begin.

    ``kept_turns``: how many user turns of the replayed history the compaction kept after the
    summary (the newest ones); ``mid_turn``: whether what it kept begins with a reply, whose
    question the summary stands for.
    """

    text: str
    created_at: datetime
    kept_turns: int
    mid_turn: bool


def _is_summary_part(part: Any, compaction_part: type[Any]) -> bool:
    metadata = getattr(part, "metadata", None)
    return (
        isinstance(part, compaction_part)
        and isinstance(metadata, dict)
        and metadata.get(SUMMARY_METADATA_KEY) is True
        and part.provider_name is None
        and bool(part.content)
    )


def _is_kept_marker(metadata: Any) -> bool:
    return metadata == _KEPT_USER_MARKER or (
        isinstance(metadata, dict) and metadata.get(_KEPT_USER_MARKER) is True
    )


def _is_kept_copy(message: Any) -> bool:
    """Whether ``message`` is a user turn ``keep_user_messages`` copied after the summary, as
    harness 0.62 marks it; 0.75 marks only the copy's text items (``_is_kept_part``)."""
    return _is_kept_marker(getattr(message, "metadata", None))


def _is_kept_part(part: Any) -> bool:
    content = getattr(part, "content", None)
    return isinstance(content, list) and any(
        _is_kept_marker(getattr(item, "metadata", None)) for item in content
    )


def summary_request(summary: StoredSummary) -> Any:
    """The pydantic-ai request replaying ``summary``: the marked ``CompactionPart`` the harness
    wrote, so a later compaction updates it in place (``incremental``) rather than summarising
    what it stands for again."""
    from pydantic_ai.messages import CompactionPart, ModelRequest

    created = summary.created_at.isoformat()
    metadata = {SUMMARY_METADATA_KEY: True, SUMMARY_TIME_METADATA_KEY: created}
    return ModelRequest(
        parts=[CompactionPart(content=summary.text, metadata=metadata)],
        timestamp=summary.created_at,
    )


def written_summary(
    messages: Sequence[Any], replayed: StoredSummary | None
) -> WrittenSummary | None:
    """The summary a run wrote, found in its messages (``result.all_messages()``), or ``None``
    when it wrote none (``replayed``, the summary the run started from, is not a new one)."""
    from pydantic_ai.messages import CompactionPart, ModelRequest, ModelResponse, UserPromptPart

    found: tuple[int, Any] | None = None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, ModelRequest):
            continue
        parts = [p for p in message.parts if _is_summary_part(p, CompactionPart)]
        if parts:
            found = (index, parts[-1])
            break
    if found is None:
        return None
    index, part = found
    stamp = part.metadata.get(SUMMARY_TIME_METADATA_KEY)
    try:
        created = datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
    except ValueError:
        created = None
    same = replayed is not None and part.content == replayed.text
    if same and (created is None or replayed is None or created == replayed.created_at):
        return None
    kept = 0
    mid_turn: bool | None = None
    for message in messages[index + 1 :]:
        if isinstance(message, ModelResponse):
            mid_turn = True if mid_turn is None else mid_turn
            continue
        if not isinstance(message, ModelRequest) or _is_kept_copy(message):
            continue
        users = sum(isinstance(p, UserPromptPart) and not _is_kept_part(p) for p in message.parts)
        if users:
            mid_turn = False if mid_turn is None else mid_turn
            kept += users
    return WrittenSummary(
        text=part.content,
        created_at=created or datetime.now(UTC),
        kept_turns=kept,
        mid_turn=bool(mid_turn),
    )


def summary_through(
    history: Sequence[Message], written: WrittenSummary, replayed: StoredSummary | None
) -> UUID | None:
    """The ``message_uuid`` of the last record of ``history`` (the replayed records) that
    ``written`` stands for, or ``None`` when it stands for none of them.

    The compaction kept the newest ``kept_turns`` user turns; a kept part that begins with a
    reply keeps its question too (the summary then repeats a little, and never leaves a
    message out of both it and the model's view).
    """
    users = [index for index, m in enumerate(history) if m.role == Role.USER.value]
    turns = written.kept_turns + (1 if written.mid_turn else 0)
    if turns == 0:
        first_kept = len(history)
    elif turns > len(users):
        first_kept = users[0] if users else len(history)
    else:
        first_kept = users[-turns]
    if first_kept == 0:
        return None if replayed is None else replayed.through_uuid
    return history[first_kept - 1].message_uuid
