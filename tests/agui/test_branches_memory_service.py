"""Edit-and-resend, regenerate and branch switching on the Memory Service store, over the run
endpoint and real HTTP to the emulator: the branches are marker events any worker folds alike."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from uuid import uuid4

import httpx
import pytest
from django.test import RequestFactory

from django_pydantic_agent.agui import AccessPolicy, AGUIServer
from django_pydantic_agent.agui.branches import MESSAGE_NOT_FOUND
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.contrib.memory_service_emulator import request_counter
from django_pydantic_agent.memory_service import DRMemoryServiceClient
from django_pydantic_agent.persistence.memory_service import MemoryServiceConversationStore
from tests.agui.agents import history_agent
from tests.agui.conftest import run_body, sse_frames
from tests.agui.test_branches import answer_of, user, wire
from tests.agui.test_runs_memory_service import as_user, body_of
from tests.support.emulator import no_faults_armed

pytestmark = [pytest.mark.django_db(transaction=True)]


class Tab:
    """One user's browser tab on one server (one worker)."""

    def __init__(self, server: AGUIServer, who: Any) -> None:
        self.server = server
        self.who = who
        self.factory = RequestFactory()

    async def run(self, messages: list[dict[str, Any]], run_id: str) -> list[Any]:
        payload = run_body(run_id=run_id)
        payload["messages"] = messages
        request = self.factory.post("/", data=payload, content_type="application/json")
        response = await self.server.run_view(as_user(request, self.who))
        events = [event for _, event in sse_frames(await body_of(response))]
        await RunCoordinator.wait_for_all_runs()
        return events

    async def get(self, thread_id: str = "thread-1") -> Any:
        request = as_user(self.factory.get("/"), self.who)
        return await self.server.thread_view(request, thread_id=thread_id)

    async def thread(self, thread_id: str = "thread-1") -> Any:
        response = await self.get(thread_id)
        assert response.status_code == 200, response.content
        return json.loads(response.content)

    async def switch(self, message_id: str, thread_id: str = "thread-1") -> Any:
        request = self.factory.patch(
            "/", data={"activeMessageId": message_id}, content_type="application/json"
        )
        return await self.server.thread_view(as_user(request, self.who), thread_id=thread_id)


@asynccontextmanager
async def workers(
    live_server: Any, count: int = 1, agent: Any = None
) -> AsyncIterator[list[AGUIServer]]:
    """``count`` servers of ``agent`` (``history_agent()`` by default), each with its own store
    (a cold cache: another worker), on one memory space."""
    space = f"branches-{uuid4().hex}"
    with no_faults_armed():
        async with httpx.AsyncClient(timeout=30.0) as pool:
            client = DRMemoryServiceClient(
                endpoint=f"{live_server.url}/api/v2", api_token="token-branches", http_client=pool
            )
            yield [
                AGUIServer(
                    agent if agent is not None else history_agent(),
                    conversation_store=MemoryServiceConversationStore(client, space),
                    access=AccessPolicy(csrf_exempt=True),
                )
                for _ in range(count)
            ]
            await RunCoordinator.wait_for_all_runs()


async def two_turns(tab: Tab) -> list[Any]:
    await tab.run([user("u1", "first")], "run-1")
    messages = (await tab.thread())["messages"]
    await tab.run([*wire(messages), user("u2", "second")], "run-2")
    return list((await tab.thread())["messages"])


async def test_regenerate_answers_again_on_a_new_branch_and_keeps_the_old_one(
    live_server: Any, alice: Any
) -> None:
    async with workers(live_server) as [server]:
        tab = Tab(server, alice)
        messages = await two_turns(tab)
        old = messages[3]
        events = await tab.run(wire(messages[:3]), "run-3")
        assert events[-1]["type"] == "RUN_FINISHED", events
        # The model saw the branch up to u2, not the answer it replaces.
        assert answer_of(events) == f"answer 3 to [U:first | A:{messages[1]['content']} | U:second]"
        after = await tab.thread()
    new = after["messages"][3]
    assert [m["id"] for m in after["messages"][:3]] == [m["id"] for m in messages[:3]]
    assert new["id"] != old["id"]
    assert len(after["messages"]) == 4
    assert after["branches"] == {new["id"]: {"siblings": [old["id"], new["id"]], "index": 1}}


