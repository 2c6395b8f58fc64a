"""The thread routes, and the run endpoint's save to a persisting store."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import pytest
from ag_ui_validate.pytest_plugin import assert_valid_agui

from django_pydantic_agent.agui import REDACTED_RUN_ERROR, AccessPolicy, RunOptions
from django_pydantic_agent.agui.runs import RunCoordinator
from django_pydantic_agent.persistence import AnonymousOperationError, StoreError, StoreLimitError
from tests.agui.agents import PARTIAL_ANSWER
from tests.agui.conftest import (
    drive_until_disconnect,
    logged_in,
    run_body,
    session_id,
    sse_events,
    streamed_events,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.agui.urls")]


#: The keys of a stored message an AG-UI client reads; the rest is the store's bookkeeping.
_WIRE_KEYS = ("id", "role", "content", "toolCalls", "toolCallId")


def essentials(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored messages as an AG-UI client sees them (bookkeeping keys left out)."""
    return [{key: m[key] for key in _WIRE_KEYS if key in m} for m in messages]


async def run(http: httpx.AsyncClient, prefix: str = "/stored/", **kwargs: Any) -> list[Any]:
    response = await http.post(prefix, json=run_body(**kwargs))
    assert response.status_code == 200, response.text
    return sse_events(response.text)


async def test_a_run_is_saved_with_the_streamed_message_ids(alice: Any) -> None:
    async with await logged_in(alice) as http:
        events = await run(http)
        response = await http.get("/stored/threads/thread-1/")
    assert response.status_code == 200
    body = response.json()
    assert body["threadId"] == "thread-1"
    messages = body["messages"]
    assert essentials(messages)[0] == {
        "id": "user-run-1",
        "role": "user",
        "content": "What is 2 + 3?",
    }
    assert {m["status"] for m in messages} == {"complete"}
    assert body["activeRun"] is None
    roles = [m["role"] for m in messages]
    assert roles == ["user", "reasoning", "assistant", "tool", "assistant"]
    tool_call = messages[2]["toolCalls"][0]
    assert tool_call["id"] == "call-add"
    # The arguments as streamed.
    assert tool_call["function"] == {"name": "add", "arguments": '{"a": 2, "b": 3}'}
    assert messages[3]["toolCallId"] == "call-add"
    assert messages[4]["content"] == "The sum is 5."
    # Every stored id is the one the client saw in the stream, so a reload matches.
    streamed = {
        e.get("messageId") for e in events if e["type"].endswith("_START") or "RESULT" in e["type"]
    }
    for message in messages[1:]:
        assert message["id"] in streamed
    # Stored in wire shape: camelCase, no nulls.
    assert "tool_calls" not in messages[2]
    assert all(value is not None for m in messages for value in m.values())


