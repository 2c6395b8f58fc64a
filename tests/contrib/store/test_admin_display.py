"""The conversation page shows each message of a thread a run wrote, readably and escaped."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from html import unescape

import pytest
from django.test import Client
from django.utils import timezone

from django_pydantic_agent.contrib.store.admin.display import (
    TokenTotals,
    run_duration,
    token_totals,
)
from django_pydantic_agent.contrib.store.models import (
    StoredAgentRun,
    StoredConversation,
    StoredMessage,
)
from tests.contrib.store.admin_threads import Call, Turn, write_thread

pytestmark = pytest.mark.django_db
PREFIX = "/admin/django_pydantic_agent_store"


def _page(client: Client, conv: StoredConversation) -> str:
    response = client.get(f"{PREFIX}/storedconversation/{conv.pk}/change/")
    assert response.status_code == 200
    return response.content.decode()


def _text(html: str) -> str:
    """The page's text without tags or runs of whitespace (what a reader sees)."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


@pytest.fixture
def weather() -> StoredConversation:
    return write_thread(
        [
            Turn(role="user", content="What is the weather in Paris?", agui_id="u1"),
            Turn(
                role="assistant",
                content="It is sunny in Paris, 21 degrees.",
                agui_id="a1",
                reasoning=["The user wants the weather; call the tool."],
                calls=[
                    Call(
                        name="get_weather",
                        arguments='{"city": "Paris", "unit": "C"}',
                        result="sunny, 21",
                    )
                ],
            ),
        ],
        title="Weather",
    )


def test_a_run_written_thread_reads_as_a_conversation(
    admin_client: Client, weather: StoredConversation
) -> None:
    page = _page(admin_client, weather)
    text = _text(page)

    assert "Wire JSON" not in page
    assert "user u1 What is the weather in Paris?" in text
    assert "assistant a1" in text
    assert "It is sunny in Paris, 21 degrees." in text
    # the tool call: name, id, status, indented arguments and the result
    assert "tool call get_weather call-1 · complete" in text
    assert '{\n  "city": "Paris",\n  "unit": "C"\n}' in unescape(page)
    assert "result: sunny, 21" in text
    # reasoning is collapsed
    assert re.search(
        r"<details class=\"dpa-reasoning\">\s*<summary>reasoning \(complete\)</summary>\s*"
        r"<pre[^>]*>The user wants the weather; call the tool.</pre>",
        page,
    )
    # status, run (linked to its run records) and time columns
    assert page.count('<td class="field-message_status"><div>complete</div></td>') == 2
    run_link = (
        f'<a href="{PREFIX}/storedagentrun/?owner_id=42&amp;thread_id=thread-1&amp;run_id=run-1">'
        "run-1</a>"
    )
    assert page.count(run_link) == 2
    assert str(timezone.now().year) in _text(page.split('class="field-time"')[1][:200])


def test_unanswered_tool_calls_errors_and_attachments_are_shown(admin_client: Client) -> None:
    conv = write_thread(
        [
            Turn(
                role="user",
                content="Read this",
                extra={"wire_extra": {"attachments": [{"id": "att-1", "name": "notes.txt"}]}},
            ),
            Turn(
                role="assistant",
                status="errored",
                error="The model provider timed out.",
                calls=[Call(name="search", arguments="not json {")],
            ),
        ]
    )

    text = _text(_page(admin_client, conv))

    assert "attachments: notes.txt" in text
    assert "arguments: not json {" in text
    assert "result: no result yet" in text
    assert "The model provider timed out." in text
    assert "errored" in text


XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def test_stored_markup_is_escaped_everywhere(admin_client: Client) -> None:
    conv = write_thread(
        [
            Turn(
                role="user",
                content=XSS,
                agui_id=f"id{XSS}",
                name=f"name{XSS}",
                extra={"wire_extra": {"attachments": [{"name": f"file{XSS}"}]}},
            ),
            Turn(
                role="assistant",
                content=f"answer{XSS}",
                error=f"error{XSS}",
                reasoning=[f"thinking{XSS}"],
                calls=[
                    Call(
                        name=f"tool{XSS}",
                        arguments='{"q": "' + XSS.replace('"', '\\"') + '"}',
                        result=f"result{XSS}",
                        tool_call_id=f"call{XSS}",
                    )
                ],
            ),
        ],
        title=f"title{XSS}",
    )

    page = _page(admin_client, conv)

    assert "<script>alert" not in page
    assert "<img src=x" not in page
    assert "onerror=alert(1)>" not in page
    escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;"
    for prefix in ("", "id", "name", "file", "answer", "error", "thinking", "tool", "result"):
        assert f"{prefix}{escaped}" in page, prefix
    assert "&lt;script&gt;alert(\\&quot;x\\&quot;)&lt;/script&gt;" in page  # in the arguments


def test_odd_json_in_the_record_columns_is_not_a_500(admin_client: Client) -> None:
    conv = write_thread([Turn(role="user", content="fine")])
    StoredMessage.objects.filter(conversation=conv).update(
        record=["not", "a", "mapping"], tool_calls={"name": "x"}, reasonings="text"
    )
    StoredMessage.objects.create(
        conversation=conv,
        position=1,
        message_uuid=uuid.uuid4(),
        role="assistant",
        content="odd",
        record={"timestamp": "yesterday", "content_parts": [{"type": "image", "mimeType": 3}]},
        tool_calls=[1, None, {"name": 7, "arguments": {"a": 1}, "content": None}],
        reasonings=[{"content": ["a", "list"]}],
    )

    text = _text(_page(admin_client, conv))

    assert "fine" in text
    assert "yesterday" in text  # an unparsable time is shown as stored
    assert "content parts: image (3)" in text
    assert "tool call 7" in text
    assert '"a": 1' in text
    assert '["a", "list"]' in text


