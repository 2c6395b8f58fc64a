"""A history window's message cap far under the default: ``HistoryWindow(max_messages=10)``
sends the model at most 10 messages of a 50-message thread, on every store.

The session store and the ``Model*`` stores read a thread whole and cut it in memory; the
Default store reads the newest ``max_messages`` records. A thread of 50 messages is under the
default cap (100), so only the configured cap can cut it: the same thread under the default
window reaches the model whole.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.persistence.transfer import FORMAT, VERSION
from tests.agui.conftest import logged_in, run_body, sse_events
from tests.agui.urls_window import CAP, SEEN, STORES

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls_window")]

#: The stored thread's length: over the cap, under the default cap.
LENGTH = 50


@pytest.fixture(autouse=True)
def _fresh() -> None:
    SEEN.clear()


def _document() -> dict[str, Any]:
    """An export of a thread of ``LENGTH`` messages, ``m0`` (a question) to ``m49``."""
    messages = [
        {
            "parent": n - 1 if n else None,
            "active": True,
            "wire": [
                {"id": f"m{n}", "role": "user" if n % 2 == 0 else "assistant", "content": f"m{n}"}
            ],
        }
        for n in range(LENGTH)
    ]
    return {"format": FORMAT, "version": VERSION, "title": "Long", "messages": messages}


async def _model_sees(http: httpx.AsyncClient, prefix: str) -> list[str]:
    """Import the long thread on ``prefix``, ask one more question: what the model was sent."""
    imported = await http.post(f"{prefix}threads/import/", json=_document())
    assert imported.status_code == 201, imported.text
    thread_id = imported.json()["threadId"]
    stored = (await http.get(f"{prefix}threads/{thread_id}/")).json()["messages"]
    assert len(stored) == LENGTH
    body = run_body(thread_id=thread_id, run_id=f"r-{prefix.strip('/')}", text="next")
    posted = [{k: m[k] for k in ("id", "role", "content")} for m in stored]
    body["messages"] = [*posted, *body["messages"]]
    response = await http.post(prefix, json=body)
    assert response.status_code == 200, response.text
    assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED", response.text
    await RunCoordinator.wait_for_all_runs()
    [seen] = SEEN
    SEEN.clear()
    return seen


@pytest.mark.parametrize("store", list(STORES))
async def test_a_cap_under_the_default_bounds_what_the_model_is_sent(
    alice: Any, store: str
) -> None:
    async with await logged_in(alice) as http:
        capped = await _model_sees(http, f"/capped-{store}/")
        default = await _model_sees(http, f"/default-{store}/")
    # Under the default window the model gets the whole thread and the new question ...
    assert default == [*(f"{'UA'[n % 2]}:m{n}" for n in range(LENGTH)), "U:next"]
    # ... under a cap of 10, at most 10 of the stored messages (the newest, from a question
    # on), then the new question.
    *history, question = capped
    assert question == "U:next"
    assert len(history) <= CAP, capped
    assert len(history) >= CAP - 1, capped  # cut to the cap, not further
    assert history == default[-1 - len(history) : -1]
    assert history[0].startswith("U:")
