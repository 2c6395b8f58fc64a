"""The cross-owner matrix for the branch, fork, export and import routes, on every store.

The stack, stores and identities are ``test_owners``'s. An owner (user A everywhere, anonymous
visitor 1 on the stores that serve visitors) has a thread with a secret in its prompt and
title, a regenerated answer (a second branch: every store here keeps branches, or cuts the
thread there) and an upload; every other identity tries to fork it, export it (JSON and
Markdown), switch its branch, and import a document quoting the owner's upload. No byte of the
secret may leak; each answer on the owner's ids must be byte-identical to the answer on ids
that never existed; the owner's export must read the same afterwards.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import httpx
import pytest

from django_pydantic_agent.agui.runs import RunCoordinator
from tests.agui.conftest import run_body, sse_events
from tests.reliability.test_owners import (  # noqa: F401 - fixtures
    SECRETS,
    SERVES_ANONYMOUS,
    Answer,
    _client,
    alice,
    bob,
    stack,
)

pytestmark = [pytest.mark.reliability, pytest.mark.django_db(transaction=True)]

#: (status from a store that serves the identity, from one that refuses it).
_EXPECTED = {
    "fork": (404, 403),
    "export json": (404, 403),
    "export markdown": (404, 403),
    "switch branch": (404, 403),
    "import quoting the owner's upload": (400, 403),
}


async def _create(http: httpx.AsyncClient, store: str, owner: str) -> dict[str, str]:
    secret = SECRETS[owner]
    tid, run = f"{store}-{owner}-tree", f"run-{owner}-tree"
    done = await http.post(f"/{store}/", json=run_body(thread_id=tid, run_id=run, text=secret))
    assert sse_events(done.text)[-1]["type"] == "RUN_FINISHED", done.text
    await RunCoordinator.wait_for_all_runs()
    renamed = await http.patch(f"/{store}/threads/{tid}/", json={"title": f"Title {secret}"})
    assert renamed.status_code == 200
    first = (await http.get(f"/{store}/threads/{tid}/")).json()["messages"][0]
    again = run_body(thread_id=tid, run_id=f"{run}-again", text=secret)
    again["messages"] = [{"id": first["id"], "role": "user", "content": first["content"]}]
    regenerated = await http.post(f"/{store}/", json=again)
    assert sse_events(regenerated.text)[-1]["type"] == "RUN_FINISHED", regenerated.text
    await RunCoordinator.wait_for_all_runs()
    upload = await http.post(
        f"/{store}/attachments/",
        files={"file": (f"{secret}.txt", f"bytes of {secret}".encode(), "text/plain")},
    )
    assert upload.status_code == 201, upload.text
    return {"thread": tid, "message": first["id"], "attachment": upload.json()["id"]}


def _probes(store: str, owned: dict[str, str]) -> list[tuple[str, str, str, str, Any]]:
    nope = f"never-{uuid.uuid4().hex[:8]}"
    base, gone = f"/{store}/threads/{owned['thread']}", f"/{store}/threads/{nope}"
    fork = {"messageId": owned["message"]}
    switch = {"activeMessageId": owned["message"]}
    return [
        ("fork", "POST", f"{base}/fork/", f"{gone}/fork/", fork),
        ("export json", "GET", f"{base}/export/", f"{gone}/export/", None),
        (
            "export markdown",
            "GET",
            f"{base}/export/?format=markdown",
            f"{gone}/export/?format=markdown",
            None,
        ),
        ("switch branch", "PATCH", f"{base}/", f"{gone}/", switch),
    ]


async def test_no_identity_forks_exports_switches_or_imports_another_owners_thread(
    stack: Any,  # noqa: F811 - test_owners' fixtures
    alice: Any,  # noqa: F811
    bob: Any,  # noqa: F811
) -> None:
    served, _ = stack
    clients = {
        "user-a": await _client(served, alice),
        "user-b": await _client(served, bob),
        "anonymous-1": await _client(served),
        "anonymous-2": await _client(served),
    }
    for name in ("anonymous-1", "anonymous-2"):  # a real session of their own
        own = await clients[name].post(
            "/session/attachments/", files={"file": ("mine.txt", name.encode(), "text/plain")}
        )
        assert own.status_code == 201
    problems: list[str] = []
    cells = leaks = mismatches = 0
    try:
        for owner in ("user-a", "anonymous-1"):
            secret = SECRETS[owner]
            stores = [
                s
                for s in ("session", "default", "scoped", "memory")
                if owner == "user-a" or SERVES_ANONYMOUS[s]
            ]
            mine = clients[owner]
            owned = {store: await _create(mine, store, owner) for store in stores}
            before = {
                store: (await mine.get(f"/{store}/threads/{owned[store]['thread']}/export/")).json()
                for store in stores
            }
            for store in stores:
                assert secret in json.dumps(before[store])
            for store in stores:
                document = copy.deepcopy(before[store])
                document["messages"][0].setdefault("wire", [{}])
                holder = document["messages"][0]["wire"][0]
                holder["attachments"] = [{"id": owned[store]["attachment"]}]
                for identity, http in clients.items():
                    if identity == owner:
                        continue
                    served_here = SERVES_ANONYMOUS[store] or identity.startswith("user-")
                    for route, method, url, missing_url, payload in _probes(store, owned[store]):
                        answer = Answer.of(await http.request(method, url, json=payload))
                        missing = Answer.of(await http.request(method, missing_url, json=payload))
                        cells += 1
                        expected = _EXPECTED[route][0 if served_here else 1]
                        if answer.leaks(secret):
                            leaks += 1
                            problems.append(f"LEAK {store} {identity} {route}")
                        if answer.status != expected:
                            problems.append(
                                f"{store} {identity} {route}: {answer.status}, expected "
                                f"{expected}: {answer.body[:200]!r}"
                            )
                        if answer != missing:
                            mismatches += 1
                            problems.append(f"{store} {identity} {route}: {answer} != {missing}")
                    imported = Answer.of(
                        await http.post(f"/{store}/threads/import/", json=document)
                    )
                    cells += 1
                    expected = _EXPECTED["import quoting the owner's upload"][
                        0 if served_here else 1
                    ]
                    if imported.status != expected:
                        problems.append(
                            f"{store} {identity} import: {imported.status}: {imported.body[:300]!r}"
                        )
                    if imported.leaks(secret):
                        leaks += 1
                        problems.append(f"LEAK {store} {identity} import")
            after = {
                store: (await mine.get(f"/{store}/threads/{owned[store]['thread']}/export/")).json()
                for store in stores
            }
            for store in stores:
                if after[store] != before[store]:
                    problems.append(f"{owner}'s thread on {store} changed")
    finally:
        for http in clients.values():
            await http.aclose()
    print(
        f"FIGURE branch routes cross-owner: {cells} cells, leaks={leaks}, "
        f"not-yours != missing: {mismatches}"
    )
    assert problems == []