async def test_thread_list_shows_title_preview_and_no_owner(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await run(http, thread_id="t-a", run_id="r-a", text="First question")
        await run(http, thread_id="t-b", run_id="r-b", text="Second question")
        response = await http.get("/stored/threads/")
    assert response.status_code == 200
    threads = response.json()["threads"]
    assert [t["threadId"] for t in threads] == ["t-b", "t-a"]
    assert threads[0]["title"] == "Second question"
    assert threads[0]["preview"] == "The sum is 5."
    assert threads[0]["updatedAt"]
    assert set(threads[0]) == {"threadId", "title", "preview", "updatedAt", "archived"}
    assert "owner" not in response.text


async def test_thread_list_limit_is_validated_and_capped(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await run(http, thread_id="t-a", run_id="r-a")
        await run(http, thread_id="t-b", run_id="r-b")
        one = await http.get("/stored/threads/?limit=1")
        both = await http.get("/stored/threads/?limit=10")
        capped = await http.get("/capped/threads/?limit=10")
        capped_default = await http.get("/capped/threads/")
        for bad in ("abc", "0", "-3", "1.5"):
            refused = await http.get(f"/stored/threads/?limit={bad}")
            assert refused.status_code == 400
            assert "limit must be a positive integer" in refused.json()["error"]
    assert len(one.json()["threads"]) == 1
    assert len(both.json()["threads"]) == 2
    assert len(capped.json()["threads"]) == 1
    assert len(capped_default.json()["threads"]) == 1


async def test_rename_validates_and_renames(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await run(http)
        for payload in (b"not json", b"[]", b'{"title": ""}', b'{"title": "   "}', b'{"title": 5}'):
            refused = await http.patch(
                "/stored/threads/thread-1/",
                content=payload,
                headers={"Content-Type": "application/json"},
            )
            assert refused.status_code == 400
            assert '"title"' in refused.json()["error"]
        too_long = await http.patch("/stored/threads/thread-1/", json={"title": "x" * 201})
        assert too_long.status_code == 400
        assert "the limit is 200" in too_long.json()["error"]
        missing = await http.patch("/stored/threads/nope/", json={"title": "New"})
        assert missing.status_code == 404
        renamed = await http.patch("/stored/threads/thread-1/", json={"title": "  Trip \n plans "})
        listing = await http.get("/stored/threads/")
    assert renamed.status_code == 200
    assert renamed.json() == {"threadId": "thread-1", "title": "Trip plans"}
    assert listing.json()["threads"][0]["title"] == "Trip plans"


async def test_delete_is_idempotent(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await run(http)
        first = await http.delete("/stored/threads/thread-1/")
        second = await http.delete("/stored/threads/thread-1/")
        gone = await http.get("/stored/threads/thread-1/")
    assert first.status_code == second.status_code == 204
    assert gone.status_code == 404
    assert gone.json() == {"error": "No such thread."}


async def test_another_user_cannot_list_read_rename_or_delete(alice: Any, bob: Any) -> None:
    async with await logged_in(alice) as http:
        await run(http)
    async with await logged_in(bob) as intruder:
        listing = await intruder.get("/stored/threads/")
        read = await intruder.get("/stored/threads/thread-1/")
        missing = await intruder.get("/stored/threads/never-existed/")
        rename = await intruder.patch("/stored/threads/thread-1/", json={"title": "pwned"})
        delete = await intruder.delete("/stored/threads/thread-1/")
    assert listing.json() == {"threads": [], "nextCursor": None}
    # A cross-owner id is indistinguishable from a missing one.
    assert (read.status_code, read.json()) == (missing.status_code, missing.json())
    assert read.status_code == 404
    assert rename.status_code == 404
    assert delete.status_code == 204
    async with await logged_in(alice) as http:
        still_there = await http.get("/stored/threads/thread-1/")
        listing = await http.get("/stored/threads/")
    assert still_there.status_code == 200
    assert listing.json()["threads"][0]["title"] == "What is 2 + 3?"


async def test_thread_routes_authenticate_before_method(
    client: httpx.AsyncClient, alice: Any
) -> None:
    assert (await client.get("/stored/threads/")).status_code == 401
    assert (await client.put("/stored/threads/x/")).status_code == 401
    async with await logged_in(alice) as http:
        post = await http.post("/stored/threads/")
        put = await http.put("/stored/threads/x/")
    assert post.status_code == 405
    assert post.headers["allow"] == "GET"
    assert put.status_code == 405
    assert put.headers["allow"] == "DELETE, GET, PATCH"


async def test_thread_routes_are_not_mounted_for_a_null_store(alice: Any) -> None:
    async with await logged_in(alice) as http:
        assert (await http.get("/agent/threads/")).status_code == 404
        assert (await http.get("/agent/attachments/x/")).status_code == 404


def browser() -> httpx.AsyncClient:
    from tests.agui.conftest import asgi_app

    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=asgi_app()), base_url="http://testserver"
    )


async def test_anonymous_browsers_get_their_own_threads() -> None:
    async with browser() as first, browser() as second:
        await run(first, "/anon/")
        # The session was created before streaming, so its cookie came with the headers.
        assert first.cookies.get("sessionid")
        mine = await first.get("/anon/threads/")
        theirs = await second.get("/anon/threads/")
        read = await second.get("/anon/threads/thread-1/")
        rename = await second.patch("/anon/threads/thread-1/", json={"title": "x"})
        await second.delete("/anon/threads/thread-1/")
        still = await first.get("/anon/threads/thread-1/")
    assert [t["threadId"] for t in mine.json()["threads"]] == ["thread-1"]
    assert theirs.json() == {"threads": [], "nextCursor": None}
    assert read.status_code == 404
    assert rename.status_code == 404
    assert still.status_code == 200


async def test_store_refusing_anonymous_callers_is_403_everywhere(
    client: httpx.AsyncClient,
) -> None:
    run_response = await client.post("/refusing/", json=run_body())
    assert run_response.status_code == 403
    assert "anonymous" in run_response.json()["error"]
    for response in (
        await client.get("/refusing/threads/"),
        await client.get("/refusing/threads/t/"),
        await client.patch("/refusing/threads/t/", json={"title": "x"}),
        await client.delete("/refusing/threads/t/"),
    ):
        assert response.status_code == 403
        assert "anonymous" in response.json()["error"]


async def test_a_failed_run_saves_the_users_turn_and_the_partial_answer(alice: Any) -> None:
    async with await logged_in(alice) as http:
        events = await run(http, "/failing-stored/", text="Please keep this")
        response = await http.get("/failing-stored/threads/thread-1/")
    assert events[-1]["type"] == "RUN_ERROR"
    [answer_id] = [e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_START"]
    assert essentials(response.json()["messages"]) == [
        {"id": "user-run-1", "role": "user", "content": "Please keep this"},
        {"id": answer_id, "role": "assistant", "content": "Partial "},
    ]
    statuses = [m["status"] for m in response.json()["messages"]]
    assert statuses == ["complete", "errored"], "a reloaded page shows the answer as failed"


class ChatsProxy:
    """A store's chat repository, with the methods a test overrides."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def respond_over(
    user: Any, chats: type[ChatsProxy], *, agent: Any = None, **options: Any
) -> Any:
    """The run view's streaming response to ``user``'s run, on a Default store whose chat
    repository is wrapped in ``chats``."""
    from django.http import StreamingHttpResponse
    from django.test import RequestFactory

    from django_pydantic_agent.agui import AGUIServer
    from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
    from tests.agui.agents import text_agent

    class WrappedStore(DefaultConversationStore):
        async def repositories(self, *, request: Any) -> Any:
            inner, messages = await super().repositories(request=request)
            return chats(inner), messages

    async def auser() -> Any:
        return user

    server = AGUIServer(
        agent or text_agent(),
        conversation_store=WrappedStore(),
        access=AccessPolicy(csrf_exempt=True),
        **options,
    )
    request = RequestFactory().post("/", data=run_body(), content_type="application/json")
    request.auser = auser
    request.user = user
    response = await server.run_view(request)
    assert isinstance(response, StreamingHttpResponse)
    return response


async def run_with_failing_save(
    user: Any, error: Exception, *, agent: Any = None, **options: Any
) -> list[dict[str, Any]]:
    """Run a server whose store fails the run's first write with ``error``; return the events."""

    class FailingChats(ChatsProxy):
        async def create_chat(self, chat_data: Any) -> Any:
            raise error

    response = await respond_over(user, FailingChats, agent=agent, **options)
    body = "".join([bytes(chunk).decode() async for chunk in response])
    return sse_events(body)


async def test_a_failed_save_ends_the_stream_with_run_error_and_is_logged(
    alice: Any, caplog: Any
) -> None:
    caplog.set_level(logging.ERROR, logger="django_pydantic_agent.agui")
    events = await run_with_failing_save(alice, OSError("disk full at /var/secret"))
    # The run finished, but it was not saved: the client must not believe it was.
    assert "RUN_FINISHED" not in [e["type"] for e in events]
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == "STORE_FAILED"
    assert "/var/secret" not in events[-1]["message"]
    assert_valid_agui(events)
    [record] = caplog.records
    assert "The agent run 'run-1' on thread 'thread-1' failed" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], OSError)


async def test_a_failed_save_is_exposed_when_asked(alice: Any) -> None:
    events = await run_with_failing_save(
        alice, OSError("disk full"), runs=RunOptions(expose_error_messages=True)
    )
    assert events[-1]["message"] == "disk full"


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (
            StoreLimitError("The session holds max_threads=1 threads."),
            "STORE_LIMIT",
            "max_threads=1",
        ),
        (StoreError("Message text must not contain NUL characters."), "STORE_REFUSED", "NUL"),
        (AnonymousOperationError("anon:secret-key"), "STORE_REFUSED", "anonymous visitors"),
    ],
)
async def test_a_store_refusing_the_save_is_a_run_error_with_its_code(
    error: Exception, code: str, message: str, alice: Any
) -> None:
    events = await run_with_failing_save(alice, error)
    assert events[-1]["type"] == "RUN_ERROR"
    assert events[-1]["code"] == code
    assert message in events[-1]["message"]
    assert "secret-key" not in events[-1]["message"]
    assert_valid_agui(events)


