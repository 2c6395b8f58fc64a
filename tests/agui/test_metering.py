"""What a stopped or failed run used: the provider's figures for the requests that completed,
an estimate (marked ``"estimated": true``) for the one the end cut short, kept on the run
record and in the usage ledger, so the ledger counts every run the run table does."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from ag_ui.core import (
    RunErrorEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.test import TestModel

from django_pydantic_agent.agui.metering import MetersUsage, UsageMeter, model_names
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.store.models import StoredAgentRun, StoredRunUsage
from django_pydantic_agent.persistence.usage import estimate_text_tokens
from tests.agui.agents import PARTIAL_ANSWER
from tests.agui.conftest import (
    asgi_app,
    drive_until_disconnect,
    logged_in,
    run_body,
    sse_events,
)

_HISTORY = [ModelRequest(parts=[UserPromptPart(content="What is the weather like in Oslo?")])]


def _meter() -> UsageMeter:
    meter = UsageMeter(model="gpt-4o", provider="openai")
    meter.history = lambda: _HISTORY
    meter.observe(RunStartedEvent(thread_id="t", run_id="r"))
    return meter


def _answer(meter: UsageMeter, *deltas: str, message_id: str = "m", end: bool = False) -> None:
    """The model streams a text part (and ends it, with ``end``)."""
    meter.observe(TextMessageStartEvent(message_id=message_id))
    for delta in deltas:
        meter.observe(TextMessageContentEvent(message_id=message_id, delta=delta))
    if end:
        meter.observe(TextMessageEndEvent(message_id=message_id))


def _response(meter: UsageMeter, input_tokens: int, output_tokens: int) -> None:
    """pydantic-ai adds a response (complete, or cut short) to the run's usage."""
    usage = meter.run_usage
    usage.requests += 1
    usage.input_tokens += input_tokens
    usage.output_tokens += output_tokens


def _history_tokens() -> int:
    meter = _meter()  # asked, nothing streamed, nothing reported: the history alone
    [entry] = meter.reached()["tokens"]
    return int(entry["input_tokens"])


def test_a_run_stopped_before_its_first_response_is_estimated() -> None:
    meter = _meter()
    _answer(meter, "It is ", "sunny")

    [entry] = meter.reached()["tokens"]

    assert entry["estimated"] is True
    assert (entry["model"], entry["provider"]) == ("gpt-4o", "openai")
    assert entry["input_tokens"] == _history_tokens() > 0
    assert entry["output_tokens"] == estimate_text_tokens("It is sunny")
    assert entry["total_tokens"] == entry["input_tokens"] + entry["output_tokens"]


def test_a_cut_response_the_provider_reported_nothing_for_is_estimated() -> None:
    # Most providers report usage at the end of a stream: the cut response adds zeros.
    meter = _meter()
    _answer(meter, "Working on it")
    _response(meter, 0, 0)

    [entry] = meter.reached()["tokens"]

    assert entry["estimated"] is True
    assert (entry["input_tokens"], entry["output_tokens"]) == (
        _history_tokens(),
        estimate_text_tokens("Working on it"),
    )


def test_each_figure_of_a_cut_response_is_the_larger_of_reported_and_estimated() -> None:
    # A provider that reports as it streams (input at once, output so far) counts too.
    meter = _meter()
    _answer(meter, "Working on it")
    _response(meter, 500, 1)

    [entry] = meter.reached()["tokens"]

    assert entry["estimated"] is True
    assert (entry["input_tokens"], entry["output_tokens"]) == (
        500,
        estimate_text_tokens("Working on it"),
    )


