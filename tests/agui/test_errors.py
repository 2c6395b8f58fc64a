"""Store refusals and ``RUN_ERROR`` redaction: one rule each, the same on every route."""

from __future__ import annotations

import json

import pytest
from ag_ui.core import RunErrorEvent

from django_pydantic_agent.agui.errors import (
    REDACTED_RUN_ERROR,
    REDACTED_SAVE_ERROR,
    STORE_LIMIT_CODE,
    STORE_REFUSED_CODE,
    Refusal,
    describe_store_refusal,
    redact_run_error,
    run_error,
    store_refusal_event,
)
from django_pydantic_agent.persistence import AnonymousOperationError, StoreError, StoreLimitError

REFUSALS = [
    (AnonymousOperationError("visitor"), 403, STORE_REFUSED_CODE),
    (StoreLimitError("The thread holds too many messages."), 413, STORE_LIMIT_CODE),
    (StoreError("The title is taken."), 409, STORE_REFUSED_CODE),
]


@pytest.mark.parametrize(("exc", "status", "code"), REFUSALS)
def test_a_refusal_reads_the_same_before_and_after_streaming_started(
    exc: StoreError, status: int, code: str
) -> None:
    response = Refusal.of_store(exc, store="conversation").response()
    event = store_refusal_event(exc, store="conversation")
    assert response.status_code == status
    assert json.loads(response.content) == {"error": event.message}
    assert event.code == code


def test_an_anonymous_refusal_names_the_kind_of_store_not_the_exception() -> None:
    refusal = describe_store_refusal(AnonymousOperationError("secret detail"), store="attachment")
    assert refusal.message == "This agent's attachment store does not serve anonymous visitors."
    assert "secret" not in refusal.message


def test_a_run_error_is_redacted_unless_exposed_and_keeps_its_other_fields() -> None:
    event = RunErrorEvent(message="db password wrong", code="X", timestamp=5)
    redacted = redact_run_error(event, expose=False)
    assert (redacted.message, redacted.code, redacted.timestamp) == (REDACTED_RUN_ERROR, "X", 5)
    assert redact_run_error(event, expose=True) is event


def test_run_error_words_an_exception_through_the_same_redaction() -> None:
    failure = RuntimeError("db password wrong")
    assert run_error(failure, expose=True).message == "db password wrong"
    saved = run_error(failure, expose=False, code="STORE_FAILED", redacted=REDACTED_SAVE_ERROR)
    assert (saved.message, saved.code) == (REDACTED_SAVE_ERROR, "STORE_FAILED")
