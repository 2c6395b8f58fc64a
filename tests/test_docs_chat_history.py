"""The code of ``docs/chat-history.md`` runs as printed.

The quick start runs in a fresh interpreter against the Memory Service emulator (served by
``live_server``), as the page tells a reader to run it offline. The four extension-point
snippets are assembled into the one class the page describes and run through a scripted turn.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from ag_ui.core import CustomEvent

from django_pydantic_agent.chat_history import StreamPersistenceManager
from django_pydantic_agent.testing.agui_script import (
    RF,
    RS,
    TMC,
    TME,
    TMS,
    ScriptedAgent,
    run_input,
)
from tests.support.emulator import no_faults_armed

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "chat-history.md"


def _section(title: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n{title}\n")
    following = re.search(r"\n#{2,3} ", text[start + len(title) + 2 :])
    end = start + len(title) + 2 + following.start() if following else len(text)
    return text[start:end]


def _python_blocks(section: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


@pytest.mark.django_db(transaction=True)
def test_the_quick_start_runs_against_the_emulator(live_server: Any, tmp_path: Path) -> None:
    (code,) = _python_blocks(_section("## Quick start"))
    script = tmp_path / "quickstart.py"
    script.write_text(code, encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["DATAROBOT_ENDPOINT"] = f"{live_server.url}/api/v2"
    env["DATAROBOT_API_TOKEN"] = "dev-token"
    with no_faults_armed():
        result = subprocess.run(
            [sys.executable, str(script)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "event RUN_STARTED"
    assert "event RUN_FINISHED" in lines
    assert lines[-2:] == ["user Hello! complete", "assistant You said: Hello! complete"]


async def test_the_extension_point_examples_work_together() -> None:
    setup, dispatch = (
        _python_blocks(_section("## Extension points"))[0],
        _python_blocks(_section("### 1. The event-dispatch table"))[0],
    )
    (category,) = _python_blocks(_section("### 2. Category handlers"))
    (hooks,) = _python_blocks(_section("### 3. Build hooks"))
    namespace: dict[str, Any] = {"__name__": "chat_history_docs"}
    code = compile(
        "\n".join([setup, dispatch, category, hooks]), str(PAGE), "exec", dont_inherit=True
    )
    exec(code, namespace)

    chat_repo, message_repo = namespace["chat_repo"], namespace["message_repo"]
    inner = ScriptedAgent(
        RS(),
        TMS("m1"),
        TMC("m1", "line one\r\nline two"),
        CustomEvent(name="citation", value="doi:10.1000/1"),
        TME("m1"),
        RF(),
    )
    user = uuid4()
    agent_class = namespace["ResearchStorageAgent"]
    async with StreamPersistenceManager(
        lambda: agent_class("assistant", user, chat_repo, message_repo, inner)
    ) as manager:
        handle = await manager.run(run_input())
        forwarded = [event async for event in handle.events()]
        await handle.wait()

    assert forwarded[2].delta == "line one\r\nline two", "the client gets the original event"
    chat = await chat_repo.get_chat_by_thread_id(user, "t1")
    user_message, answer = await message_repo.get_chat_messages(chat.chat_uuid)
    assert type(answer).__name__ == "ResearchMessage"
    assert answer.content == "line one\nline two"
    assert answer.team == "research"
    assert answer.citations == ["doi:10.1000/1"]
    assert answer.finished_at is not None
    assert user_message.team is None
