"""Compaction summaries on ``contrib.store``: what ``SummarizingCompaction`` writes in a run is
stored as a row of its own, the originals stay visible, and the next run starts from it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from pydantic_ai.messages import CompactionPart, UserPromptPart

from django_pydantic_agent.contrib.store.models import StoredMessage, StoredSummary
from tests.agui.conftest import logged_in, sse_events
from tests.contrib.store.urls_summaries import SENT, SUMMARISED

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls("tests.contrib.store.urls_summaries"),
]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    SENT.clear()
    SUMMARISED.clear()


async def _say(
    user: Any, thread: str, text: str, message_id: str | None = None, mount: str = "summarising"
) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    body = {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": [{"id": message_id or f"u-{run}", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    async with await logged_in(user) as http:
        response = await http.post(f"/{mount}/", json=body)
    assert response.status_code == 200
    events = sse_events(response.text)
    assert events[-1]["type"] == "RUN_FINISHED", events[-1]


async def _thread(user: Any, thread: str, mount: str = "summarising") -> dict[str, Any]:
    async with await logged_in(user) as http:
        response = await http.get(f"/{mount}/threads/{thread}/")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def _texts(messages: list[Any]) -> list[str]:
    out = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, CompactionPart):
                out.append(f"[summary] {part.content}")
            elif isinstance(part, UserPromptPart):
                out.append(str(part.content))
    return out


async def test_a_summary_is_stored_on_its_own_and_the_next_run_starts_from_it(alice: Any) -> None:
    for n in range(4):
        await _say(alice, "t", f"Turn {n}")
    # The fourth run was sent seven messages: the compaction summarised once.
    assert len(SUMMARISED) == 1
    assert "Turn 0" in SUMMARISED[0]
    assert "Turn 1" in SUMMARISED[0]

    # One summary row; every original message stays, and the user still sees all of them.
    assert await StoredSummary.objects.acount() == 1
    assert await StoredMessage.objects.acount() == 8
    thread = await _thread(alice, "t")
    assert [m["content"] for m in thread["messages"] if m["role"] == "user"] == [
        f"Turn {n}" for n in range(4)
    ]
    # The model's view: the summary stands for the first two turns, then Turn 2 onwards.
    view = thread["modelView"]
    first_two, rest = thread["messages"][:4], thread["messages"][4:]
    assert view["summary"]["through"] == first_two[-1]["id"]
    assert view["summary"]["text"] == "Summary #1 of the early turns."
    assert view["startsAt"] == rest[0]["id"]
    assert view["messages"] == 4

    # The next run is sent the stored summary and the messages after it, and summarises nothing.
    SENT.clear()
    await _say(alice, "t", "Turn 4")
    assert len(SUMMARISED) == 1
    assert _texts(SENT[0]) == [
        "[summary] Summary #1 of the early turns.",
        "Turn 2",
        "Turn 3",
        "Turn 4",
    ]

    # When the history passes the trigger again, the stored summary is updated, not redone:
    # the summariser is given the previous summary and only what came after it.
    await _say(alice, "t", "Turn 5")
    assert len(SUMMARISED) == 2
    assert "Summary #1 of the early turns." in SUMMARISED[1]
    assert "Turn 0" not in SUMMARISED[1]
    thread = await _thread(alice, "t")
    assert len(thread["messages"]) == 12
    assert thread["modelView"]["summary"]["text"] == "Summary #2 of the early turns."


async def test_a_thread_that_never_compacted_names_no_summary(alice: Any) -> None:
    await _say(alice, "short", "Hello")
    view = (await _thread(alice, "short"))["modelView"]
    assert view == {"startsAt": None, "messages": 2, "summary": None}
    assert await StoredSummary.objects.acount() == 0


async def test_another_users_summary_never_reaches_the_model(alice: Any, bob: Any) -> None:
    for n in range(4):
        await _say(alice, "same", f"Alice's secret {n}")
    assert len(SUMMARISED) == 1
    SENT.clear()
    await _say(bob, "same", "Bob's question")
    # Bob's thread of the same name starts without Alice's summary, or any of her words.
    assert _texts(SENT[0]) == ["Bob's question"]
    assert (await _thread(bob, "same"))["modelView"]["summary"] is None


async def test_deleting_the_thread_deletes_its_summary(alice: Any) -> None:
    for n in range(4):
        await _say(alice, "gone", f"Turn {n}")
    assert await StoredSummary.objects.acount() == 1
    async with await logged_in(alice) as http:
        assert (await http.delete("/summarising/threads/gone/")).status_code == 204
    assert await StoredSummary.objects.acount() == 0


async def test_an_edit_before_the_summary_end_drops_it_from_the_models_view(alice: Any) -> None:
    for n in range(4):
        await _say(alice, "edit", f"Turn {n}", message_id=f"m{n}")
    assert len(SUMMARISED) == 1
    # Re-posting the first message with new text starts a branch before what it stands for.
    SENT.clear()
    await _say(alice, "edit", "Turn 0, edited", message_id="m0")
    assert _texts(SENT[0]) == ["Turn 0, edited"]
    assert (await _thread(alice, "edit"))["modelView"]["summary"] is None


async def test_a_tiered_compactions_summary_is_stored_and_replayed(alice: Any) -> None:
    words = "word " * 80  # about 100 tokens a question: the third turn passes 250
    for n in range(3):
        await _say(alice, "tiered", f"Turn {n} {words}", mount="tiered")
    assert len(SUMMARISED) == 1
    assert await StoredSummary.objects.acount() == 1
    view = (await _thread(alice, "tiered", mount="tiered"))["modelView"]
    assert view["summary"]["text"] == "Summary #1 of the early turns."
    SENT.clear()
    await _say(alice, "tiered", "Short one", mount="tiered")
    assert _texts(SENT[0])[0] == "[summary] Summary #1 of the early turns."
    assert not any("Turn 0" in text for text in _texts(SENT[0]))


async def test_user_turns_the_compaction_keeps_do_not_move_the_summarys_end(alice: Any) -> None:
    """Regression: from harness 0.75 on, ``keep_user_messages`` marks its copies of user turns
    on their text only, and they were counted as kept turns, so the stored summary stood for
    two turns too few and every later run summarised again."""
    for n in range(4):
        await _say(alice, "kept-turns", f"Turn {n}", mount="keeping")
    assert len(SUMMARISED) == 1
    thread = await _thread(alice, "kept-turns", mount="keeping")
    ids = [m["id"] for m in thread["messages"]]
    # The copies stand for turns the summary covers too: it ends before the one turn kept whole.
    assert thread["modelView"]["summary"]["through"] == ids[5]
    assert thread["modelView"]["startsAt"] == ids[6]
    SENT.clear()
    await _say(alice, "kept-turns", "Turn 4", mount="keeping")
    assert len(SUMMARISED) == 1
    assert _texts(SENT[0]) == ["[summary] Summary #1 of the early turns.", "Turn 3", "Turn 4"]


async def test_a_fork_keeps_the_summary_of_what_it_copies(alice: Any) -> None:
    for n in range(4):
        await _say(alice, "source", f"Turn {n}")
    source = await _thread(alice, "source")
    through = source["modelView"]["summary"]["through"]
    ids = [m["id"] for m in source["messages"]]
    async with await logged_in(alice) as http:
        late = await http.post("/summarising/threads/source/fork/", json={"messageId": ids[-1]})
        early = await http.post(
            "/summarising/threads/source/fork/", json={"messageId": ids[ids.index(through) - 1]}
        )
    assert late.status_code == early.status_code == 201
    # A fork past the summary's end stands on it, as the source does; the next run is sent it.
    fork = await _thread(alice, late.json()["threadId"])
    assert fork["modelView"]["summary"]["text"] == source["modelView"]["summary"]["text"]
    assert fork["modelView"]["summary"]["through"] == through
    assert fork["modelView"]["startsAt"] == source["modelView"]["startsAt"]
    SENT.clear()
    await _say(alice, late.json()["threadId"], "Turn 4 of the fork")
    assert _texts(SENT[0])[0] == "[summary] Summary #1 of the early turns."
    # A fork that stops before the summary's end copies no summary: it stands for more.
    assert (await _thread(alice, early.json()["threadId"]))["modelView"]["summary"] is None
    assert await StoredSummary.objects.acount() == 2


async def test_export_and_import_keep_the_summary_and_what_it_stands_for(alice: Any) -> None:
    for n in range(4):
        await _say(alice, "kept", f"Turn {n}")
    source = await _thread(alice, "kept")
    async with await logged_in(alice) as http:
        exported = (await http.get("/summarising/threads/kept/export/?format=json")).json()
        [summary] = exported["summaries"]
        through = exported["messages"][summary["through"]]
        assert through["wire"][-1]["id"] == source["modelView"]["summary"]["through"]
        assert summary["text"] == "Summary #1 of the early turns."
        imported = await http.post("/summarising/threads/import/", json=exported)
        assert imported.status_code == 201, imported.text
        # A summary naming no message of the file, or with no text: 400, nothing written.
        for bad, problem in (
            ({**summary, "through": len(exported["messages"])}, "summaries.0 needs through"),
            ({**summary, "text": ""}, "summaries.0 needs a text"),
        ):
            refused = await http.post(
                "/summarising/threads/import/", json={**exported, "summaries": [bad]}
            )
            assert refused.status_code == 400
            assert problem in refused.json()["error"]
    copy = (await _thread(alice, imported.json()["threadId"]))["modelView"]
    view = source["modelView"]
    assert copy["summary"].pop("id") != view["summary"].pop("id")  # a row of its own
    assert copy == view
    assert await StoredSummary.objects.acount() == 2
    # The imported thread's next run starts from the imported summary.
    SENT.clear()
    await _say(alice, imported.json()["threadId"], "Turn 4")
    assert _texts(SENT[0])[0] == "[summary] Summary #1 of the early turns."
