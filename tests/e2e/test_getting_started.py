"""``docs/getting-started.md`` runs as printed, and prints what it runs.

A newcomer's walk, read out of the page itself: ``django-admin startproject`` in a temporary
directory, every ``python`` block applied to the file its first line names (``# <path>``
replaces the file, ``# <path>, at the end`` appends to it), the ``console`` blocks of
"First run" run one after the other in one ``bash`` with the real ``curl``, and uvicorn started
as the page starts it. Each command's output is compared with the lines the page prints under
it: ``...`` stands for any text within a line, and for a ``curl -i`` answer the page may show
a subset of the headers. Everything else, ``id:`` lines and event types included, must match.

Two substitutions, both for the test machine and nothing else: uvicorn gets ``--port`` with a
free loopback port, and ``127.0.0.1:8000`` in the commands becomes that port. The agent is the
page's own ``Agent(os.environ.get("AGENT_MODEL", "test"))``, with ``AGENT_MODEL`` removed from
the environment: pydantic-ai's ``TestModel``, no network.

The browser client of "A minimal browser client" and its upload snippet run in Node against the
same server, with the session the curl login made: a turn, the stored thread, a reattach, a
Stop, a turn with a file (``BROWSER`` stands in for what a page finds in a browser).

Every ``console`` block the test does not run is listed in ``docs_project.NOT_RUN`` with its
reason (and the one ``javascript`` block not run is named), so a block added to the page fails
here until it is run or explained. The walk itself is ``docs_project.getting_started``, which
``test_wheel.py`` runs again on the installed wheel.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.docs_project import (
    GETTING_STARTED,
    Block,
    getting_started,
    mismatch,
    newcomer_env,
    page_blocks,
)

pytestmark = pytest.mark.e2e

BIN_DIR = Path(sys.executable).parent


#: The test's stand-ins for what the page's script finds in a browser: its origin and session
#: cookie (a same-origin ``fetch`` sends them), the CSRF token of ``{{ csrf_token }}``, a
#: ``handle`` that records the events, and a file the user picked. The page's blocks follow.
BROWSER = """
const pageFetch = globalThis.fetch;
globalThis.fetch = (url, init = {}) =>
  pageFetch(new URL(url, process.env.ORIGIN), {
    ...init,
    headers: { ...init.headers, Cookie: process.env.COOKIE },
  });
const csrfToken = process.env.CSRF;
const events = [];
const handle = (event) => events.push(event);
const file = new File(["my notes"], "notes.txt", { type: "text/plain" });
"""

#: What the test does with the page's functions, as a page would: a turn, the stored thread,
#: a reattach after the third event, a Stop of the finished run, then a turn with a file.
WALK = """
const threadId = "js-1", text = "Here are my notes.";
const first = await send(threadId, "Hello from a page");
const seen = { runId: live.runId, lastSeq: live.lastSeq, types: events.map((e) => e.type) };
const stored = await getThread(threadId);
events.length = 0;
const replayed = await reattach(threadId, seen.runId, 3);
const replayTypes = events.map((e) => e.type);
await stop();
const cancel = await pageFetch(
  new URL(`/agent/runs/${threadId}/${seen.runId}/cancel/`, process.env.ORIGIN),
  { method: "POST", headers: { Cookie: process.env.COOKIE, "X-CSRFToken": csrfToken } },
);
%(attachments)s
const last = await getThread(threadId);
console.log(JSON.stringify({
  first, seen, stored, replayed, replayTypes, cancel: await cancel.json(), last,
}));
"""


def run_page_script(
    blocks: list[Block], port: int, project: Path, tmp_path: Path
) -> dict[str, Any]:
    """The page's browser client and its upload snippet in Node, against the server."""
    client, upload = blocks
    jar: dict[str, str] = {}
    for line in (project / "jar.txt").read_text().splitlines():
        fields = line.split("\t")
        if len(fields) == 7:
            jar[fields[5]] = fields[6]
    script = tmp_path / "page.mjs"
    script.write_text(
        BROWSER + client.text + "\n" + WALK % {"attachments": upload.text}, encoding="utf-8"
    )
    env = {
        **newcomer_env(BIN_DIR),
        "ORIGIN": f"http://127.0.0.1:{port}",
        "COOKIE": f"sessionid={jar['sessionid']}; csrftoken={jar['csrftoken']}",
        "CSRF": jar["csrftoken"],
    }
    result = subprocess.run(
        ["node", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"the page's script failed:\n{result.stderr}"
    walk: dict[str, Any] = json.loads(result.stdout)
    return walk


def check_page_script(walk: dict[str, Any]) -> None:
    assert walk["first"]["type"] == "RUN_FINISHED"
    assert walk["seen"]["types"] == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        *["TEXT_MESSAGE_CONTENT"] * 4,
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert walk["seen"]["lastSeq"] == 8, "read() keeps the <seq> of the last id: line"
    assert [m["role"] for m in walk["stored"]["messages"]] == ["user", "assistant"]
    assert walk["stored"]["activeRun"] is None
    assert walk["replayed"]["type"] == "RUN_FINISHED"
    assert walk["replayTypes"] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert walk["cancel"] == {
        "runId": walk["seen"]["runId"],
        "status": "complete",
        "cancelled": False,
    }
    messages = walk["last"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 2, "only new messages posted"
    (note,) = messages[2]["attachments"]
    assert (note["name"], note["mime"], note["size"]) == ("notes.txt", "text/plain", 8)


def test_the_page_runs_as_written_and_prints_what_it_shows(tmp_path: Path) -> None:
    # A minimal browser client: its script and the upload snippet, in Node, logged in as the
    # curl calls of First run are.
    scripts = [block for block in page_blocks(GETTING_STARTED) if block.lang == "javascript"]
    client = [block for block in scripts if "async function send(" in block.text]
    upload = [block for block in scripts if 'fetch("/agent/attachments/"' in block.text]
    others = [block.text.split("\n")[0] for block in scripts if block not in client + upload]
    assert others == ['import { HttpAgent } from "@ag-ui/client";'], (
        "javascript blocks neither run nor explained (the HttpAgent one needs npm packages, "
        f"and tests/e2e/test_agui_client.py runs @ag-ui/client): {others}"
    )

    def browser_client(project: Path, port: int) -> None:
        check_page_script(run_page_script([*client, *upload], port, project, tmp_path))

    getting_started(tmp_path, BIN_DIR, while_serving=browser_client)


def test_the_comparison_holds_the_page_to_its_structure() -> None:
    """``...`` spans text within a line, never a line, an event type or an ``id:``."""
    shown = ("id: r1:1", 'data: {"type":"RUN_STARTED","timestamp":...,"runId":"r1"}', "")
    frame = 'id: r1:1\ndata: {"type":"RUN_STARTED","timestamp":17,"runId":"r1"}\n\n'
    assert mismatch(shown, frame) is None
    assert mismatch(shown, frame.removeprefix("id: r1:1\n")) is not None
    assert mismatch(shown, frame.replace("r1:1", "r1-1")) is not None
    assert mismatch(shown, frame.replace("RUN_STARTED", "RUN_ERROR")) is not None
    answer = ("HTTP/1.1 401 Unauthorized", "Content-Type: application/json", "", '{"error": "x"}')
    sent = "HTTP/1.1 401 Unauthorized\r\nserver: uvicorn\r\nContent-Type: application/json\r\n\r\n"
    assert mismatch(answer, sent + '{"error": "x"}') is None
    assert mismatch(answer, sent + '{"error": "y"}') is not None
    assert mismatch(answer, sent.replace("application/json", "text/html") + '{"error": "x"}')
