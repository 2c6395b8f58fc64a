"""Title and preview derivation for the thread drawer."""

from __future__ import annotations

from types import SimpleNamespace

from django_pydantic_agent.persistence import derive_preview, derive_title, message_text


def test_title_is_the_first_user_text_with_whitespace_collapsed() -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "assistant", "content": "Hi!"},
        {"role": "user", "content": "   "},
        {"role": "user", "content": "  Plan\n\ta   trip  "},
        {"role": "user", "content": "second"},
    ]
    assert derive_title(messages) == "Plan a trip"


def test_title_is_cut_at_sixty_characters_with_an_ellipsis() -> None:
    title = derive_title([{"role": "user", "content": "word " * 30}])
    assert len(title) <= 60
    assert title.endswith("\u2026")
    assert title == ("word " * 12).strip() + "\u2026"
    exact = "x" * 60
    assert derive_title([{"role": "user", "content": exact}]) == exact


def test_title_defaults_when_no_user_text() -> None:
    assert derive_title([]) == "New conversation"
    assert derive_title([{"role": "assistant", "content": "hello"}]) == "New conversation"
    image_only = {"role": "user", "content": [{"type": "binary", "mimeType": "image/png"}]}
    assert derive_title([image_only]) == "New conversation"


def test_text_parts_are_read_not_only_strings() -> None:
    message = {
        "role": "user",
        "content": [
            {"type": "binary", "mimeType": "image/png", "data": "AAAA"},
            {"type": "text", "text": "What is"},
            {"type": "text", "text": " in this picture?"},
            {"type": "text", "text": 42},
            "stray",
        ],
    }
    assert message_text(message) == "What is in this picture?"
    assert derive_title([message]) == "What is in this picture?"
    assert derive_preview([message]) == "What is in this picture?"


def test_objects_with_attributes_work_like_dicts() -> None:
    part = SimpleNamespace(type="text", text="from an object")
    message = SimpleNamespace(role="user", content=[part])
    assert derive_title([message]) == "from an object"
    assert message_text(SimpleNamespace()) == ""
    assert message_text({"content": 7}) == ""


def test_preview_is_the_latest_message_with_text_cut_at_120() -> None:
    messages = [
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "answer " * 40},
        {"role": "assistant", "content": "", "toolCalls": [{"id": "c1"}]},
        {"role": "assistant", "content": None},
    ]
    preview = derive_preview(messages)
    assert len(preview) <= 120
    assert preview.startswith("answer answer")
    assert preview.endswith("\u2026")
    assert derive_preview([]) == ""
    assert derive_preview([{"role": "assistant", "content": "   "}]) == ""


def test_preview_reads_the_latest_message_whatever_its_role() -> None:
    # As the seed ("an excerpt of the latest message") and the predecessor (no role filter)
    # define it: a thread whose last turn is a tool result or a system note previews that.
    tool_last = [
        {"role": "user", "content": "Find flights"},
        {"role": "tool", "toolCallId": "c1", "content": '  {"flights":\n 3}  '},
    ]
    assert derive_preview(tool_last) == '{"flights": 3}'
    system_last = [
        {"role": "assistant", "content": "Done."},
        {"role": "system", "content": [{"type": "text", "text": "Context trimmed."}]},
    ]
    assert derive_preview(system_last) == "Context trimmed."
    assert derive_preview([{"role": "tool", "content": "only a tool"}]) == "only a tool"
    assert derive_preview([{"content": "no role at all"}]) == "no role at all"
