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

Every ``console`` block the test does not run is listed in ``NOT_RUN`` with its reason (and the
one ``javascript`` block not run is named), so a block added to the page fails here until it is
run or explained.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"
BIN_DIR = Path(sys.executable).parent
DOCUMENTED_HOST = "127.0.0.1:8000"

#: Console blocks the test does not run, by their first command, with the reason.
NOT_RUN = {
    "git clone https://github.com/django-pydantic-agent/django-pydantic-agent": (
        "installs the package; the test runs in the environment it is installed in"
    ),
    'pip install "pydantic-ai-slim[openai]"': "a real model needs a provider SDK and a key",
    "uvicorn myproject.asgi:application --host 127.0.0.1 --port 8000 --lifespan on": (
        "the same server First run starts"
    ),
    "ag-ui-validate http://127.0.0.1:8000/agent/ \\": "its cookies are placeholders",
}


@dataclass(frozen=True)
class Block:
    """A fenced code block of the page: its language, its text and the section it is in."""

    lang: str
    text: str
    section: str


@dataclass(frozen=True)
class Command:
    """A ``$`` command of a console block (continuation lines included) and its output."""

    text: str
    output: tuple[str, ...]


def page_blocks() -> list[Block]:
    blocks = []
    section = ""
    lines = iter(PAGE.read_text(encoding="utf-8").splitlines())
    for line in lines:
        if line.startswith("## "):
            section = line[3:].strip()
        fence = re.fullmatch(r"```(\w+)", line)
        if fence:
            body = []
            for inner in lines:
                if inner == "```":
                    break
                body.append(inner)
            blocks.append(Block(fence.group(1), "\n".join(body), section))
    return blocks


def _complete(command: str) -> bool:
    """Whether ``command`` is a whole shell command: no trailing ``\\``, no open quote."""
    if command.endswith("\\"):
        return False
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def commands(block: Block) -> list[Command]:
    lines = block.text.splitlines()
    found = []
    index = 0
    while index < len(lines):
        line = lines[index]
        assert line.startswith("$ "), f"not a command in {block.section!r}: {line!r}"
        text = line[2:]
        index += 1
        while not _complete(text):
            text += "\n" + lines[index]
            index += 1
        output = []
        while index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index])
            index += 1
        found.append(Command(text, tuple(output)))
    return found


def _first_command(block: Block) -> str:
    return commands(block)[0].text.split("\n")[0]


def _line_pattern(documented: str) -> re.Pattern[str]:
    return re.compile(".*?".join(re.escape(piece) for piece in documented.split("...")))


def _lines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[-1]:
        lines.pop()
    return lines


def mismatch(documented: tuple[str, ...], real: str) -> str | None:
    """Why ``real`` is not the output ``documented`` shows, or ``None`` when it is."""
    expected = _lines("\n".join(documented))
    actual = _lines(real)
    if expected and expected[0].startswith("HTTP/"):
        # A curl -i answer: the status line, the headers the page shows (in order, among
        # others), then the body exactly.
        cut, real_cut = expected.index(""), actual.index("")
        shown, sent = expected[1:cut], iter(line.lower() for line in actual[1:real_cut])
        missing = [header for header in shown if header.lower() not in sent]
        if missing:
            return f"headers {missing} not sent (in this order)"
        expected = [expected[0], *expected[cut:]]
        actual = [actual[0], *actual[real_cut:]]
    if len(expected) != len(actual):
        return f"{len(actual)} lines instead of {len(expected)}"
    for number, (want, got) in enumerate(zip(expected, actual, strict=True), start=1):
        if not _line_pattern(want).fullmatch(got):
            return f"line {number} is {got!r}, the page shows {want!r}"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def newcomer_env() -> dict[str, str]:
    """An activated virtualenv's environment, with no settings module and no model chosen."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DJANGO_SETTINGS_MODULE", "AGENT_MODEL", "PYTHONPATH")
    }
    env["PATH"] = os.pathsep.join([str(BIN_DIR), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(BIN_DIR.parent)
    return env


def run_in_bash(steps: list[Command], cwd: Path, outputs: Path) -> list[tuple[str, int]]:
    """Run ``steps`` in one bash (so variables carry over); each one's stdout and status."""
    outputs.mkdir()
    script = []
    for number, step in enumerate(steps):
        # stderr apart: at a terminal curl prints no progress meter, here it would.
        script.append(f"{{\n{step.text}\n}} > {outputs}/{number}.out 2> {outputs}/{number}.err")
        script.append(f"echo $? > {outputs}/{number}.rc")
    subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=cwd,
        env=newcomer_env(),
        check=True,
        timeout=120,
    )
    return [
        (
            (outputs / f"{number}.out").read_text(encoding="utf-8"),
            int((outputs / f"{number}.rc").read_text()),
        )
        for number in range(len(steps))
    ]


