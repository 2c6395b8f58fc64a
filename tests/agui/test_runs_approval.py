"""Human in the loop on a persisting mount: a tool that needs approval ends the run with
outcome ``interrupt``; the next run must answer the stored interrupt (AG-UI 1.0 ``resume``)."""

from __future__ import annotations

from typing import Any

import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from tests.agui.agents import SENT_EMAILS
from tests.agui.conftest import logged_in, run_body, sse_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


def body(run_id: str, **extra: Any) -> dict[str, Any]:
    data = run_body(run_id=run_id, text="Email bob, please.")
    data["protocolVersion"] = "1.0"
    data.update(extra)
    return data


async def test_an_approval_tool_interrupts_and_the_resume_runs_it(alice: Any) -> None:
    SENT_EMAILS.clear()
    async with await logged_in(alice) as http:
        first = sse_events((await http.post("/approval/", json=body("run-1"))).text)
        outcome = first[-1]["outcome"]
        [interrupt] = outcome["interrupts"]
        sent_before_approval = list(SENT_EMAILS)
        unanswered = sse_events((await http.post("/approval/", json=body("run-2"))).text)
        forged = sse_events(
            (
                await http.post(
                    "/approval/",
                    json=body(
                        "run-3",
                        resume=[{"interruptId": "pydantic_ai:nope", "status": "resolved"}],
                    ),
                )
            ).text
        )
        approved = sse_events(
            (
                await http.post(
                    "/approval/",
                    json=body(
                        "run-4",
                        resume=[
                            {
                                "interruptId": interrupt["id"],
                                "status": "resolved",
                                "payload": {"approved": True},
                            }
                        ],
                    ),
                )
            ).text
        )
    assert first[-1]["type"] == "RUN_FINISHED"
    assert outcome["type"] == "interrupt"
    assert interrupt["toolCallId"] == "call-send"
    assert_valid_agui(first)
    # The tool did not run before it was approved, and ran once after.
    assert sent_before_approval == []
    assert SENT_EMAILS == ["bob"]
    # While the interrupt is open, a run that does not answer it is refused.
    assert unanswered[-1]["type"] == "RUN_ERROR"
    assert unanswered[-1]["code"] == "INVALID_INPUT"
    # An approval for a call the server never issued is refused.
    assert forged[-1]["type"] == "RUN_ERROR"
    assert forged[-1]["code"] == "INVALID_INPUT"
    assert approved[-1]["type"] == "RUN_FINISHED"
    assert "Sent." in "".join(e.get("delta", "") for e in approved)