def test_huge_texts_are_cut(admin_client: Client) -> None:
    conv = write_thread(
        [
            Turn(
                role="assistant",
                content="x" * 100_000,
                calls=[Call(name="t", arguments="y" * 50_000)],
            )
        ]
    )

    page = _page(admin_client, conv)

    assert "x" * 100_000 not in page
    assert "(100,000 characters in all)" in page
    assert "(50,000 characters in all)" in page


def test_the_page_lists_the_threads_runs_and_their_token_totals(
    admin_client: Client, weather: StoredConversation
) -> None:
    start = timezone.now() - timedelta(minutes=5)
    usage = {
        "tokens": [{"model": "m", "input_tokens": 100, "output_tokens": 20, "total_tokens": 120}]
    }
    first = StoredAgentRun.objects.create(
        owner_id="42",
        thread_id="thread-1",
        run_id="run-1",
        status="complete",
        worker_id="w-1",
        started_at=start,
        finished_at=start + timedelta(seconds=2.5),
        usage=usage,
    )
    StoredAgentRun.objects.create(
        owner_id="42",
        thread_id="thread-1",
        run_id="run-2",
        status="running",
        worker_id="w-2",
        started_at=start + timedelta(minutes=1),
        usage={},
    )
    StoredAgentRun.objects.create(  # another owner's thread of the same id
        owner_id="7", thread_id="thread-1", run_id="run-x", status="complete", usage=usage
    )

    page = _page(admin_client, weather)
    text = _text(page)

    assert "Token usage: 120 (100 in, 20 out) over 2 runs" in text
    assert f'<a href="{PREFIX}/storedagentrun/{first.pk}/change/">run-1</a>' in page
    assert "run-1 complete" in text
    assert "2.5 s 120 (100 in, 20 out) w-1" in text
    assert "run-2 running" in text
    assert "run-x" not in page


def test_a_thread_without_runs_says_so(admin_client: Client, weather: StoredConversation) -> None:
    text = _text(_page(admin_client, weather))

    assert "Token usage: no runs recorded" in text
    assert "Runs: none" in text


def test_token_totals_read_only_well_formed_counts() -> None:
    usages = [
        {"tokens": [{"input_tokens": 3, "output_tokens": 4}]},  # no total: in + out
        {"tokens": [{"inputTokens": 1, "outputTokens": 1, "totalTokens": 5}]},
        {"tokens": [{"input_tokens": "9", "output_tokens": True, "total_tokens": -1}]},
        {"tokens": "many"},
        None,
        [1, 2],
    ]

    assert token_totals(usages) == TokenTotals(input=4, output=5, total=12)
    assert str(TokenTotals(input=1200, output=3, total=1203)) == "1,203 (1,200 in, 3 out)"


def test_a_stopped_runs_estimated_tokens_say_so() -> None:
    stopped = {"tokens": [{"input_tokens": 50, "output_tokens": 2, "estimated": True}]}
    finished = {"tokens": [{"input_tokens": 10, "output_tokens": 1}]}

    assert token_totals([finished, stopped]) == TokenTotals(
        input=60, output=3, total=63, estimated=True
    )
    assert str(token_totals([stopped])) == "52 (50 in, 2 out), partly estimated"
    assert str(token_totals([finished])) == "11 (10 in, 1 out)"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.25, "0.2 s"), (59.9, "59.9 s"), (185, "3 min 5 s"), (3 * 3600 + 120, "3 h 2 min")],
)
def test_run_duration(seconds: float, shown: str) -> None:
    start = timezone.now()
    run = StoredAgentRun(started_at=start, finished_at=start + timedelta(seconds=seconds))
    assert run_duration(run) == shown


def test_run_duration_without_an_end() -> None:
    assert run_duration(StoredAgentRun(status="running")) == "running"
    assert run_duration(StoredAgentRun(status="errored")) == "not recorded"


def test_content_parts_are_named_never_dumped(admin_client: Client) -> None:
    parts = [
        {"type": "text", "text": "Look at these"},
        {
            "type": "image",
            "source": {"type": "data", "value": "QUJD" * 1000, "mimeType": "image/png"},
        },
        {"type": "document", "source": {"type": "url", "value": "https://example.com/a.pdf"}},
        {"type": "binary", "mimeType": "application/pdf", "data": "QUJD"},
    ]
    conv = write_thread(
        [Turn(role="user", content="Look at these", extra={"content_parts": parts})]
    )
    row = StoredMessage.objects.get(conversation=conv)
    row.record = {**row.record, "timestamp": "2026-01-02T03:04:05"}  # naive: shown as it is
    row.save(update_fields=["record"])

    page = _page(admin_client, conv)
    text = _text(page)

    assert (
        "content parts: image (image/png), document (url): https://example.com/a.pdf, "
        "binary (application/pdf)"
    ) in text
    assert "QUJDQUJD" not in page
    assert "Jan. 2, 2026, 3:04 a.m." in text


def test_only_the_newest_runs_are_listed(
    admin_client: Client, weather: StoredConversation, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("django_pydantic_agent.contrib.store.admin._RUNS_SHOWN", 1)
    start = timezone.now()
    for n in range(2):
        StoredAgentRun.objects.create(
            owner_id="42",
            thread_id="thread-1",
            run_id=f"run-{n}",
            status="complete",
            started_at=start + timedelta(seconds=n),
            finished_at=start + timedelta(seconds=n + 1),
        )

    text = _text(_page(admin_client, weather))

    assert "run-1 complete" in text
    assert "run-0 complete" not in text
    assert "Newest 1 shown." in text
    assert "over 2 runs" in text
