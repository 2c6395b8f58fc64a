"""A documentation page's code, run as a newcomer runs it, in a project of their own.

The pieces ``test_getting_started.py`` and ``test_wheel.py`` share: a page's fenced blocks, its
``console`` commands and the output printed under them, ``python`` blocks written into the file
their first line names (``# myproject/<file>.py`` replaces the file, ``# myproject/<file>.py,
at the end`` appends to it), commands run in one ``bash`` of an activated virtualenv, and
uvicorn served on a free loopback port. The virtualenv is whichever ``bin`` directory a caller
passes: the test's own, or a fresh one holding the built wheel.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOCUMENTED_HOST = "127.0.0.1:8000"


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page: its language, its text and the section it is in."""

    lang: str
    text: str
    section: str


@dataclass(frozen=True)
class Command:
    """A ``$`` command of a console block (continuation lines included) and its output."""

    text: str
    output: tuple[str, ...]


def page_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with the ``## `` section it is in."""
    blocks = []
    section = ""
    lines = iter(page.read_text(encoding="utf-8").splitlines())
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
    """The ``$`` commands of a console block, each with the lines printed under it."""
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


def first_command(block: Block) -> str:
    """The first line of a console block's first command."""
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


def newcomer_env(bin_dir: Path) -> dict[str, str]:
    """The environment of a shell with the virtualenv of ``bin_dir`` activated, and with no
    settings module, no model chosen and nothing added to ``sys.path``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DJANGO_SETTINGS_MODULE", "AGENT_MODEL", "PYTHONPATH", "PYTHONHOME")
    }
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(bin_dir.parent)
    return env


def run_in_bash(
    steps: Sequence[Command], cwd: Path, outputs: Path, bin_dir: Path
) -> list[tuple[str, int]]:
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
        env=newcomer_env(bin_dir),
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


def check_outputs(steps: Sequence[Command], results: list[tuple[str, int]]) -> None:
    for step, (output, status) in zip(steps, results, strict=True):
        assert status == 0, f"`{step.text}` exited with {status}; it printed:\n{output}"
        if step.output:
            problem = mismatch(step.output, output)
            assert problem is None, f"`{step.text}`: {problem}. It printed:\n{output}"


def apply_python_block(block: Block, project: Path) -> None:
    """Write ``block`` into the project file its first line names (or append it there)."""
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


def on_port(command: Command, port: int) -> Command:
    """``command`` with the documented ``127.0.0.1:8000`` moved to ``port``."""
    return Command(command.text.replace(DOCUMENTED_HOST, f"127.0.0.1:{port}"), command.output)


@contextmanager
def serve(
    command: Command | str, project: Path, port: int, log: Path, bin_dir: Path
) -> Iterator[None]:
    """Start a page's uvicorn command on ``port``; stop it at the end of the block."""
    text = command if isinstance(command, str) else command.text
    assert isinstance(command, str) or not command.output, "no output is shown under uvicorn"
    with log.open("w") as out:
        process = subprocess.Popen(
            [*shlex.split(text), "--port", str(port)],
            cwd=project,
            env=newcomer_env(bin_dir),
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


class _Assets(HTMLParser):
    """The URLs of a page's scripts (``<script src>``) and styles (``<link href>``)."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.styles: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "script" and found.get("src"):
            self.scripts.append(str(found["src"]))
        if tag == "link" and found.get("href") and "stylesheet" in (found.get("rel") or ""):
            self.styles.append(str(found["href"]))


#: ``import ... from "x"``, ``export ... from "x"``, ``import "x"`` and ``import("x")``.
_JS_IMPORT = re.compile(
    r"""(?:\bfrom\s*|\bimport\s*\(?\s*)["']([^"']+\.m?js)["']""",
)
_CSS_URL = re.compile(r"""url\(\s*["']?([^"')]+)["']?\s*\)""")


def page_assets(client: httpx.Client, path: str) -> dict[str, httpx.Response]:
    """Fetch the page at ``path`` and every script, module and style it loads, each by URL.

    Scripts' static ``import``/``export ... from`` and ``import()`` specifiers are followed,
    and so are the ``url()`` references of stylesheets (``data:`` URLs aside). The page's own
    response is under ``path``.
    """
    page = client.get(path)
    found: dict[str, httpx.Response] = {path: page}
    parser = _Assets()
    parser.feed(page.text)
    pending = [urljoin(path, src) for src in parser.scripts + parser.styles]
    while pending:
        url = pending.pop()
        if url in found or url.startswith("data:"):
            continue
        response = found[url] = client.get(url)
        kind = response.headers.get("content-type", "")
        if response.status_code != 200:
            continue
        if "javascript" in kind:
            pending += [urljoin(url, spec) for spec in _JS_IMPORT.findall(response.text)]
        elif "css" in kind:
            pending += [urljoin(url, ref) for ref in _CSS_URL.findall(response.text)]
    return found


def assert_all_served(assets: dict[str, httpx.Response], kinds: Sequence[str]) -> None:
    """Every response of ``assets`` is a 200, and their paths end in each of ``kinds``."""
    failed = {url: r.status_code for url, r in assets.items() if r.status_code != 200}
    assert not failed, f"not served: {failed}"
    paths = [urlsplit(url).path for url in assets]
    for suffix in kinds:
        assert any(path.endswith(suffix) for path in paths), f"no {suffix} file among {paths}"


# Getting started (docs/getting-started.md), the page every other page builds on.

GETTING_STARTED = DOCS / "getting-started.md"

#: Console blocks of Getting started not run, by their first command, with the reason.
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


def start_project(workdir: Path, bin_dir: Path) -> Path:
    """Getting started's ``startproject`` block, run in ``workdir``: the project's folder."""
    consoles = [block for block in page_blocks(GETTING_STARTED) if block.lang == "console"]
    (create,) = [
        block for block in consoles if block.section == "Install" and "startproject" in block.text
    ]
    steps = commands(create)
    check_outputs(steps, run_in_bash(steps, workdir, workdir / "create", bin_dir))
    project = workdir / "myproject"
    assert (project / "manage.py").exists()
    return project


def apply_getting_started(project: Path) -> None:
    """Every python block of Getting started, into the file it names."""
    python = [block for block in page_blocks(GETTING_STARTED) if block.lang == "python"]
    assert {block.section for block in python} >= {"Settings", "URLs", "Serve it with ASGI"}
    for block in python:
        apply_python_block(block, project)


def getting_started(
    workdir: Path, bin_dir: Path, while_serving: Callable[[Path, int], None] | None = None
) -> Path:
    """Getting started as printed, in ``workdir`` with the virtualenv of ``bin_dir``.

    The project is created and given every python block; the console blocks of "First run"
    run one after the other in one bash, the curl calls against uvicorn (started as the page
    starts it, on a free port), each output compared with the page's. ``while_serving(project,
    port)`` runs while the server still runs. Returns the project's folder.
    """
    blocks = page_blocks(GETTING_STARTED)
    consoles = [block for block in blocks if block.lang == "console"]
    skipped = {first_command(block) for block in consoles} & set(NOT_RUN)
    assert skipped == set(NOT_RUN), f"NOT_RUN names blocks the page lost: {set(NOT_RUN) - skipped}"
    project = start_project(workdir, bin_dir)
    apply_getting_started(project)

    # First run: migrate, the user, the server, then every curl in one shell.
    first_run = [
        block
        for block in consoles
        if block.section == "First run" and first_command(block) not in NOT_RUN
    ]
    steps = [step for block in first_run for step in commands(block)]
    created = [block for block in consoles if "startproject" in block.text]
    run_blocks = {block.text for block in first_run + created}
    unaccounted = [
        block.text.split("\n")[0]
        for block in consoles
        if block.text not in run_blocks and first_command(block) not in NOT_RUN
    ]
    assert not unaccounted, f"console blocks neither run nor in NOT_RUN: {unaccounted}"
    (server_at,) = [i for i, step in enumerate(steps) if step.text.startswith("uvicorn ")]
    before, server, after = steps[:server_at], steps[server_at], steps[server_at + 1 :]
    agent_calls = [step for step in after if "/agent/" in step.text]
    assert len(agent_calls) >= 6
    silent = [step.text for step in agent_calls if not step.output]
    assert not silent, f"requests to the endpoint that show no answer: {silent}"
    check_outputs(before, run_in_bash(before, project, workdir / "before", bin_dir))
    port = free_port()
    with serve(server, project, port, workdir / "uvicorn.log", bin_dir):
        after = [on_port(step, port) for step in after]
        check_outputs(after, run_in_bash(after, project, workdir / "after", bin_dir))
        if while_serving is not None:
            while_serving(project, port)
    return project