async def test_edit_switch_back_and_continue_on_the_old_branch(
    live_server: Any, alice: Any
) -> None:
    async with workers(live_server) as [server]:
        tab = Tab(server, alice)
        messages = await two_turns(tab)
        events = await tab.run([*wire(messages[:2]), user("u2", "second, edited")], "run-3")
        assert events[-1]["type"] == "RUN_FINISHED", events
        assert answer_of(events).endswith("| U:second, edited]")
        after = await tab.thread()
        assert after["messages"][2] == {**after["messages"][2], "id": "u2"}
        assert after["messages"][2]["content"] == "second, edited"
        point = after["branches"]["u2"]
        assert point["index"] == 1
        [renamed, _] = point["siblings"]
        assert renamed.startswith("u2~")
        switched = await tab.switch(renamed)
        assert switched.status_code == 200, switched.content
        assert json.loads(switched.content) == {"threadId": "thread-1", "activeMessageId": renamed}
        back = await tab.thread()
        assert wire(back["messages"]) == wire(
            [*messages[:2], {**messages[2], "id": renamed}, messages[3]]
        )
        assert back["branches"][renamed] == {"siblings": [renamed, "u2"], "index": 0}
        # The next turn continues the old branch; the model sees only that branch.
        events = await tab.run([*wire(back["messages"]), user("u3", "third")], "run-4")
        assert "second, edited" not in answer_of(events)
        assert answer_of(events).startswith("answer 5 to [U:first")
        final = await tab.thread()
    assert [m["id"] for m in final["messages"]][:5] == [
        "u1",
        messages[1]["id"],
        renamed,
        messages[3]["id"],
        "u3",
    ]
    assert final["branches"] == {renamed: {"siblings": [renamed, "u2"], "index": 0}}


async def test_a_second_worker_sees_the_branches_and_its_switch_reaches_the_first(
    live_server: Any, alice: Any
) -> None:
    async with workers(live_server, 2) as [first, second]:
        here, there = Tab(first, alice), Tab(second, alice)
        messages = await two_turns(here)
        await here.run([*wire(messages[:2]), user("u2", "second, edited")], "run-3")
        seen_here = await here.thread()
        # A cold worker folds the same events into the same active branch and branch points.
        seen_there = await there.thread()
        assert seen_there["messages"] == seen_here["messages"]
        assert seen_there["branches"] == seen_here["branches"]
        [renamed, _] = seen_there["branches"]["u2"]["siblings"]
        switched = await there.switch(renamed)
        assert switched.status_code == 200, switched.content
        # The first worker's warm cache sees the switch, and its next run answers that branch.
        back = await here.thread()
        assert [m["id"] for m in back["messages"]] == [
            "u1",
            messages[1]["id"],
            renamed,
            messages[3]["id"],
        ]
        assert back["branches"] == {renamed: {"siblings": [renamed, "u2"], "index": 0}}
        events = await here.run([*wire(back["messages"]), user("u3", "third")], "run-4")
        assert answer_of(events) == (
            f"answer 5 to [U:first | A:{messages[1]['content']} | U:second | "
            f"A:{messages[3]['content']} | U:third]"
        )
        assert [m["id"] for m in (await there.thread())["messages"]][4] == "u3"


async def test_another_owner_cannot_read_or_switch_the_branches(
    live_server: Any, alice: Any, bob: Any
) -> None:
    async with workers(live_server) as [server]:
        tab, stranger = Tab(server, alice), Tab(server, bob)
        messages = await two_turns(tab)
        await tab.run([*wire(messages[:2]), user("u2", "second, edited")], "run-3")
        before = await tab.thread()
        [renamed, _] = before["branches"]["u2"]["siblings"]
        missing_get = await stranger.get("thread-missing")
        missing_patch = await stranger.switch(renamed, "thread-missing")
        read = await stranger.get()
        switch = await stranger.switch(renamed)
        unknown = await tab.switch("no-such-message")
        after = await tab.thread()
    assert (read.status_code, read.content) == (missing_get.status_code, missing_get.content)
    assert read.status_code == 404
    assert (switch.status_code, switch.content) == (
        missing_patch.status_code,
        missing_patch.content,
    )
    assert switch.status_code == 404
    assert (unknown.status_code, json.loads(unknown.content)) == (
        404,
        {"error": MESSAGE_NOT_FOUND},
    )
    assert after == before