def test_completed_requests_are_reported_and_only_the_cut_one_is_estimated() -> None:
    meter = _meter()
    meter.observe(ToolCallStartEvent(tool_call_id="c", tool_call_name="weather"))
    meter.observe(ToolCallArgsEvent(tool_call_id="c", delta='{"city": "Oslo"}'))
    meter.observe(ToolCallEndEvent(tool_call_id="c"))
    _response(meter, 50, 7)
    meter.observe(ToolCallResultEvent(message_id="r", tool_call_id="c", content="Sunny"))
    _answer(meter, "Sunny ", "all day.", message_id="m2")  # then the model fails

    reported, estimated = meter.reached()["tokens"]

    assert "estimated" not in reported
    assert (reported["input_tokens"], reported["output_tokens"]) == (50, 7)
    assert estimated["estimated"] is True
    # Only the answer is estimated: the tool call's arguments were the completed request's.
    assert estimated["output_tokens"] == estimate_text_tokens("Sunny all day.")
    # Sent what the previous request was sent and answered.
    assert estimated["input_tokens"] == 57


def test_a_failed_response_the_run_ended_after_is_still_estimated() -> None:
    # pydantic-ai adds the failed response, then the stream closes its part and fails.
    meter = _meter()
    _answer(meter, "Sunny all day")
    _response(meter, 0, 0)
    meter.observe(TextMessageEndEvent(message_id="m"))
    meter.observe(RunErrorEvent(message="The model provider went away."))

    [entry] = meter.reached()["tokens"]

    assert entry["estimated"] is True
    assert entry["output_tokens"] == estimate_text_tokens("Sunny all day")


def test_a_request_stopped_before_its_first_token_is_estimated_from_the_previous() -> None:
    meter = _meter()
    meter.observe(ToolCallArgsEvent(tool_call_id="c", delta='{"city": "Oslo"}'))
    _response(meter, 50, 7)
    meter.observe(ToolCallResultEvent(message_id="r", tool_call_id="c", content="Sunny"))
    _response(meter, 0, 0)  # the next request, cut before anything came back

    reported, estimated = meter.reached()["tokens"]

    assert (reported["input_tokens"], reported["output_tokens"]) == (50, 7)
    assert (estimated["input_tokens"], estimated["output_tokens"]) == (57, 0)
    assert estimated["estimated"] is True


def test_a_run_stopped_after_a_response_completed_is_all_reported() -> None:
    meter = _meter()
    _answer(meter, "Done.", end=True)
    _response(meter, 20, 2)

    assert meter.reached() == {
        "tokens": [
            {
                "provider": "openai",
                "model": "gpt-4o",
                "input_tokens": 20,
                "output_tokens": 2,
                "total_tokens": 22,
            }
        ]
    }
    assert meter.reached() is meter.reached()  # estimated once, however often asked


def test_a_run_that_never_asked_the_model_used_nothing() -> None:
    [entry] = UsageMeter(model="m").reached()["tokens"]

    assert (entry["total_tokens"], "estimated" in entry) == (0, False)


def test_the_model_is_named_without_building_one() -> None:
    assert model_names(Agent(FunctionModel(lambda m, i: None, model_name="gpt-4o"))) == (
        "gpt-4o",
        "function",
    )
    assert model_names(Agent("openai:gpt-4o", defer_model_check=True)) == ("gpt-4o", "openai")
    assert model_names(Agent(None)) == ("", "")
    assert model_names(Agent(TestModel())) == ("test", "test")


def test_the_inner_agent_meters_its_usage() -> None:
    from django_pydantic_agent.agui.inner import PydanticAIAgent

    inner = PydanticAIAgent(
        Agent(TestModel()),
        deps=None,
        accept=None,
        instructions=None,
        allowed_file_url_schemes=frozenset(),
        expose_error_messages=False,
        forward_reasoning=True,
    )

    assert isinstance(inner, MetersUsage)
    assert inner.usage_reached()["tokens"][0]["total_tokens"] == 0


# Over the ASGI app: what the run record and the ledger keep.


def anonymous() -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=asgi_app())
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


