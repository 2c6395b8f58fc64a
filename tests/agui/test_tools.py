"""``read_attachment``: the model reads what the user attached, and only the user's own files."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.agui.agents import READ_BACK
from tests.agui.conftest import logged_in, run_body, sse_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


async def upload(http: httpx.AsyncClient, name: str, data: bytes, mime: str) -> str:
    response = await http.post("/reader/attachments/", files={"file": (name, data, mime)})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def ask(http: httpx.AsyncClient, attachment_id: str, run_id: str) -> list[Any]:
    body = run_body(run_id=run_id, thread_id=f"t-{run_id}", text=f"Read {attachment_id}")
    response = await http.post("/reader/", json=body)
    return sse_events(response.text)


async def test_the_model_reads_text_as_text_and_bytes_as_a_file_part(alice: Any) -> None:
    READ_BACK.clear()
    async with await logged_in(alice) as http:
        notes = await upload(http, "notes.txt", "coffee ☕\n".encode(), "text/plain")
        picture = await upload(http, "dot.png", PNG, "image/png")
        first = await ask(http, notes, "r1")
        second = await ask(http, picture, "r2")
    assert first[-1]["type"] == second[-1]["type"] == "RUN_FINISHED"
    assert "coffee ☕\n" in READ_BACK
    assert ("image/png", PNG) in READ_BACK


async def test_another_owners_attachment_reads_like_a_missing_one(alice: Any, bob: Any) -> None:
    READ_BACK.clear()
    async with await logged_in(alice) as mine, await logged_in(bob) as theirs:
        secret = await upload(mine, "secret.txt", b"alice's secret", "text/plain")
        events = await ask(theirs, secret, "r3")
        missing = await ask(theirs, "no-such-file", "r4")
    assert events[-1]["type"] == missing[-1]["type"] == "RUN_FINISHED"
    assert "alice's secret" not in str(READ_BACK)
    [refused, absent] = READ_BACK
    assert f"There is no attachment {secret!r}" in str(refused)
    assert "There is no attachment 'no-such-file'" in str(absent)


async def test_read_attachment_without_an_attachment_store_says_what_to_do() -> None:
    from types import SimpleNamespace

    from django_pydantic_agent.agui.tools import read_attachment

    ctx: Any = SimpleNamespace(deps=SimpleNamespace(request=None, attachment_store=None))
    with pytest.raises(RuntimeError, match="attachment_toolset"):
        await read_attachment(ctx, "a1")


async def test_the_toolset_reads_through_the_store_it_is_bound_to(alice: Any) -> None:
    from types import SimpleNamespace

    from django.test import RequestFactory
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from django_pydantic_agent.agui.tools import MAX_ATTACHMENT_READ_BYTES, attachment_toolset
    from django_pydantic_agent.contrib.store.stores import DefaultAttachmentStore
    from tests.agui.agents import _reader

    async with await logged_in(alice) as http:
        notes = await upload(http, "notes.txt", b"tea", "text/plain")
    request = RequestFactory().get("/")
    request.user = alice
    READ_BACK.clear()
    agent = Agent(
        FunctionModel(stream_function=_reader),
        toolsets=[attachment_toolset(DefaultAttachmentStore())],
    )
    async with agent.run_stream(f"Read {notes}", deps=SimpleNamespace(request=request)) as run:
        await run.get_output()
    assert READ_BACK == ["tea"]
    assert MAX_ATTACHMENT_READ_BYTES == 10 * 1024 * 1024