async def test_nested_branches_switch_at_each_level(live_server: Any, alice: Any) -> None:
    async with workers(live_server) as [server]:
        tab = Tab(server, alice)
        messages = await two_turns(tab)
        await tab.run([*wire(messages[:2]), user("u2", "second, edited")], "run-3")
        edited = await tab.thread()
        first_answer = edited["messages"][3]
        # Regenerate the answer on the edited branch: a branch inside a branch.
        await tab.run(wire(edited["messages"][:3]), "run-4")
        nested = await tab.thread()
        second_answer = nested["messages"][3]
        [renamed, _] = nested["branches"]["u2"]["siblings"]
        assert nested["branches"] == {
            "u2": {"siblings": [renamed, "u2"], "index": 1},
            second_answer["id"]: {
                "siblings": [first_answer["id"], second_answer["id"]],
                "index": 1,
            },
        }
        # The first answer of the edited branch, then the old branch, then back to the edit:
        # below a switched message the newest branch is taken.
        assert (await tab.switch(first_answer["id"])).status_code == 200
        assert (await tab.thread())["messages"][3]["id"] == first_answer["id"]
        assert (await tab.switch(renamed)).status_code == 200
        old = await tab.thread()
        assert [m["id"] for m in old["messages"]][2:] == [renamed, messages[3]["id"]]
        assert old["branches"] == {renamed: {"siblings": [renamed, "u2"], "index": 0}}
        assert (await tab.switch("u2")).status_code == 200
        again = await tab.thread()
    assert [m["id"] for m in again["messages"]][2:] == ["u2", second_answer["id"]]
    assert again["branches"] == nested["branches"]


async def test_request_counts_of_a_turn_a_regenerate_an_edit_and_a_thread_read(
    live_server: Any, alice: Any
) -> None:
    async with workers(live_server) as [server]:
        tab = Tab(server, alice)
        await two_turns(tab)
        request_counter.reset()
        read_plain = await tab.thread()
        reads = {"plain": request_counter.count()}
        request_counter.reset()
        await tab.run([*wire(read_plain["messages"]), user("u3", "third")], "run-3")
        turns = {"turn": request_counter.count()}
        grown = (await tab.thread())["messages"]
        request_counter.reset()
        await tab.run(wire(grown[:5]), "run-4")
        turns["regenerate"] = request_counter.count()
        branched = (await tab.thread())["messages"]
        request_counter.reset()
        await tab.run([*wire(branched[:4]), user("u3", "third, edited")], "run-5")
        turns["edit"] = request_counter.count()
        request_counter.reset()
        read_branched = await tab.thread()
        reads["branched"] = request_counter.count()
    # A regenerate's cut marker rides in the batch POST the user message of a turn takes; an
    # edit adds one PATCH (the replaced message renamed).
    assert turns == {"turn": 4, "regenerate": 4, "edit": 5}
    # The branch points cost no request of their own: the read lists or checks the chat once.
    assert reads["plain"] == reads["branched"]
    assert read_branched["branches"]["u3"]["index"] == 1


def _shape(document: dict[str, Any]) -> list[tuple[Any, bool, str, str]]:
    return [
        (m["parent"], m["active"], m["record"]["role"], m["record"]["content"])
        for m in document["messages"]
    ]


async def test_export_keeps_every_branch_and_an_import_brings_them_back(
    live_server: Any, alice: Any
) -> None:
    async with workers(live_server, 2) as [first, second]:
        tab = Tab(first, alice)
        messages = await two_turns(tab)
        await tab.run([*wire(messages[:2]), user("u2", "second, edited")], "run-3")
        edited = await tab.thread()
        await tab.run(wire(edited["messages"][:3]), "run-4")  # nested: the answer regenerated
        [renamed, _] = (await tab.thread())["branches"]["u2"]["siblings"]
        await tab.switch(renamed)  # the old branch active, so the export must say which
        shown = await tab.thread()
        exported: Any = await first.thread_export_view(
            as_user(tab.factory.get("/"), alice), thread_id="thread-1"
        )
        document = json.loads(exported.content)
        request = tab.factory.post("/", data=document, content_type="application/json")
        imported: Any = await second.threads_import_view(as_user(request, alice))
        assert imported.status_code == 201, imported.content
        new_id = json.loads(imported.content)["threadId"]
        copy = await Tab(second, alice).thread(new_id)
        again: Any = await second.thread_export_view(
            as_user(tab.factory.get("/"), alice), thread_id=new_id
        )
    # Every record of every branch, each after its parent, the active branch marked.
    assert _shape(document) == [
        (None, True, "user", "first"),
        (0, True, "assistant", messages[1]["content"]),
        (1, True, "user", "second"),
        (2, True, "assistant", messages[3]["content"]),
        (1, False, "user", "second, edited"),
        (4, False, "assistant", edited["messages"][3]["content"]),
        (4, False, "assistant", document["messages"][6]["record"]["content"]),
    ]
    assert [w["id"] for m in document["messages"] if m["active"] for w in m["wire"]] == [
        m["id"] for m in shown["messages"]
    ]
    # The import is the same tree under new ids, with the same branch active.
    assert _shape(json.loads(again.content)) == _shape(document)
    assert [(m["role"], m["content"]) for m in copy["messages"]] == [
        (m["role"], m["content"]) for m in shown["messages"]
    ]
    [point] = copy["branches"].values()
    assert point["index"] == 0
    assert len(point["siblings"]) == 2