async def test_a_run_over_the_session_thread_limit_ends_with_store_limit() -> None:
    async with browser() as http:
        first = await run(http, "/one-thread/", thread_id="first", run_id="r1")
        second = await run(http, "/one-thread/", thread_id="second", run_id="r2")
        listing = await http.get("/one-thread/threads/")
    assert first[-1]["type"] == "RUN_FINISHED"
    assert second[-1]["type"] == "RUN_ERROR"
    assert second[-1]["code"] == "STORE_LIMIT"
    # The refusal comes at the run's first flush, which can fall while a tool call's arguments
    # stream: a run that errors mid-call ends with the arguments it had (as a cancelled one
    # does in tests/reliability/test_disconnects.py), not always whole JSON.
    assert_valid_agui(second, severity_overrides={"AGUI204": "warning"})
    assert [t["threadId"] for t in listing.json()["threads"]] == ["first"]


async def test_session_store_keeps_a_run_saved_after_streaming() -> None:
    # The predecessor lost these saves: SessionMiddleware had already run when the stream
    # finished. The session store saves explicitly, and the session exists before streaming.
    async with browser() as first, browser() as second:
        events = await run(first, "/session/")
        mine = await first.get("/session/threads/thread-1/")
        listing = await first.get("/session/threads/")
        theirs = await second.get("/session/threads/thread-1/")
    assert events[-1]["type"] == "RUN_FINISHED"
    assert mine.status_code == 200
    assert mine.json()["messages"][0]["role"] == "user"
    assert mine.json()["messages"][-1]["content"] == "The sum is 5."
    assert [t["threadId"] for t in listing.json()["threads"]] == ["thread-1"]
    assert theirs.status_code == 404


