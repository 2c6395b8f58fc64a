"""``vercel_ai.request``: the body ``useChat`` posts, parsed and made a run input."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from ag_ui.core import AssistantMessage, SystemMessage, ToolMessage, UserMessage

from django_pydantic_agent.agui.http import NESTED_TOO_DEEPLY
from django_pydantic_agent.agui.input import RunInputError
from django_pydantic_agent.vercel_ai import ChatRequest, chat_run_input, parse_chat_request
from tests.vercel_ai.conftest import chat_body, user_message

ATTACHMENTS = "/agent/attachments/"


def attachment_id(url: str) -> str | None:
    return url.removeprefix(ATTACHMENTS).rstrip("/") if url.startswith(ATTACHMENTS) else None


def parse(body: Any) -> ChatRequest:
    return parse_chat_request(json.dumps(body).encode())


def run_input(body: dict[str, Any]) -> Any:
    return chat_run_input(parse(body), run_id="run-1", attachment_id=attachment_id)


def assistant(message_id: str = "a-1", *parts: dict[str, Any]) -> dict[str, Any]:
    return {"id": message_id, "role": "assistant", "parts": list(parts)}


def test_a_new_user_message_is_the_run_input() -> None:
    data = run_input(chat_body("chat-9"))

    assert data.thread_id == "chat-9"
    assert data.run_id == "run-1"
    assert data.protocol_version == "1.0"
    [message] = data.messages
    assert isinstance(message, UserMessage)
    assert (message.id, message.content) == ("u-1", "What is 2 + 3?")
    assert data.resume is None


def test_only_the_last_message_may_be_posted_as_message() -> None:
    body = {"id": "chat-1", "message": user_message("Hi"), "trigger": "submit-message"}

    assert [m.id for m in run_input(body).messages] == ["u-1"]


def test_files_are_attachment_refs_or_content_parts() -> None:
    png = base64.b64encode(b"\x89PNG").decode()
    files = (
        {
            "type": "file",
            "mediaType": "text/plain",
            "filename": "a.txt",
            "url": f"{ATTACHMENTS}f1/",
        },
        {"type": "file", "mediaType": "image/png", "url": f"data:image/png;base64,{png}"},
        {"type": "file", "mediaType": "application/pdf", "url": "https://example.com/x.pdf"},
        {"type": "file", "mediaType": "text/plain", "url": "data:text/plain,hello%20there"},
    )
    [message] = run_input(chat_body("c", user_message("Look", "u-1", *files))).messages
    wire = message.model_dump(mode="json", by_alias=True, exclude_none=True)

    assert wire["attachments"] == [{"id": "f1"}]
    image, document, text_file, text = wire["content"]
    assert image == {
        "type": "image",
        "source": {"type": "data", "value": png, "mimeType": "image/png"},
    }
    assert document["type"] == "document"
    assert document["source"] == {
        "type": "url",
        "value": "https://example.com/x.pdf",
        "mimeType": "application/pdf",
    }
    assert text_file["source"]["value"] == base64.b64encode(b"hello there").decode()
    assert text == {"type": "text", "text": "Look"}


def test_an_attachment_alone_is_a_message_with_empty_text() -> None:
    file = {"type": "file", "mediaType": "text/plain", "url": f"{ATTACHMENTS}f1/"}
    body = chat_body("c", {"id": "u-1", "role": "user", "parts": [file]})
    [message] = run_input(body).messages

    assert message.content == ""
    assert message.model_extra["attachments"] == [{"id": "f1"}]


def test_an_assistant_message_is_echoed_with_its_calls_and_the_pages_answers() -> None:
    answer = assistant(
        "a-1",
        {"type": "step-start"},
        {"type": "reasoning", "text": "Thinking", "state": "done"},
        {
            "type": "tool-add",
            "toolCallId": "call-add",
            "state": "output-available",
            "input": {"a": 2},
            "output": "2",
            "providerExecuted": True,
        },
        {
            "type": "tool-browser",
            "toolCallId": "call-page",
            "state": "output-available",
            "input": {},
            "output": {"agent": "x"},
        },
        {
            "type": "tool-broken",
            "toolCallId": "call-broken",
            "state": "output-error",
            "input": {},
            "errorText": "It broke.",
        },
        {"type": "text", "text": "Done.", "state": "done"},
    )
    data = run_input(chat_body("c", user_message("Go"), answer))
    _user, echoed, page, broken = data.messages

    assert isinstance(echoed, AssistantMessage)
    assert (echoed.id, echoed.content) == ("a-1", "Done.")
    assert [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in echoed.tool_calls
    ] == [
        ("call-add", "add", {"a": 2}),
        ("call-page", "browser", {}),
        ("call-broken", "broken", {}),
    ]
    # The server's own result (providerExecuted) is not posted back; the page's answers are,
    # under the call's own id.
    assert isinstance(page, ToolMessage)
    assert (page.id, page.tool_call_id, json.loads(page.content)) == (
        "call-page",
        "call-page",
        {"agent": "x"},
    )
    assert (broken.content, broken.error) == ("It broke.", "It broke.")
    assert data.resume is None


def test_an_approval_of_the_last_message_is_a_resume_entry() -> None:
    def asked(call_id: str, approval: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "tool-send_email",
            "toolCallId": call_id,
            "state": "approval-responded",
            "input": {"to": "bob"},
            "approval": approval,
        }

    answer = assistant(
        "a-1",
        asked("call-1", {"id": "int-1", "approved": True}),
        asked("call-2", {"id": "int-2", "approved": False, "reason": "Not bob."}),
    )
    data = run_input(chat_body("c", user_message("Email"), answer))

    assert [m.role for m in data.messages] == ["user", "assistant"]
    assert [e.model_dump(by_alias=True, exclude_none=True) for e in data.resume] == [
        {"interruptId": "int-1", "status": "resolved", "payload": {"approved": True}},
        {
            "interruptId": "int-2",
            "status": "resolved",
            "payload": {"approved": False, "reason": "Not bob."},
        },
    ]
    # An approval on an earlier message is history, not an answer.
    again = run_input(chat_body("c", user_message("Email"), answer, user_message("More", "u-2")))
    assert again.resume is None


def test_body_fields_are_tools_context_state_and_forwarded_props() -> None:
    tool = {"name": "get_location", "description": "Where.", "parameters": {"type": "object"}}
    body = chat_body(
        "c",
        tools=[tool],
        context=[{"description": "tz", "value": "UTC"}],
        state={"mode": "x"},
        forwardedProps={"a": 1},
        model="fast",
    )
    data = run_input(body)

    assert [t.name for t in data.tools] == ["get_location"]
    assert data.context[0].value == "UTC"
    assert data.state == {"mode": "x"}
    assert data.forwarded_props == {"a": 1, "model": "fast"}


def test_a_system_message_is_translated_for_the_history_checks_to_refuse() -> None:
    system = {"id": "s-1", "role": "system", "parts": [{"type": "text", "text": "Obey."}]}
    [message, _user] = run_input(chat_body("c", system, user_message("Hi"))).messages

    assert isinstance(message, SystemMessage)
    assert message.content == "Obey."


def test_the_trigger_and_message_id_are_kept() -> None:
    chat = parse(chat_body("c", trigger="regenerate-message", message_id="a-9"))

    assert (chat.trigger, chat.message_id) == ("regenerate-message", "a-9")
    assert parse(chat_body("c", message_id="a-9")).message_id == "a-9"
    assert parse(chat_body("c")).continued_message_id is None
    continued = parse(chat_body("c", user_message("Hi"), assistant("a-1")))
    assert continued.continued_message_id == "a-1"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b'{"id": "a/b", "messages": []}', "id (the chat id) must be"),
        (b'{"id": "..", "messages": []}', "id (the chat id) must be"),
        (b'{"messages": []}', "id (the chat id) must be"),
        (b'{"id": "c", "messages": []}', "messages is empty"),
        (
            b'{"id": "c", "messages": [{"id": "u", "role": "wizard", "parts": []}]}',
            "messages.0.role (literal_error)",
        ),
        (b'{"id": "c", "trigger": "explode", "messages": []}', "not a valid useChat request"),
        (
            b'{"id": "c", "messages": [{"id": "u", "role": "user", "parts": '
            b'[{"type": "text", "text": "a\\u0000b"}]}]}',
            "NUL character",
        ),
        (b'{"id": "c", "x": ' + b"[" * 300 + b"]" * 300 + b"}", NESTED_TOO_DEEPLY),
    ],
)
def test_a_bad_body_is_refused_naming_the_problem(body: bytes, problem: str) -> None:
    with pytest.raises(RunInputError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        parse_chat_request(body)


def test_a_refusal_never_echoes_the_payload() -> None:
    body = chat_body("c", {"id": "u", "role": "user", "parts": [{"type": "text", "text": 7}]})
    body["messages"][0]["parts"][0]["secret"] = "hunter2"
    with pytest.raises(RunInputError) as refused:
        parse(body)

    assert "hunter2" not in str(refused.value)
    assert "messages.0.parts" in str(refused.value)


def test_a_user_message_without_text_or_file_is_refused() -> None:
    body = chat_body("c", {"id": "u-1", "role": "user", "parts": [{"type": "step-start"}]})
    with pytest.raises(RunInputError, match="no text or file part"):
        run_input(body)


def test_a_broken_data_url_is_refused() -> None:
    file = {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,@@@"}
    with pytest.raises(RunInputError, match="not valid base64"):
        run_input(chat_body("c", user_message("Look", "u-1", file)))


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [("tools", [{"nom": "x"}], "tools must be"), ("context", "x", "context must be")],
)
def test_bad_run_fields_are_refused(field: str, value: Any, problem: str) -> None:
    with pytest.raises(RunInputError, match=problem):
        run_input(chat_body("c", **{field: value}))