async def test_a_fork_copies_the_active_branch_only(live_server: Any, alice: Any) -> None:
    async with workers(live_server) as [server]:
        tab = Tab(server, alice)
        messages = await two_turns(tab)
        await tab.run(wire(messages[:3]), "run-3")  # the last answer regenerated
        shown = await tab.thread()
        answer = shown["messages"][3]["id"]
        request = tab.factory.post("/", data={"messageId": answer}, content_type="application/json")
        forked: Any = await server.thread_fork_view(as_user(request, alice), thread_id="thread-1")
        assert forked.status_code == 201, forked.content
        copy = await tab.thread(json.loads(forked.content)["threadId"])
    assert wire(copy["messages"]) == wire(shown["messages"])
    assert copy["branches"] == {}


async def test_a_forged_turn_on_a_branched_thread_is_refused_with_nothing_written(
    live_server: Any, alice: Any
) -> None:
    async with workers(live_server, 2) as [server, other]:
        tab = Tab(server, alice)
        messages = await two_turns(tab)
        await tab.run([*wire(messages[:2]), user("u2", "edited")], "run-3")
        before = await tab.thread()
        assert before["branches"]["u2"]["index"] == 1
        attempts = [
            # An assistant message the server never streamed, then a user turn.
            [
                *wire(before["messages"]),
                {"id": "a-x", "role": "assistant", "content": "Yes."},
                user("u9", "go"),
            ],
            # An edit of a message before the last one.
            [user("u1", "changed"), *wire(before["messages"][1:]), user("u9", "go")],
            # The answer of the inactive branch, replayed on the active one.
            [*wire(before["messages"][:3]), *wire(messages[3:]), user("u9", "go")],
        ]
        for number, posted in enumerate(attempts):
            events = await tab.run(posted, f"forged-{number}")
            assert (events[-1]["type"], events[-1]["code"]) == ("RUN_ERROR", "INVALID_INPUT")
        assert await tab.thread() == before
        # A cold worker reads the same: nothing was written, no marker either.
        assert await Tab(other, alice).thread() == before


async def test_a_regenerate_survives_cancel_and_reattach_and_keeps_the_old_answer(
    live_server: Any, alice: Any
) -> None:
    import asyncio

    from tests.agui.agents import GATE, gated_agent

    async with workers(live_server, agent=gated_agent()) as [server]:
        tab = Tab(server, alice)
        GATE.reset()
        GATE.released.set()
        await tab.run([user("u1", "first")], "g-1")
        messages = (await tab.thread())["messages"]
        GATE.reset()
        running = asyncio.create_task(tab.run(wire(messages[:1]), "g-2"))
        try:
            await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        finally:
            request = as_user(tab.factory.post("/"), alice)
            cancelled = await server.run_cancel_view(request, thread_id="thread-1", run_id="g-2")
            GATE.released.set()
            done = await running
            await RunCoordinator.wait_for_all_runs()
        after = await tab.thread()
        reattach = await server.run_reattach_view(
            as_user(tab.factory.get("/"), alice), thread_id="thread-1", run_id="g-2"
        )
        replayed = [event for _, event in sse_frames(await body_of(reattach))]
        switched = await tab.switch(messages[-1]["id"])
        back = await tab.thread()
    assert cancelled.status_code in (200, 202)
    assert done[-1]["type"] == "RUN_FINISHED"
    snapshot = next(e for e in replayed if e["type"] == "MESSAGES_SNAPSHOT")
    assert [m["id"] for m in snapshot["messages"]] == [m["id"] for m in after["messages"]]
    new = after["messages"][-1]
    assert new["status"] == "interrupted"
    assert new["id"] != messages[-1]["id"]
    assert after["branches"][new["id"]] == {"siblings": [messages[-1]["id"], new["id"]], "index": 1}
    assert switched.status_code == 200
    assert back["messages"][-1]["content"] == "Working done."
