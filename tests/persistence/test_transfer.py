"""``persistence.transfer``: the export document's checks, its Markdown, the generic import."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from django_pydantic_agent.persistence.transfer import (
    FORMAT,
    ImportProblem,
    active_wire,
    check_document,
    markdown,
    render_record,
)


def document(*entries: dict[str, Any], title: Any = "Plans") -> dict[str, Any]:
    return {"format": FORMAT, "version": 1, "title": title, "messages": list(entries)}


USER = {"parent": None, "active": True, "wire": [{"id": "u1", "role": "user", "content": "Hi"}]}
ANSWER = {
    "parent": 0,
    "active": True,
    "wire": [
        {"id": "r1", "role": "reasoning", "content": "Think\nmore"},
        {
            "id": "a1",
            "role": "assistant",
            "content": "",
            "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
            ],
        },
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "5"},
    ],
}


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        (document(USER, title=5), "title must be a string"),
        (document(USER, title="x" * 300), "title must be a string"),
        (document({"parent": None, "active": True}), "messages.0 has neither"),
        (document({**USER, "wire": ["text"]}), "messages.0 has a wire"),
        (document({**USER, "active": False}, ANSWER), "messages.1 is active but its parent"),
        (document({**USER, "active": False}), "No message is active"),
        (document(USER, {**ANSWER, "parent": True}), "messages.1 has a parent"),
        (document("nope"), "messages.0 is not an object"),  # type: ignore[arg-type]
    ],
)
def test_check_document_names_the_first_problem(broken: Any, named: str) -> None:
    with pytest.raises(ImportProblem, match=named):
        check_document(broken)


def test_check_document_caps_the_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    from django_pydantic_agent.persistence import transfer

    monkeypatch.setattr(transfer, "MAX_IMPORTED_MESSAGES", 1)
    with pytest.raises(ImportProblem, match="holds 2 messages; an import takes at most 1"):
        check_document(document(USER, ANSWER))


def test_markdown_shows_reasoning_tool_calls_and_attachments() -> None:
    user = copy.deepcopy(USER)
    user["wire"][0]["attachments"] = [{"id": "f1", "name": "map.png"}]
    other = {"parent": 0, "active": False, "wire": [{"id": "a0", "role": "assistant"}]}
    text = markdown(document(user, ANSWER, other))
    assert text.startswith("# Plans\n\n_1 more message(s) on other branches")
    assert "**User:**\n\nHi\n\nAttachment: map.png" in text
    assert "> **Reasoning:** Think\n> more" in text
    assert "Tool call `add`:\n\n```json\n{}\n```" in text
    assert "**Tool:**\n\n5" in text


WRITTEN = """## Plan

| step | who |
| --- | --- |
| 1 | Ada |

```python
def f():
    return 1
```

- one
- two
"""


def test_markdown_keeps_each_message_as_written() -> None:
    """Tables, code fences, lists and line breaks come out as typed (they were collapsed onto
    one line), and a tool call's arguments holding a fence cannot close theirs early."""
    question = {"parent": None, "active": True, "wire": [{"id": "u1", "role": "user"}]}
    question["wire"][0]["content"] = [
        {"type": "text", "text": "First part\nsecond line"},
        {"type": "text", "text": "- a\n- b"},
    ]
    call = {"name": "run", "arguments": '{"code": "```\\nx\\n```"}'}
    answer = {
        "parent": 0,
        "active": True,
        "wire": [
            {"id": "a1", "role": "assistant", "content": WRITTEN},
            {
                "id": "a2",
                "role": "assistant",
                "content": "",
                "toolCalls": [{"id": "c1", "type": "function", "function": call}],
            },
        ],
    }
    text = markdown(document(question, answer))
    assert "**User:**\n\nFirst part\nsecond line\n\n- a\n- b\n" in text
    assert f"**Assistant:**\n\n{WRITTEN.strip()}\n" in text
    assert "````json\n" + call["arguments"] + "\n````" in text


def test_a_record_without_wire_is_rendered() -> None:
    entry = {
        "parent": None,
        "active": True,
        "record": {"role": "user", "content": "From a record", "agui_id": "u9"},
    }
    [message] = active_wire(document(entry))
    assert message["id"] == "u9"
    assert message["content"] == "From a record"
    assert render_record(entry["record"])[0]["role"] == "user"
