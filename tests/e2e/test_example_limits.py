"""The example project's quotas, throttle and static files under uvicorn, as `make demo` runs it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.example_project.support import login, parse_sse, run_input, serve_example

pytestmark = pytest.mark.e2e


def test_quotas_answer_413_and_the_throttle_429_as_json(tmp_path: Path) -> None:
    with (
        serve_example(
            tmp_path, AGENT_REQUESTS_PER_MINUTE="4", AGENT_MAX_FILES="1", AGENT_MAX_THREADS="1"
        ) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        headers = {"X-CSRFToken": login(http)}
        first = http.post("/agent/", json=run_input("hi", thread_id="a"), headers=headers)
        second = http.post("/agent/", json=run_input("hi", thread_id="b"), headers=headers)
        uploads = [
            http.post(
                "/agent/attachments/",
                files={"file": (f"{name}.txt", name.encode(), "text/plain")},
                headers=headers,
            )
            for name in ("one", "two", "three")
        ]
        listing = http.get("/agent/threads/").json()["threads"]

    assert parse_sse(first.text)[-1]["type"] == "RUN_FINISHED"
    assert second.status_code == 413, "refused before streaming"
    assert second.headers["content-type"] == "application/json"
    assert "max_threads_per_owner=1" in second.json()["error"]
    assert [thread["threadId"] for thread in listing] == ["a"]
    assert [response.status_code for response in uploads] == [201, 413, 429]
    assert uploads[1].headers["content-type"] == "application/json"
    assert "max_files_per_owner=1" in uploads[1].json()["error"]
    assert uploads[2].headers["content-type"] == "application/json"
    # A full minute waits for the next one and a quarter of it (limit 4): at most 75 seconds.
    assert 1 <= int(uploads[2].headers["retry-after"]) <= 75


def test_the_admin_is_styled_under_uvicorn(tmp_path: Path) -> None:
    with serve_example(tmp_path) as server, httpx.Client(base_url=server.url) as http:
        page = http.get("/admin/login/")
        css = http.get("/static/admin/css/base.css")
    assert page.status_code == 200
    assert '<link rel="stylesheet" href="/static/admin/css/base.css">' in page.text
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
    assert b"body" in css.content
