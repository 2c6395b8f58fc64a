"""``chat_history.summaries``: finding the summary a run's compaction wrote, and the last stored
message it stands for."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

from django_pydantic_agent.chat_history import Message
from django_pydantic_agent.chat_history.summaries import (
    StoredSummary,
    WrittenSummary,
    summary_request,
    summary_through,
    written_summary,
)

WRITTEN_AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _thread(turns: int) -> list[Message]:
    out = []
    for n in range(turns):
        out.append(Message(role="user", content=f"q{n}", agui_id=f"u{n}"))
        out.append(Message(role="assistant", content=f"a{n}", agui_id=f"a{n}"))
    return out


def _stored(text: str, through: Message) -> StoredSummary:
    return StoredSummary(
        summary_id=uuid.uuid4(),
        text=text,
        through_uuid=through.message_uuid,
        through_id=through.agui_id or "",
        created_at=WRITTEN_AT,
    )


def _ask(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(content=text)])


def _say(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content=text)])


def test_a_compacted_run_names_its_summary_and_the_turns_it_kept() -> None:
    summary = _stored("S", _thread(1)[0])
    compacted = [_ask("q0"), summary_request(summary), _say("a2"), _ask("q3"), _say("a3")]
    written = written_summary(compacted, None)
    assert written == WrittenSummary(text="S", created_at=WRITTEN_AT, kept_turns=1, mid_turn=True)
    # The summary the run started from is not one it wrote.
    assert written_summary(compacted, summary) is None
    assert written_summary([_ask("q0"), _say("a0")], None) is None


def test_a_summary_stands_for_the_messages_before_the_turns_kept() -> None:
    thread = [*_thread(4), Message(role="user", content="q4", agui_id="u4")]
    at = datetime.now(UTC)
    # Kept: the last two questions, starting on a question: the summary ends before q3.
    kept_two = WrittenSummary(text="S", created_at=at, kept_turns=2, mid_turn=False)
    assert summary_through(thread, kept_two, None) == thread[5].message_uuid
    # Kept part begins with an answer: its question stays out of the summary's range.
    mid = WrittenSummary(text="S", created_at=at, kept_turns=1, mid_turn=True)
    assert summary_through(thread, mid, None) == thread[5].message_uuid
    # Nothing kept: the summary stands for the whole replay.
    none_kept = WrittenSummary(text="S", created_at=at, kept_turns=0, mid_turn=False)
    assert summary_through(thread, none_kept, None) == thread[-1].message_uuid
    # Every turn kept: it stands for none of the replay, only for what the older one did.
    every = WrittenSummary(text="S", created_at=at, kept_turns=9, mid_turn=False)
    assert summary_through(thread, every, None) is None
    older = _stored("old", thread[0])
    assert summary_through(thread, every, older) == older.through_uuid
