"""Fuzzing the branch, fork, export and import routes (the servers and checks of ``test_fuzz``).

Hypothesis drives fork bodies and thread ids, ``activeMessageId`` bodies, ``?format=`` values
and import documents (real exports with one part replaced by anything, and anything at all).
For every example: no 5xx, every error a JSON sentence, nothing logged at ``ERROR`` or with a
traceback; an accepted import is a thread of the caller that loads.
"""

# ruff: noqa: F811 - pytest passes test_fuzz's fixtures in by name
from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from tests.agui.conftest import run_body
from tests.reliability.test_fuzz import (  # noqa: F401 - the fixtures
    _check,
    _encode,
    _post_run,
    _segment,
    hostile_text,
    http,
    ids,
    json_values,
    quiet_caplog,
)
from tests.reliability.test_owners import _client, alice, stack  # noqa: F401 - fixtures

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

EXAMPLES = {
    "fork": 150,
    "switch": 150,
    "export": 100,
    "import": 200,
    "session switch": 100,
    "session import": 150,
    "memory fork": 60,
    "memory switch": 60,
    "memory import": 100,
}
TALLY: Counter[str] = Counter()
_SETUP: dict[str, Any] = {}


def _fuzz(route: str) -> Any:
    return hypothesis_settings(
        max_examples=EXAMPLES[route],
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


async def _thread(http: httpx.AsyncClient, store: str) -> dict[str, Any]:
    """A thread with a regenerated answer, and its export (made once per test)."""
    created = await _post_run(http, store, _encode(run_body(thread_id="tree")))
    assert created.status_code == 200
    first = (await http.get(f"/{store}/threads/tree/")).json()["messages"][0]
    again = run_body(thread_id="tree", run_id="again")
    again["messages"] = [{"id": first["id"], "role": "user", "content": first["content"]}]
    assert (await _post_run(http, store, _encode(again))).status_code == 200
    exported = await http.get(f"/{store}/threads/tree/export/")
    assert exported.status_code == 200
    assert len(exported.json()["messages"]) == 3  # both answers: the branch was kept
    return {"message": first["id"], "document": exported.json()}


async def _setup(http: httpx.AsyncClient, key: str, store: str = "default") -> dict[str, Any]:
    if TALLY[key] == 0:
        _SETUP[key] = await _thread(http, store)
    TALLY[key] += 1
    return _SETUP[key]


@_fuzz("fork")
@given(thread=ids, payload=st.fixed_dictionaries({"messageId": ids | json_values}) | json_values)
@example(thread="tree", payload={"messageId": "user-run-1"})
async def test_fork_bodies(
    http: httpx.AsyncClient, quiet_caplog: pytest.LogCaptureFixture, thread: str, payload: Any
) -> None:
    await _setup(http, "fork")
    await _fork(http, quiet_caplog, "default", thread, payload)


async def _fork(
    http: httpx.AsyncClient,
    quiet_caplog: pytest.LogCaptureFixture,
    mount: str,
    thread: str,
    payload: Any,
) -> None:
    """POST ``payload`` to the mount's fork route of ``thread``; an accepted fork must read."""
    response = await http.post(
        f"/{mount}/threads/{_segment(thread)}/fork/",
        content=_encode(payload),
        headers={"Content-Type": "application/json"},
    )
    if response.status_code == 404 and "json" not in response.headers.get("content-type", ""):
        return  # Django's own 404: the id decodes to a path no route matches
    _check("fork", response, quiet_caplog)
    if response.status_code == 201:
        TALLY[f"{mount} fork accepted"] += 1
        new = response.json()["threadId"]
        assert (await http.get(f"/{mount}/threads/{new}/")).status_code == 200


@_fuzz("switch")
@given(payload=st.fixed_dictionaries({"activeMessageId": ids | json_values}) | json_values)
async def test_branch_switch_bodies(
    http: httpx.AsyncClient, quiet_caplog: pytest.LogCaptureFixture, payload: Any
) -> None:
    await _setup(http, "switch")
    assert await _switch(http, quiet_caplog, "default", payload)


async def _switch(
    http: httpx.AsyncClient, quiet_caplog: pytest.LogCaptureFixture, mount: str, payload: Any
) -> list[Any]:
    """PATCH ``payload`` to the mount's thread ``tree``; the thread must still read (its
    messages)."""
    response = await http.patch(
        f"/{mount}/threads/tree/",
        content=_encode(payload),
        headers={"Content-Type": "application/json"},
    )
    _check("switch", response, quiet_caplog)
    state = await http.get(f"/{mount}/threads/tree/")
    assert state.status_code == 200
    messages: list[Any] = state.json()["messages"]
    return messages


@_fuzz("export")
@given(thread=ids, kind=hostile_text | st.sampled_from(["json", "markdown", "JSON", ""]))
async def test_export_formats(
    http: httpx.AsyncClient, quiet_caplog: pytest.LogCaptureFixture, thread: str, kind: str
) -> None:
    await _setup(http, "export")
    response = await http.get(
        f"/default/threads/{_segment(thread)}/export/",
        params={"format": kind.encode("utf-8", "surrogatepass").decode("utf-8", "replace")},
    )
    if response.status_code == 404 and "json" not in response.headers.get("content-type", ""):
        return
    _check("export", response, quiet_caplog)


_PATHS = [
    ("title",),
    ("messages",),
    ("messages", 0),
    ("messages", 0, "parent"),
    ("messages", 0, "active"),
    ("messages", 0, "record"),
    ("messages", 0, "record", "role"),
    ("messages", 0, "record", "content"),
    ("messages", 0, "record", "tool_calls"),
    ("messages", 0, "record", "wire_extra"),
    ("messages", 0, "wire"),
    ("messages", 1, "parent"),
    ("messages", 1, "record", "status"),
    ("messages", 1, "record", "reasonings"),
    ("runs",),
    ("summaries",),
    ("version",),
]


def _replaced(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> Any:
    changed = copy.deepcopy(document)
    holder: Any = changed
    try:
        for part in path[:-1]:
            holder = holder[part]
        holder[path[-1]] = value
    except (KeyError, IndexError, TypeError):
        return changed
    return changed


@_fuzz("import")
@example(mutation=(("title",), "Imported"), anything=None)
@example(mutation=(("messages", 1, "record", "status"), "active"), anything=None)
@given(
    mutation=st.tuples(st.sampled_from(_PATHS), json_values | hostile_text) | st.none(),
    anything=json_values,
)
async def test_import_documents(
    http: httpx.AsyncClient,
    quiet_caplog: pytest.LogCaptureFixture,
    mutation: tuple[tuple[Any, ...], Any] | None,
    anything: Any,
) -> None:
    setup = await _setup(http, "import")
    payload = anything if mutation is None else _replaced(setup["document"], *mutation)
    await _import(http, quiet_caplog, "default", payload)


async def _import(
    http: httpx.AsyncClient, quiet_caplog: pytest.LogCaptureFixture, mount: str, payload: Any
) -> str | None:
    """POST ``payload`` to the mount's import route; an accepted one must read back (its id)."""
    response = await http.post(
        f"/{mount}/threads/import/",
        content=_encode(payload),
        headers={"Content-Type": "application/json"},
    )
    _check("import", response, quiet_caplog)
    if response.status_code != 201:
        return None
    TALLY[f"{mount} import accepted"] += 1
    new: str = response.json()["threadId"]
    loaded = await http.get(f"/{mount}/threads/{new}/")
    _check("import", loaded, quiet_caplog)
    assert loaded.status_code == 200
    return new


@_fuzz("session switch")
@given(payload=st.fixed_dictionaries({"activeMessageId": ids | json_values}) | json_values)
async def test_session_branch_switch_bodies(
    http: httpx.AsyncClient, quiet_caplog: pytest.LogCaptureFixture, payload: Any
) -> None:
    """The session store keeps branches inside its messages: a switch to anything leaves it
    readable, with one answer shown."""
    await _setup(http, "session switch", "session")
    assert len(await _switch(http, quiet_caplog, "session", payload)) == 2


@_fuzz("session import")
@example(mutation=(("messages", 0, "wire"), [{"id": "x", "role": "user"}]), anything=None)
@example(mutation=(("messages", 2, "parent"), 0), anything=None)
@given(
    mutation=st.tuples(st.sampled_from(_PATHS), json_values | hostile_text) | st.none(),
    anything=json_values,
)
async def test_session_import_documents(
    http: httpx.AsyncClient,
    quiet_caplog: pytest.LogCaptureFixture,
    mutation: tuple[tuple[Any, ...], Any] | None,
    anything: Any,
) -> None:
    """Imports into the session store, which makes every branch again from the document."""
    setup = await _setup(http, "session import", "session")
    payload = anything if mutation is None else _replaced(setup["document"], *mutation)
    new = await _import(http, quiet_caplog, "session", payload)
    if new is not None:
        # The session holds at most max_threads: make room for the next example.
        assert (await http.delete(f"/session/threads/{new}/")).status_code == 204


@_fuzz("memory fork")
@given(thread=ids, payload=st.fixed_dictionaries({"messageId": ids | json_values}) | json_values)
@example(thread="tree", payload={"messageId": "user-run-1"})
async def test_memory_service_fork_bodies(
    stack: Any, alice: Any, quiet_caplog: pytest.LogCaptureFixture, thread: str, payload: Any
) -> None:
    served, _ = stack
    async with await _client(served, alice) as http:
        await _setup(http, "memory fork", "memory")
        await _fork(http, quiet_caplog, "memory", thread, payload)


@_fuzz("memory switch")
@given(payload=st.fixed_dictionaries({"activeMessageId": ids | json_values}) | json_values)
async def test_memory_service_branch_switch_bodies(
    stack: Any, alice: Any, quiet_caplog: pytest.LogCaptureFixture, payload: Any
) -> None:
    """The Memory Service keeps branches as marker events: a switch to anything appends none
    it should not, and the thread reads with one answer shown."""
    served, _ = stack
    async with await _client(served, alice) as http:
        await _setup(http, "memory switch", "memory")
        assert len(await _switch(http, quiet_caplog, "memory", payload)) == 2


@_fuzz("memory import")
@example(mutation=(("messages", 2, "parent"), 0), anything=None)
@given(
    mutation=st.tuples(st.sampled_from(_PATHS), json_values | hostile_text) | st.none(),
    anything=json_values,
)
async def test_memory_service_import_documents(
    stack: Any,
    alice: Any,
    quiet_caplog: pytest.LogCaptureFixture,
    mutation: tuple[tuple[Any, ...], Any] | None,
    anything: Any,
) -> None:
    """Imports into the Memory Service, which replays every branch as events."""
    served, _ = stack
    async with await _client(served, alice) as http:
        setup = await _setup(http, "memory import", "memory")
        payload = anything if mutation is None else _replaced(setup["document"], *mutation)
        await _import(http, quiet_caplog, "memory", payload)


def test_figure() -> None:
    """Print what the fuzzing tests above ran."""
    print(f"FIGURE fuzzing branch routes: {sum(TALLY.values())} examples ({dict(TALLY)})")
