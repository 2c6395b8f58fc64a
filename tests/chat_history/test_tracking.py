"""Tracking helpers: text deltas and the JSON patch used for ACTIVITY_DELTA."""

from __future__ import annotations

import pytest

from django_pydantic_agent.chat_history._tracking import TrackedText, apply_json_patch


def test_tracked_text_sends_a_delta_or_the_whole_value() -> None:
    text = TrackedText(value="Hello world", stored_len=5)
    assert text.pending == 6
    assert text.write_fields("content") == {"content_delta": " world", "content_offset": 5}
    unknown = TrackedText(value="abc", stored_len=None)
    assert unknown.pending == 3
    assert unknown.write_fields("content") == {"content": "abc"}
    assert TrackedText(value="abc", stored_len=3).write_fields("content") == {}


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
