"""Tracking helpers: text deltas and the JSON patch used for ACTIVITY_DELTA."""

from __future__ import annotations

import pytest

from django_pydantic_agent.chat_history.tracking import TrackedText, apply_json_patch


def test_tracked_text_sends_a_delta_or_the_whole_value() -> None:
    text = TrackedText(value="Hello world", stored_len=5)
    assert text.pending == 6
    assert text.write_fields("content") == {"content_delta": " world", "content_offset": 5}
    unknown = TrackedText(value="abc", stored_len=None)
    assert unknown.pending == 3
    assert unknown.write_fields("content") == {"content": "abc"}
    assert TrackedText(value="abc", stored_len=3).write_fields("content") == {}


def test_tracked_text_appends_join_into_the_value_and_count_as_pending() -> None:
    text = TrackedText(value="Hel", stored_len=3)
    for delta in ("lo", " ", "world"):
        text.append(delta)
    assert (len(text), text.pending, text.dirty) == (11, 8, True)
    assert text.write_fields("content") == {"content_delta": "lo world", "content_offset": 3}
    assert text.value == "Hello world"
    text.append("!")  # after a read, appends go on from the joined value
    assert (text.value, len(text)) == ("Hello world!", 12)
    text.value = "replaced"
    assert (text.value, text.pending) == ("replaced", 5)
    assert repr(TrackedText()) == "TrackedText(value='', stored_len=0)"


def test_json_patch_operations() -> None:
    doc = {"a": 1, "list": [1, 2], "nested": {"x": "y"}, "we/ird": 0}
    patched = apply_json_patch(
        doc,
        [
            {"op": "add", "path": "/b", "value": 2},
            {"op": "replace", "path": "/a", "value": 10},
            {"op": "remove", "path": "/nested/x"},
            {"op": "add", "path": "/list/0", "value": 0},
            {"op": "replace", "path": "/list/1", "value": 9},
            {"op": "copy", "from": "/b", "path": "/c"},
            {"op": "move", "from": "/c", "path": "/d"},
            {"op": "remove", "path": "/list/2"},
            {"op": "test", "path": "/we~1ird", "value": 0},
        ],
    )
    assert patched == {"a": 10, "b": 2, "d": 2, "list": [0, 9], "nested": {}, "we/ird": 0}
    assert doc["a"] == 1  # the input is not changed


@pytest.mark.parametrize(
    "operation",
    [
        {"op": "remove", "path": "/missing"},
        {"op": "test", "path": "/a", "value": 2},
        {"op": "frobnicate", "path": "/a"},
        {"op": "replace", "path": "", "value": [1]},
    ],
)
def test_json_patch_refuses_operations_that_do_not_apply(operation: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"does not apply|non-object"):
        apply_json_patch({"a": 1}, [operation])