async def _ledger_matches_the_runs() -> None:
    runs = [run async for run in StoredAgentRun.objects.order_by("run_id")]
    rows = [row async for row in StoredRunUsage.objects.order_by("run_id")]
    assert [(r.owner_id, r.thread_id, r.run_id) for r in runs] == [
        (r.owner_id, r.thread_id, r.run_id) for r in rows
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.agui.urls")
async def test_a_cancelled_run_records_the_estimate_of_what_it_streamed(alice: Any) -> None:
    async with await logged_in(alice) as http, await logged_in(alice) as other_tab:
        streaming = asyncio.ensure_future(http.post("/hanging-durable/", json=run_body()))
        for _ in range(500):
            thread = await other_tab.get("/hanging-durable/threads/thread-1/")
            if thread.status_code == 200 and thread.json().get("activeRun"):
                break
            await asyncio.sleep(0.02)
        await other_tab.post("/hanging-durable/runs/thread-1/run-1/cancel/")
        response = await asyncio.wait_for(streaming, timeout=10)
        await RunCoordinator.wait_for_all_runs()

    assert sse_events(response.text)[-1]["outcome"] == {"type": "cancelled"}
    run = await StoredAgentRun.objects.aget(run_id="run-1")
    assert run.status == "interrupted"
    [entry] = run.usage["tokens"]
    assert entry["estimated"] is True
    assert entry["output_tokens"] == estimate_text_tokens("Working ")
    assert entry["input_tokens"] > 0  # the question was sent
    row = await StoredRunUsage.objects.aget(run_id="run-1")
    assert (row.status, row.estimated) == ("interrupted", True)
    assert row.total_tokens == entry["input_tokens"] + entry["output_tokens"]
    await _ledger_matches_the_runs()


async def _stopped_mid_answer(prefix: str) -> StoredAgentRun:
    """Run ``interrupted_agent`` (a tool call, then an answer cut short) on ``prefix``:
    ``/interrupted/`` is stopped (the client leaves), ``/erroring/``'s model fails."""
    if prefix == "/interrupted/":
        last_word = f'"delta":"{PARTIAL_ANSWER[-1]}"'.encode()
        await drive_until_disconnect(prefix, run_body(), until=last_word)
    else:
        async with anonymous() as http:
            response = await http.post(prefix, json=run_body())
        assert sse_events(response.text)[-1]["type"] == "RUN_ERROR"
    await RunCoordinator.wait_for_all_runs()
    await RunCoordinator.aclose_all()
    return await StoredAgentRun.objects.aget(run_id="run-1")


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.agui.urls")
@pytest.mark.parametrize(
    ("prefix", "status"), [("/interrupted/", "interrupted"), ("/erroring/", "errored")]
)
async def test_a_run_stopped_or_failed_after_a_tool_call_records_both_parts(
    prefix: str, status: str
) -> None:
    run = await _stopped_mid_answer(prefix)

    assert run.status == status
    reported, estimated = run.usage["tokens"]
    # The first request (the tool call) completed: the model's own figures.
    assert "estimated" not in reported
    assert reported["input_tokens"] > 0
    assert reported["output_tokens"] > 0
    # The answer it was streaming when it stopped: estimated from the text that streamed.
    assert estimated["estimated"] is True
    assert estimated["output_tokens"] == estimate_text_tokens("".join(PARTIAL_ANSWER))
    assert estimated["input_tokens"] > reported["output_tokens"]
    row = await StoredRunUsage.objects.aget(run_id="run-1")
    assert row.estimated is True
    assert row.input_tokens == reported["input_tokens"] + estimated["input_tokens"]
    assert row.output_tokens == reported["output_tokens"] + estimated["output_tokens"]
    await _ledger_matches_the_runs()


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.agui.urls")
async def test_a_completed_run_is_reported_not_estimated(alice: Any) -> None:
    async with await logged_in(alice) as http:
        response = await http.post("/stored/", json=run_body())
    await RunCoordinator.wait_for_all_runs()

    [usage] = sse_events(response.text)[-1]["usage"]
    row = await StoredRunUsage.objects.aget(run_id="run-1")
    assert row.estimated is False
    assert (row.input_tokens, row.output_tokens) == (usage["inputTokens"], usage["outputTokens"])
