"""Records: defaults, the lossless placeholder codec, and the ORM round trip over the emulator."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from django_pydantic_agent.chat_history import (
    PLACEHOLDER,
    Chat,
    Message,
    MessageStatus,
    MessageToolCallUpdate,
    MessageUpdate,
    Reasoning,
    Role,
    ToolCall,
    chat_deduplication_key,
    decode_placeholder,
    encode_placeholder,
    participant_id,
)
from django_pydantic_agent.chat_history.records import (
    WIRE_CONTEXT,
    MessageReasoningUpdate,
    apply_update,
    nested_record_class,
)
from django_pydantic_agent.memory_service import DRMemoryServiceClient, DRMemorySpace
from tests.chat_history.conftest import USER


def test_enums_match_the_seed() -> None:
    assert [r.value for r in Role] == [
        "developer",
        "system",
        "assistant",
        "user",
        "tool",
        "reasoning",
    ]
    assert [s.value for s in MessageStatus] == ["active", "complete", "interrupted", "errored"]


def test_record_defaults() -> None:
    message = Message()
    assert (message.v, message.role, message.status, message.in_progress) == (
        1,
        "user",
        "active",
        True,
    )
    assert message.tool_calls == []
    assert message.reasonings == []
    assert (message.run_id, message.run_outcome, message.content_parts) == (None, None, None)
    call = ToolCall()
    assert (call.role, call.name, call.arguments, call.content, call.has_result) == (
        "tool",
        "",
        "",
        "",
        False,
    )
    assert Reasoning().role == "reasoning"


@pytest.mark.parametrize(
    "value", ["", PLACEHOLDER, PLACEHOLDER * 3, "x", f"{PLACEHOLDER}zw", f"a{PLACEHOLDER}"]
)
def test_s83_13_placeholder_codec_is_lossless(value: str) -> None:
    wire = encode_placeholder(value)
    assert wire != ""
    assert decode_placeholder(wire) == value


def test_placeholder_codec_reads_reference_data() -> None:
    # The reference writes "" as one U+200B and leaves every other value unchanged.
    assert decode_placeholder(PLACEHOLDER) == ""
    assert decode_placeholder("héllo") == "héllo"
    assert decode_placeholder(None) == ""
    assert encode_placeholder(None) == PLACEHOLDER


def test_nested_codec_applies_to_json_dumps_and_wire_validation_only() -> None:
    call = ToolCall(arguments="", content=PLACEHOLDER)
    assert call.content == PLACEHOLDER  # Python construction never decodes
    dumped = call.model_dump(mode="json")
    assert (dumped["arguments"], dumped["content"]) == (PLACEHOLDER, PLACEHOLDER * 2)
    assert call.model_dump()["arguments"] == ""
    back = ToolCall.model_validate(dumped, context=WIRE_CONTEXT)
    assert (back.arguments, back.content) == ("", PLACEHOLDER)
    step = Reasoning(content="")
    assert (
        Reasoning.model_validate(step.model_dump(mode="json"), context=WIRE_CONTEXT).content == ""
    )
    assert ToolCall.model_validate({"content": None}).content == ""


def test_nested_records_keep_unknown_keys() -> None:
    call = ToolCall.model_validate({"name": "f", "from_the_future": 1})
    assert call.model_dump(mode="json")["from_the_future"] == 1


def test_update_dto_refuses_value_and_delta_together() -> None:
    with pytest.raises(ValueError, match="full value or a delta"):
        MessageUpdate(content="a", content_delta="b", content_offset=0)
    with pytest.raises(ValueError, match="needs arguments_offset"):
        MessageToolCallUpdate(arguments_delta="x")


def test_apply_update_applies_set_fields_and_deltas() -> None:
    call = ToolCall(arguments="{")
    applied = apply_update(
        call, MessageToolCallUpdate(arguments_delta='"a"}', arguments_offset=1, status="complete")
    )
    assert applied == {"arguments": '{"a"}', "status": "complete"}
    # Retried: the same delta at the same offset changes nothing.
    apply_update(call, MessageToolCallUpdate(arguments_delta='"a"}', arguments_offset=1))
    assert call.arguments == '{"a"}'
    step = Reasoning()
    apply_update(step, MessageReasoningUpdate(content_delta="t", content_offset=0))
    assert step.content == "t"


def test_nested_record_class_follows_a_subclass() -> None:
    class MyCall(ToolCall):
        team: str = ""

    class MyMessage(Message):
        tool_calls: list[MyCall] = []  # type: ignore[assignment]

    assert nested_record_class(MyMessage, "tool_calls") is MyCall
    assert nested_record_class(MyMessage, "reasonings") is Reasoning
    assert nested_record_class(Message, "tool_calls") is ToolCall


def test_chat_routes_thread_id_to_the_description() -> None:
    routing = Chat._routing()
    assert routing.range_keys == ("thread_id",)
    assert routing.dedup == "dedup_key"
    assert set(routing.metadata) == {"name", "chat_uuid", "user_uuid"}
    assert Chat._prefix() == "thread"


# Over real HTTP to the emulator -------------------------------------------------------------


@pytest.fixture
async def space(live_server: Any) -> AsyncIterator[tuple[DRMemorySpace, list[httpx.Request]]]:
    sent: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        sent.append(request)

    async with (
        httpx.AsyncClient(timeout=10.0, event_hooks={"request": [record]}) as pool,
        DRMemoryServiceClient(
            endpoint=f"{live_server.url}/api/v2", api_token="token-a", http_client=pool
        ) as client,
    ):
        yield await DRMemorySpace.post(client, deduplication_key="records"), sent


@pytest.mark.django_db(transaction=True)
async def test_orm_round_trip_is_lossless_for_empty_and_zero_width_values(
    space: tuple[DRMemorySpace, list[httpx.Request]],
) -> None:
    memory, sent = space
    chat = await Chat.post(
        memory,
        thread_id="t/1",
        dedup_key=chat_deduplication_key(USER, "t/1"),
        name="Hello",
        user_uuid=USER,
        participants=[participant_id(USER)],
    )
    assert json.loads(sent[-1].content)["description"] == "//thread/t%2F1/"
    message = await Message.post(
        chat,
        content="",
        emitter_type="agent",
        role="assistant",
        chat_uuid=chat.chat_uuid,
        tool_calls=[ToolCall(agui_id="tc1", arguments="", content=PLACEHOLDER)],
        reasonings=[Reasoning(content="")],
    )
    body = json.loads(sent[-1].content)["body"]
    assert body["content"] == PLACEHOLDER
    assert body["tool_calls"][0]["content"] == PLACEHOLDER * 2
    assert message.content == ""

    listed = await Message.list(chat)
    assert listed[0].content == ""
    assert (listed[0].tool_calls[0].arguments, listed[0].tool_calls[0].content) == (
        "",
        PLACEHOLDER,
    )
    assert listed[0].reasonings[0].content == ""

    await listed[0].patch(content=PLACEHOLDER)
    assert json.loads(sent[-1].content)["body"]["content"] == PLACEHOLDER * 2
    assert (await Message.list(chat))[0].content == PLACEHOLDER


def test_message_content_codec_on_wire_validation() -> None:
    assert Message.model_validate({"content": None}).content == ""
    wire = Message.model_validate({"content": PLACEHOLDER}, context=WIRE_CONTEXT)
    assert wire.content == ""
    assert Message.model_validate({"content": PLACEHOLDER}).content == PLACEHOLDER


def test_apply_update_ignores_an_offset_without_a_delta_and_warns_on_unknown_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    message = Message(content="abc")
    applied = apply_update(message, MessageUpdate(content_offset=1, team="x"))  # type: ignore[call-arg]
    assert applied == {}
    assert message.content == "abc"
    assert "has no field 'team'" in caplog.text


def test_nested_record_class_falls_back_for_plain_annotations() -> None:
    class Odd(Message):
        tool_calls: list = []  # type: ignore[type-arg,assignment]

    assert nested_record_class(Odd, "tool_calls") is ToolCall


def test_patch_of_emitter_only_sends_no_body() -> None:
    message = Message(content="x")
    item = message._patch_item(None, "agent", None, {}, where="test")
    assert "body" not in item
    message._apply({"createdAt": "t"})  # no body: nothing to decode
    assert message.content == "x"
