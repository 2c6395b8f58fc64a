"""``make demo``'s agent reads an attached file, served by uvicorn, on each store.

The file is uploaded through ``POST /agent/attachments/``, the question posted to ``/agent/``,
and the answer read from the stream and from ``GET /agent/threads/<id>/``: the routes a
browser uses, over real HTTP, with the demo's own settings.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.example_project.support import login, parse_sse, run_input, serve_example

NOTES = b"Remember the milk.\nAnd the eggs.\nAnd the bread.\nAnd the tea.\n"
QUOTE = (
    f"**notes.txt** ({len(NOTES)} bytes, 4 lines) says:\n\n"
    "> Remember the milk.\n> And the eggs.\n> And the bread.\n\n\u2026and 1 more line."
)


@pytest.mark.parametrize("store", ["default", "memory-service"])
def test_what_does_my_file_say_quotes_the_file(tmp_path: Path, store: str) -> None:
    pytest.importorskip("django_pydantic_agent.persistence.memory_service")
    with (
        serve_example(tmp_path, AGENT_STORE=store, DEMO_WORD_DELAY="0") as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        headers = {"X-CSRFToken": login(client)}
        upload = client.post(
            "/agent/attachments/",
            files={"file": ("notes.txt", NOTES, "text/plain")},
            headers=headers,
        )
        assert upload.status_code == 201, upload.text
        body = run_input("What does my file say?", thread_id="t-notes")
        body["messages"][0]["attachments"] = [{"id": upload.json()["id"]}]
        run = client.post("/agent/", json=body, headers={**headers, "Accept": "text/event-stream"})
        again = client.post(
            "/agent/",
            json=run_input("Read my file again, please.", thread_id="t-notes", run_id="run-2"),
            headers={**headers, "Accept": "text/event-stream"},
        )
        thread = client.get("/agent/threads/t-notes/").json()

    assert run.status_code == again.status_code == 200
    for events in (parse_sse(run.text), parse_sse(again.text)):
        assert events[-1]["type"] == "RUN_FINISHED"
        calls = [e["toolCallName"] for e in events if e["type"] == "TOOL_CALL_START"]
        assert calls == ["read_attachment"]
    answers = [
        m["content"] for m in thread["messages"] if m["role"] == "assistant" and m.get("content")
    ]
    assert answers == [QUOTE, QUOTE]
    # The stored question is the one posted: the fence went to the model only.
    assert thread["messages"][0]["content"] == "What does my file say?"
    assert "Traceback" not in server.log.read_text()