def check_outputs(steps: list[Command], results: list[tuple[str, int]]) -> None:
    for step, (output, status) in zip(steps, results, strict=True):
        assert status == 0, f"`{step.text}` exited with {status}; it printed:\n{output}"
        if step.output:
            problem = mismatch(step.output, output)
            assert problem is None, f"`{step.text}`: {problem}. It printed:\n{output}"


def apply_python_block(block: Block, project: Path) -> None:
    first, _, code = block.text.partition("\n")
    named = re.fullmatch(r"# (myproject/\w+\.py)(, at the end)?", first)
    assert named, f"a python block in {block.section!r} does not name its file: {first!r}"
    target = project / named.group(1)
    assert target.exists(), f"{named.group(1)} is not a file startproject creates"
    if named.group(2):
        with target.open("a", encoding="utf-8") as file:
            file.write(f"\n{code}\n")
    else:
        target.write_text(block.text + "\n", encoding="utf-8")


@contextmanager
def serve(command: Command, project: Path, port: int, log: Path) -> Iterator[None]:
    """Start the page's uvicorn command on ``port``; stop it at the end of the block."""
    assert not command.output, "the page shows no output under uvicorn"
    with log.open("w") as out:
        process = subprocess.Popen(
            [*shlex.split(command.text), "--port", str(port)],
            cwd=project,
            env=newcomer_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, f"uvicorn exited:\n{log.read_text()}"
            try:
                httpx.get(f"http://127.0.0.1:{port}/agent/", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, f"uvicorn did not answer:\n{log.read_text()}"
                time.sleep(0.1)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


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
        **newcomer_env(),
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


def on_port(command: Command, port: int) -> Command:
    return Command(command.text.replace(DOCUMENTED_HOST, f"127.0.0.1:{port}"), command.output)


def test_the_page_runs_as_written_and_prints_what_it_shows(tmp_path: Path) -> None:
    blocks = page_blocks()
    consoles = [block for block in blocks if block.lang == "console"]
    skipped = {_first_command(block) for block in consoles} & set(NOT_RUN)
    assert skipped == set(NOT_RUN), f"NOT_RUN names blocks the page lost: {set(NOT_RUN) - skipped}"

    # Install: the project.
    (create,) = [
        block for block in consoles if block.section == "Install" and "startproject" in block.text
    ]
    create_steps = commands(create)
    check_outputs(create_steps, run_in_bash(create_steps, tmp_path, tmp_path / "create"))
    project = tmp_path / "myproject"
    assert (project / "manage.py").exists()

    # Settings, URLs, ASGI: every python block, into the file it names.
    python = [block for block in blocks if block.lang == "python"]
    assert {block.section for block in python} >= {"Settings", "URLs", "Serve it with ASGI"}
    for block in python:
        apply_python_block(block, project)

    # First run: migrate, the user, the server, then every curl in one shell.
    first_run = [
        block
        for block in consoles
        if block.section == "First run" and _first_command(block) not in NOT_RUN
    ]
    steps = [step for block in first_run for step in commands(block)]
    run_blocks = {create.text} | {block.text for block in first_run}
    unaccounted = [
        block.text.split("\n")[0]
        for block in consoles
        if block.text not in run_blocks and _first_command(block) not in NOT_RUN
    ]
    assert not unaccounted, f"console blocks neither run nor in NOT_RUN: {unaccounted}"
    (server_at,) = [i for i, step in enumerate(steps) if step.text.startswith("uvicorn ")]
    before, server, after = steps[:server_at], steps[server_at], steps[server_at + 1 :]
    agent_calls = [step for step in after if "/agent/" in step.text]
    assert len(agent_calls) >= 6
    silent = [step.text for step in agent_calls if not step.output]
    assert not silent, f"requests to the endpoint that show no answer: {silent}"
    check_outputs(before, run_in_bash(before, project, tmp_path / "before"))
    port = free_port()
    # A minimal browser client: its script and the upload snippet, in Node, logged in as above.
    scripts = [block for block in blocks if block.lang == "javascript"]
    client = [block for block in scripts if "async function send(" in block.text]
    upload = [block for block in scripts if 'fetch("/agent/attachments/"' in block.text]
    others = [block.text.split("\n")[0] for block in scripts if block not in client + upload]
    assert others == ['import { HttpAgent } from "@ag-ui/client";'], (
        "javascript blocks neither run nor explained (the HttpAgent one needs npm packages, "
        f"and tests/e2e/test_agui_client.py runs @ag-ui/client): {others}"
    )
    with serve(server, project, port, tmp_path / "uvicorn.log"):
        after = [on_port(step, port) for step in after]
        check_outputs(after, run_in_bash(after, project, tmp_path / "after"))
        check_page_script(run_page_script([*client, *upload], port, project, tmp_path))


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