async def test_a_rename_over_the_session_limit_is_a_413_and_changes_nothing() -> None:
    async with browser() as http:
        await run(http, "/session/")
        refused = await http.patch("/tight-session/threads/thread-1/", json={"title": "x" * 200})
        listing = await http.get("/session/threads/")
    assert refused.status_code == 413
    assert "max_bytes=300" in refused.json()["error"]
    [thread] = listing.json()["threads"]
    assert thread["title"] != "x" * 200


async def test_withheld_reasoning_is_not_stored_either(alice: Any) -> None:
    async with await logged_in(alice) as http:
        events = await run(http, "/quiet-stored/")
        response = await http.get("/quiet-stored/threads/thread-1/")
    assert not [e for e in events if e["type"].startswith("REASONING")]
    roles = [m["role"] for m in response.json()["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert "Adding two numbers" not in response.text


# Runs that never complete: what the user saw is saved, under the ids they saw it with.

WEATHER_QUESTION = "What's the weather in Oslo?"


def shown(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The ids and texts a client built from ``interrupted_agent``'s stream."""
    reasoning_ids = [e["messageId"] for e in events if e["type"] == "REASONING_MESSAGE_START"]
    [call] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    [result] = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    answer_ids = [
        e["messageId"]
        for e in events
        if e["type"] == "TEXT_MESSAGE_START" and e["messageId"] != call["parentMessageId"]
    ]
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    return {
        "reasoning_ids": reasoning_ids,
        "parent_id": call["parentMessageId"],
        "result_id": result["messageId"],
        "answer_ids": answer_ids,
        "args": args,
    }


def expected_thread(seen: dict[str, Any]) -> list[dict[str, Any]]:
    """What the user saw: question, reasoning if streamed, call, result, partial answer."""
    [answer_id] = seen["answer_ids"]
    return [
        {"id": "user-run-1", "role": "user", "content": WEATHER_QUESTION},
        *[
            {"id": reasoning_id, "role": "reasoning", "content": "Let me look that up."}
            for reasoning_id in seen["reasoning_ids"]
        ],
        {
            "id": seen["parent_id"],
            "role": "assistant",
            "toolCalls": [
                {
                    "id": "call-weather",
                    "type": "function",
                    "function": {"name": "weather", "arguments": seen["args"]},
                }
            ],
        },
        {
            "id": seen["result_id"],
            "role": "tool",
            "content": "Sunny in Oslo",
            "toolCallId": "call-weather",
        },
        {"id": answer_id, "role": "assistant", "content": "".join(PARTIAL_ANSWER)},
    ]


async def thread_after_disconnect(prefix: str, *, until: bytes) -> tuple[list[Any], Any]:
    """Run ``prefix`` until the stream shows ``until``, disconnect, then reload the thread."""
    sent = await drive_until_disconnect(prefix, run_body(text=WEATHER_QUESTION), until=until)
    assert sent[0]["status"] == 200
    # These mounts cancel a run whose client went away (on_disconnect="cancel").
    await RunCoordinator.wait_for_all_runs()
    await RunCoordinator.aclose_all()  # the mount's sweeper, started by its first request
    assert asyncio.all_tasks() == {asyncio.current_task()}
    async with browser() as http:
        http.cookies.set("sessionid", session_id(sent))
        response = await http.get(f"{prefix}threads/thread-1/")
    assert response.status_code == 200
    return streamed_events(sent), response


LAST_WORD = f'"delta":"{PARTIAL_ANSWER[-1]}"'.encode()


@pytest.mark.parametrize("prefix", ["/interrupted/", "/interrupted-session/"])
async def test_a_disconnect_mid_answer_saves_what_the_user_saw(prefix: str, caplog: Any) -> None:
    caplog.set_level(logging.WARNING)
    events, response = await thread_after_disconnect(prefix, until=LAST_WORD)
    # The stream was cut off mid-answer: the answer never ended and the run never finished.
    types = [e["type"] for e in events]
    assert types[-1] == "TEXT_MESSAGE_CONTENT"
    assert "RUN_FINISHED" not in types
    seen = shown(events)
    assert seen["args"] == '{"city": "Oslo"}'
    assert essentials(response.json()["messages"]) == expected_thread(seen)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_disconnect_with_reasoning_withheld_stores_no_reasoning() -> None:
    events, response = await thread_after_disconnect("/interrupted-quiet/", until=LAST_WORD)
    assert not [e for e in events if e["type"].startswith("REASONING")]
    seen = shown(events)
    assert seen["reasoning_ids"] == []
    assert essentials(response.json()["messages"]) == expected_thread(seen)
    assert "Let me look that up" not in response.text


async def test_a_disconnect_mid_tool_arguments_keeps_the_call_as_streamed() -> None:
    events, response = await thread_after_disconnect("/interrupted-args/", until=b"TOOL_CALL_ARGS")
    assert [e["type"] for e in events][-1] == "TOOL_CALL_ARGS"
    [reasoning_id] = [e["messageId"] for e in events if e["type"] == "REASONING_MESSAGE_START"]
    [call] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    messages = response.json()["messages"]
    # The reasoning was seen whole; the call is kept with the arguments that streamed.
    assert essentials(messages)[:3] == [
        {"id": "user-run-1", "role": "user", "content": WEATHER_QUESTION},
        {"id": reasoning_id, "role": "reasoning", "content": "Let me look that up."},
        {
            "id": call["parentMessageId"],
            "role": "assistant",
            "toolCalls": [
                {
                    "id": "call-weather",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": '},
                }
            ],
        },
    ]


async def test_a_disconnect_while_the_tool_runs_saves_the_call_and_the_thread_replays() -> None:
    events, response = await thread_after_disconnect("/interrupted-tool/", until=b"TOOL_CALL_END")
    assert "TOOL_CALL_RESULT" not in [e["type"] for e in events]
    [reasoning_id] = [e["messageId"] for e in events if e["type"] == "REASONING_MESSAGE_START"]
    [call] = [e for e in events if e["type"] == "TOOL_CALL_START"]
    saved = essentials(response.json()["messages"])
    assert saved == [
        {"id": "user-run-1", "role": "user", "content": WEATHER_QUESTION},
        {"id": reasoning_id, "role": "reasoning", "content": "Let me look that up."},
        {
            "id": call["parentMessageId"],
            "role": "assistant",
            "toolCalls": [
                {
                    "id": "call-weather",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
    ]
    # The saved thread, unanswered call included, is a history pydantic-ai runs on from.
    body = run_body(run_id="run-2", text="Try again?")
    body["messages"] = [*saved, *body["messages"]]
    async with browser() as http:
        replay = await http.post("/open/", json=body)
    assert replay.status_code == 200
    assert [e["type"] for e in sse_events(replay.text)][-1] == "RUN_FINISHED"


async def test_a_run_error_mid_answer_saves_what_the_user_saw() -> None:
    async with browser() as http:
        events = await run(http, "/erroring/", text=WEATHER_QUESTION)
        response = await http.get("/erroring/threads/thread-1/")
    assert events[-1] == {
        "type": "RUN_ERROR",
        "message": REDACTED_RUN_ERROR,
        "timestamp": events[-1]["timestamp"],
    }
    assert essentials(response.json()["messages"]) == expected_thread(shown(events))


async def test_a_run_error_mid_tool_arguments_keeps_what_streamed_as_errored() -> None:
    async with browser() as http:
        events = await run(http, "/erroring-args/", text=WEATHER_QUESTION)
        response = await http.get("/erroring-args/threads/thread-1/")
    types = [e["type"] for e in events]
    # pydantic-ai closes the open call before RUN_ERROR, with arguments that are not JSON.
    assert types[-2:] == ["TOOL_CALL_END", "RUN_ERROR"]
    assert "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS") == '{"city": '
    [reasoning_id] = [e["messageId"] for e in events if e["type"] == "REASONING_MESSAGE_START"]
    messages = response.json()["messages"]
    assert essentials(messages)[:2] == [
        {"id": "user-run-1", "role": "user", "content": WEATHER_QUESTION},
        {"id": reasoning_id, "role": "reasoning", "content": "Let me look that up."},
    ]
    assert messages[2]["toolCalls"][0]["function"]["arguments"] == '{"city": '


# Hardening of the thread routes.


def session_rows() -> int:
    from django.contrib.sessions.models import Session

    return Session.objects.count()


async def test_patch_with_deeply_nested_json_is_400(alice: Any) -> None:
    async with await logged_in(alice) as http:
        await run(http)
        response = await http.patch(
            "/stored/threads/thread-1/",
            content=b"[" * 1100 + b"]" * 1100,
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["error"]


async def test_patch_over_django_limit_is_413_json(alice: Any, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    async with await logged_in(alice) as http:
        response = await http.patch("/stored/threads/thread-1/", json={"title": "x" * 500})
    assert response.status_code == 413
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in response.json()["error"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
async def test_patch_must_be_json(content_type: str, alice: Any) -> None:
    async with await logged_in(alice) as http:
        await run(http)
        response = await http.patch(
            "/stored/threads/thread-1/",
            content=b'{"title": "Renamed"}',
            headers={"Content-Type": content_type},
        )
        listing = await http.get("/stored/threads/")
    assert response.status_code == 415
    assert "application/json" in response.json()["error"]
    assert listing.json()["threads"][0]["title"] == "What is 2 + 3?"


@pytest.mark.parametrize(
    "raw_title",
    [b'"a\\u0000b"', b'"\\ud800"', b'"bell\\u0007"', b'"rlo\\u202e"', b'"zero\\u200bwidth"'],
)
async def test_titles_with_control_characters_are_400(raw_title: bytes, alice: Any) -> None:
    async with await logged_in(alice) as http:
        await run(http)
        response = await http.patch(
            "/stored/threads/thread-1/",
            content=b'{"title": ' + raw_title + b"}",
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 400
    error = response.json()["error"]
    # NUL and a lone surrogate are refused as no store can keep them; the rest as unprintable.
    assert "title" in error
    assert any(word in error for word in ("non-printable", "NUL", "unpaired surrogate"))


@pytest.mark.parametrize("segment", ["%00x", "a%0Ab", "%2E%2E", "%2E", "tab%09", "x" * 201])
async def test_thread_ids_outside_the_alphabet_are_404_on_every_route(
    segment: str, alice: Any
) -> None:
    async with await logged_in(alice) as http:
        responses = [
            await http.get(f"/stored/threads/{segment}/"),
            await http.patch(f"/stored/threads/{segment}/", json={"title": "x"}),
            await http.delete(f"/stored/threads/{segment}/"),
        ]
    for response in responses:
        assert response.status_code == 404
        assert response.json() == {"error": "No such thread."}


async def test_every_id_in_the_alphabet_works_on_every_route(alice: Any) -> None:
    from urllib.parse import quote

    async with await logged_in(alice) as http:
        for thread_id in ["a b", "ünï-😀", "a?b#c", "%2F", "x" * 200, "a\\b", "..."]:
            await run(http, thread_id=thread_id, run_id="r")
            segment = quote(thread_id, safe="")
            listed = [t["threadId"] for t in (await http.get("/stored/threads/")).json()["threads"]]
            read = await http.get(f"/stored/threads/{segment}/")
            renamed = await http.patch(f"/stored/threads/{segment}/", json={"title": "T"})
            deleted = await http.delete(f"/stored/threads/{segment}/")
            gone = await http.get(f"/stored/threads/{segment}/")
            assert thread_id in listed
            assert read.status_code == 200, thread_id
            assert read.json()["threadId"] == thread_id
            assert renamed.status_code == 200
            assert deleted.status_code == 204
            assert gone.status_code == 404


async def test_cookieless_reads_create_no_session(client: httpx.AsyncClient) -> None:
    from asgiref.sync import sync_to_async

    before = await sync_to_async(session_rows)()
    refused = [
        await client.get("/refusing/threads/"),
        await client.get("/refusing/threads/t/"),
        await client.patch("/refusing/threads/t/", json={"title": "x"}),
        await client.delete("/refusing/threads/t/"),
        await client.post("/refusing/", json=run_body()),
    ]
    served = {
        "list": await client.get("/anon/threads/"),
        "get": await client.get("/anon/threads/t/"),
        "patch": await client.patch("/anon/threads/t/", json={"title": "x"}),
        "delete": await client.delete("/anon/threads/t/"),
    }
    assert [r.status_code for r in refused] == [403] * 5
    assert served["list"].json() == {"threads": [], "nextCursor": None}
    assert served["get"].status_code == served["patch"].status_code == 404
    assert served["delete"].status_code == 204
    assert await sync_to_async(session_rows)() == before
    assert "sessionid" not in client.cookies


async def test_a_forged_session_cookie_reads_nothing_and_creates_nothing() -> None:
    from asgiref.sync import sync_to_async

    before = await sync_to_async(session_rows)()
    async with browser() as http:
        http.cookies.set("sessionid", "forgedforgedforgedforgedforged12")
        listing = await http.get("/anon/threads/")
        read = await http.get("/anon/threads/t/")
    assert listing.json() == {"threads": [], "nextCursor": None}
    assert read.status_code == 404
    assert await sync_to_async(session_rows)() == before


async def test_message_text_with_nul_is_refused_before_anything_is_stored(alice: Any) -> None:
    # PostgreSQL text cannot hold a NUL: refused up front on every database, never half-saved.
    async with await logged_in(alice) as http:
        response = await http.post("/stored/", json=run_body(text="hi\x00there"))
        listing = await http.get("/stored/threads/")
    assert response.status_code == 400
    assert "messages.0 (id 'user-run-1') content contains a NUL" in response.json()["error"]
    assert listing.json() == {"threads": [], "nextCursor": None}


async def test_a_thread_deleted_while_a_run_streams_stays_deleted(alice: Any, caplog: Any) -> None:
    from tests.agui.agents import GATE

    caplog.set_level(logging.INFO, logger="django_pydantic_agent.agui")
    async with await logged_in(alice) as http:
        await run(http, thread_id="doomed", run_id="r1")
        GATE.reset()
        streaming = asyncio.ensure_future(
            http.post("/gated/", json=run_body(thread_id="doomed", run_id="r2"))
        )
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        deleted = await http.delete("/stored/threads/doomed/")
        GATE.released.set()
        response = await streaming
        # The read is another mount's: its thread read waits for its own runs only.
        await RunCoordinator.wait_for_all_runs()
        after = await http.get("/stored/threads/doomed/")
        listing = await http.get("/stored/threads/")
    assert deleted.status_code == 204
    events = sse_events(response.text)
    assert events[-1]["type"] == "RUN_FINISHED"
    assert_valid_agui(events)
    # The run's later writes did not bring the thread back.
    assert after.status_code == 404
    assert listing.json() == {"threads": [], "nextCursor": None}


async def test_a_new_thread_streamed_by_a_gated_run_is_saved(alice: Any) -> None:
    # The control for the test above: without the DELETE, the same run is saved.
    from tests.agui.agents import GATE

    GATE.reset()
    async with await logged_in(alice) as http:
        streaming = asyncio.ensure_future(http.post("/gated/", json=run_body(thread_id="kept")))
        await asyncio.wait_for(GATE.reached.wait(), timeout=10)
        GATE.released.set()
        response = await streaming
        await RunCoordinator.wait_for_all_runs()  # as above: /stored/ waits for its own runs
        after = await http.get("/stored/threads/kept/")
    assert sse_events(response.text)[-1]["type"] == "RUN_FINISHED"
    assert [m["content"] for m in after.json()["messages"]][-1] == "Working done."


async def test_csrf_is_enforced_on_rename_and_delete(alice: Any) -> None:
    from tests.agui.conftest import CSRF_SECRET

    async with await logged_in(alice) as http:
        # Create the thread on the exempt mount (same store), then attack the enforcing one.
        await run(http, thread_id="guarded")
        rename = await http.patch("/stored-csrf/threads/guarded/", json={"title": "Pwned"})
        delete = await http.delete("/stored-csrf/threads/guarded/")
        kept = await http.get("/stored-csrf/threads/")
        http.cookies.set("csrftoken", CSRF_SECRET)
        token = {"X-CSRFToken": CSRF_SECRET}
        renamed = await http.patch(
            "/stored-csrf/threads/guarded/", json={"title": "Mine"}, headers=token
        )
        removed = await http.delete("/stored-csrf/threads/guarded/", headers=token)
    for refused in (rename, delete):
        assert refused.status_code == 403
        assert refused.json()["error"].startswith("CSRF verification failed")
    [thread] = kept.json()["threads"]
    assert thread["threadId"] == "guarded"
    assert thread["title"] != "Pwned"
    assert renamed.status_code == 200
    assert removed.status_code == 204


async def test_a_thread_read_right_after_the_stream_sees_the_runs_last_write(alice: Any) -> None:
    """The stream ends at RUN_FINISHED while the last flush goes on; a read waits for it."""
    from django.http import StreamingHttpResponse
    from django.test import RequestFactory

    from django_pydantic_agent.agui import AGUIServer
    from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
    from tests.agui.agents import text_agent

    class SlowLastWrite:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

        async def create_message(self, data: Any) -> Any:
            if data.role == "assistant" and data.status == "complete":
                await asyncio.sleep(0.3)  # a slow store: the stream has ended by now
            return await self._inner.create_message(data)

        async def update_message(self, message_uuid: Any, update: Any) -> Any:
            if update.status == "complete":
                await asyncio.sleep(0.3)
            return await self._inner.update_message(message_uuid, update)

    class SlowStore(DefaultConversationStore):
        async def repositories(self, *, request: Any) -> Any:
            chats, messages = await super().repositories(request=request)
            return chats, SlowLastWrite(messages)

    async def auser() -> Any:
        return alice

    server = AGUIServer(
        text_agent(), conversation_store=SlowStore(), access=AccessPolicy(csrf_exempt=True)
    )
    factory = RequestFactory()
    request = factory.post("/", data=run_body(), content_type="application/json")
    request.auser, request.user = auser, alice
    response = await server.run_view(request)
    assert isinstance(response, StreamingHttpResponse)
    events = sse_events("".join([bytes(chunk).decode() async for chunk in response]))
    assert events[-1]["type"] == "RUN_FINISHED"
    streamed = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")

    read = factory.get("/threads/thread-1/")
    read.auser, read.user = auser, alice
    thread = await server.thread_view(read, thread_id="thread-1")
    assert thread.status_code == 200
    answer = [m for m in json.loads(thread.content)["messages"] if m["role"] == "assistant"][-1]
    assert (answer["content"], answer["status"]) == (streamed, "complete")
    await RunCoordinator.wait_for_all_runs()


async def test_a_run_that_would_create_a_thread_over_quota_is_a_413_before_streaming(
    alice: Any,
) -> None:
    from django.http import StreamingHttpResponse
    from django.test import RequestFactory

    from django_pydantic_agent.agui import AGUIServer
    from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
    from tests.agui.agents import text_agent

    async def auser() -> Any:
        return alice

    store = DefaultConversationStore(max_threads_per_owner=1)
    server = AGUIServer(
        text_agent(), conversation_store=store, access=AccessPolicy(csrf_exempt=True)
    )

    async def post(thread_id: str, run_id: str) -> Any:
        body = run_body(thread_id=thread_id, run_id=run_id)
        request = RequestFactory().post("/", data=body, content_type="application/json")
        request.auser, request.user = auser, alice
        response = await server.run_view(request)
        if isinstance(response, StreamingHttpResponse):
            return sse_events("".join([bytes(chunk).decode() async for chunk in response]))
        return response

    first = await post("kept", "r1")
    assert first[-1]["type"] == "RUN_FINISHED"
    await RunCoordinator.wait_for_all_runs()
    refused = await post("one-too-many", "r2")
    assert refused.status_code == 413
    assert "max_threads_per_owner=1" in json.loads(refused.content)["error"]
    again = await post("kept", "r3")  # the thread it keeps still takes runs
    assert again[-1]["type"] == "RUN_FINISHED"
    await RunCoordinator.wait_for_all_runs()
    from django_pydantic_agent.contrib.store.models import StoredConversation

    threads = StoredConversation.objects.filter(owner_id=str(alice.pk)).values_list("thread_id")
    assert [row async for row in threads] == [("kept",)]


async def test_run_started_goes_out_before_the_thread_lookup_returns(alice: Any) -> None:
    # A slow store (a Memory Service far away) does not hold back the first event: the run
    # is announced at once, and its content follows once the lookup answered.
    looked_up = asyncio.Event()
    answer = asyncio.Event()

    class SlowChats(ChatsProxy):
        async def get_chat_by_thread_id(self, user_uuid: Any, thread_id: str) -> Any:
            looked_up.set()
            await answer.wait()
            return await self._inner.get_chat_by_thread_id(user_uuid, thread_id)

    chunks = aiter(await respond_over(alice, SlowChats))
    first = sse_events(bytes(await asyncio.wait_for(anext(chunks), timeout=10)).decode())
    assert [e["type"] for e in first] == ["RUN_STARTED"]
    assert (first[0]["threadId"], first[0]["runId"]) == ("thread-1", "run-1")
    await asyncio.wait_for(looked_up.wait(), timeout=10)
    answer.set()
    rest = "".join([bytes(chunk).decode() async for chunk in chunks])
    events = first + sse_events(rest)
    types = [e["type"] for e in events]
    assert types.count("RUN_STARTED") == 1  # the inner agent's is not sent again
    assert types[-1] == "RUN_FINISHED"
    assert_valid_agui(events)
