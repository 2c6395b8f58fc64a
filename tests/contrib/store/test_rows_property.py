"""Property tests of the one row shape: whatever ``save()`` is given, ``load()`` gives back.

Arbitrary AG-UI wire messages (every role, tool calls and their results, reasoning, content
parts, bookkeeping a client made up, extra keys holding any JSON) and arbitrary JSON values are
saved whole and grown one save at a time; ``load()`` must return each list verbatim, and the
records a run reads from the rows must be those ``persistence.wire`` reads from the list.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from django_pydantic_agent.chat_history import Message
from django_pydantic_agent.contrib.store import save_plan
from django_pydantic_agent.contrib.store.models import StoredConversation, StoredMessage
from django_pydantic_agent.contrib.store.rows import record_of
from django_pydantic_agent.contrib.store.stores import DefaultConversationStore
from django_pydantic_agent.persistence import Conversation
from django_pydantic_agent.persistence.wire import wire_to_records

pytestmark = pytest.mark.django_db

_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)))
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False, width=64).filter(lambda f: abs(f) < 1e300)
    | _text
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
_ids = st.sampled_from(["m1", "m2", "c1", "c2", "t1", "", "r1"]) | _text
_extras = st.dictionaries(
    st.sampled_from(["attachments", "metadata", "x-custom", "status", "runId", "chatHistory"])
    | _text,
    json_values,
    max_size=3,
)
_parts = st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": _text})
    | st.fixed_dictionaries(
        {"type": st.sampled_from(["image", "binary"]), "mimeType": st.just("image/png")},
        optional={"url": _text, "id": _ids},
    ),
    max_size=3,
)
_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": _ids,
            "type": st.just("function"),
            "function": st.fixed_dictionaries({"name": _text, "arguments": _text}),
        }
    ),
    max_size=2,
)


@st.composite
def wire_messages(draw: Any) -> dict[str, Any]:
    role = draw(
        st.sampled_from(
            ["user", "assistant", "system", "developer", "tool", "reasoning", "activity"]
        )
    )
    message: dict[str, Any] = {**draw(_extras), "id": draw(_ids), "role": role}
    if role == "assistant":
        if draw(st.booleans()):
            message["toolCalls"] = draw(_calls)
        if draw(st.booleans()):
            message["content"] = draw(_text)
    elif role == "tool":
        message["toolCallId"] = draw(_ids)
        message["content"] = draw(_text | _parts)
    elif role == "activity":
        message["activityType"] = draw(_text)
        message["content"] = draw(st.dictionaries(_text, json_values, max_size=2))
    else:
        message["content"] = draw(_text | _parts)
    return message


# ``None`` is refused (``UnstorableMessageError``); any other JSON value is kept as it is.
stored_values = json_values.filter(lambda value: value is not None)
conversations = st.lists(wire_messages() | stored_values, max_size=12)


def _save(thread: str, messages: list[Any]) -> None:
    DefaultConversationStore()._store(Conversation(thread_id=thread, messages=messages), "owner")


def _load(thread: str) -> list[Any]:
    loaded = DefaultConversationStore()._fetch(thread, "owner")
    assert loaded is not None
    return list(loaded.messages)


@_SETTINGS
@given(messages=conversations)
def test_any_saved_list_loads_verbatim(messages: list[Any]) -> None:
    thread = uuid.uuid4().hex
    _save(thread, messages)
    assert _load(thread) == messages
    _save(thread, messages)  # saving it again changes nothing
    assert _load(thread) == messages


@_SETTINGS
@given(messages=conversations, cut=st.integers(0, 12), edit=wire_messages() | stored_values)
def test_a_list_grown_edited_and_cut_one_save_at_a_time_loads_verbatim(
    messages: list[Any], cut: int, edit: Any
) -> None:
    thread = uuid.uuid4().hex
    for end in range(len(messages) + 1):
        _save(thread, messages[:end])
        assert _load(thread) == messages[:end]
    edited = [*messages[:cut], edit, *messages[cut + 1 :]]
    _save(thread, edited)
    assert _load(thread) == edited
    _save(thread, edited[:cut])
    assert _load(thread) == edited[:cut]


@_SETTINGS
@given(messages=st.lists(wire_messages(), max_size=10))
def test_the_rows_hold_the_records_the_list_reads_as(messages: list[Any]) -> None:
    """A thread saved whole is, for a run, the records ``persistence.wire`` reads from it."""
    thread = uuid.uuid4().hex
    _save(thread, messages)
    conversation = StoredConversation.objects.get(owner_id="owner", thread_id=thread)
    rows = StoredMessage.objects.filter(conversation=conversation).order_by("position")
    stored = [record_of(Message, row, conversation.chat_uuid) for row in rows]
    read = wire_to_records(messages, chat_uuid=conversation.chat_uuid, salt=thread).messages
    if [i for r in stored for i in [r.role]] == [r.role for r in read]:  # read as a whole
        fields = {"message_uuid", "tool_calls", "reasonings", "chat_uuid", "emitter_type"}
        fields |= {"emitter_id"}
        assert [r.model_dump(exclude=fields) for r in stored] == [
            r.model_dump(exclude=fields) for r in read
        ]
        assert [[c.model_dump(exclude={"uuid"}) for c in r.tool_calls] for r in stored] == [
            [c.model_dump(exclude={"uuid"}) for c in r.tool_calls] for r in read
        ]
    assert len({r.message_uuid for r in stored}) == len(stored)


@given(items=st.lists(stored_values, max_size=8))
def test_the_bytes_a_save_hashes_do_not_depend_on_where_a_message_stands(items: list[Any]) -> None:
    # A save extends the stored head's hash by each new message's bytes: the bytes of a list
    # must be its messages' bytes one after the other, for short lists and long ones alike.
    assert save_plan._items(items) == b"".join(save_plan._items([item]) for item in items)
