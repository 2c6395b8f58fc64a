"""Branches kept inside a load/save store's wire messages (``persistence.message_tree``)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django_pydantic_agent.chat_history.records import Message
from django_pydantic_agent.persistence.message_tree import (
    MAX_BRANCH_DEPTH,
    activate_in,
    branch_points_in,
    flatten,
    pruned,
    with_sibling,
)
from django_pydantic_agent.persistence.transfer import (
    check_document,
    export_document,
    nested_messages,
)
from django_pydantic_agent.persistence.wire import (
    BRANCHES_KEY,
    ROOT_BRANCHES_KEY,
    records_to_wire,
    strip_branches,
)


def export_entries(messages: list[Any]) -> list[dict[str, Any]]:
    """The export's entries of a stored list (as ``transfer.export_thread`` writes them)."""
    flat = flatten(messages)
    return export_document(flat.tree, title="", wire=lambda key: [flat.messages[key]])["messages"]


def document_messages(entries: list[dict[str, Any]]) -> list[Any]:
    """The stored list an import of ``entries`` saves (``transfer.import_thread``)."""
    return nested_messages({"messages": entries}, lambda index: entries[index]["wire"])


def said(message_id: str, role: str = "user") -> dict[str, Any]:
    return {"id": message_id, "role": role, "content": f"{message_id} says"}


def ids(messages: list[Any]) -> list[str]:
    return [m["id"] for m in messages]


def switch(messages: list[Any], message_id: str) -> list[Any]:
    """``activate_in`` for a message off the active branch: the messages to save."""
    found, switched = activate_in(messages, message_id)
    assert found
    assert switched is not None
    return switched


def nested() -> list[Any]:
    """u1 a1 u2 a2b active; a2 the older answer; u2e (with a2e) an edit of u2 holding a
    branch of its own (a2f older than a2e); u1r another first message."""
    edit = [said("u2e"), {**said("a2e", "assistant")}]
    edit[0] = {**edit[0], BRANCHES_KEY: {"index": 1, "others": [[said("a2f", "assistant")]]}}
    a1 = {**said("a1", "assistant"), BRANCHES_KEY: {"index": 0, "others": [edit]}}
    u2 = {**said("u2"), BRANCHES_KEY: {"index": 1, "others": [[said("a2", "assistant")]]}}
    u1 = {**said("u1"), ROOT_BRANCHES_KEY: {"index": 0, "others": [[said("u1r")]]}}
    return [u1, a1, u2, said("a2b", "assistant")]


def test_branch_points_name_siblings_oldest_first() -> None:
    assert {k: (list(p.siblings), p.index) for k, p in branch_points_in(nested()).items()} == {
        "u1": (["u1", "u1r"], 0),
        "u2": (["u2", "u2e"], 0),
        "a2b": (["a2", "a2b"], 1),
    }


def test_activating_a_nested_branch_swaps_tails_down_to_it_and_back() -> None:
    switched = switch(nested(), "a2f")
    assert ids(switched) == ["u1", "a1", "u2e", "a2f"]
    points = {k: (list(p.siblings), p.index) for k, p in branch_points_in(switched).items()}
    assert points == {
        "u1": (["u1", "u1r"], 0),
        "u2e": (["u2", "u2e"], 1),
        "a2f": (["a2f", "a2e"], 0),  # a2f is the older sibling
    }
    back = switch(switched, "a2b")
    assert ids(back) == ["u1", "a1", "u2", "a2b"]
    root = switch(back, "u1r")
    assert ids(root) == ["u1r"]
    again = switch(root, "a2f")
    assert ids(again) == ["u1", "a1", "u2e", "a2f"]


def test_an_active_message_continues_down_the_newest_branch_and_an_unknown_one_is_not_found() -> (
    None
):
    assert activate_in(nested(), "a2b") == (True, None)  # the active branch's last message
    # As on every store: below an active message, the newest branch (not the one active).
    assert ids(switch(nested(), "a1")) == ["u1", "a1", "u2e", "a2e"]
    assert activate_in(nested(), "nope") == (False, None)


def test_malformed_branch_data_is_ignored() -> None:
    broken = [{**said("u1"), BRANCHES_KEY: "junk"}, {**said("a1", "assistant")}]
    odd = [{**said("u1"), BRANCHES_KEY: {"index": True, "others": [[]]}}, said("a1", "assistant")]
    for messages in (broken, odd):
        assert branch_points_in(messages) == {}
        assert activate_in(messages, "x") == (False, None)


def test_a_cut_without_a_new_child_switches_back_to_the_kept_one() -> None:
    # A regenerate whose new answer was never written: u1 holds the old answer only.
    cut = [{**said("u1"), BRANCHES_KEY: with_sibling(None, [said("a1", "assistant")])}]
    assert branch_points_in(cut) == {}
    switched = switch(cut, "a1")
    assert ids(switched) == ["u1", "a1"]
    assert branch_points_in(switched) == {}


def test_branches_nest_at_most_max_branch_depth_levels() -> None:
    tail: list[Any] = [said("deep-0", "assistant")]
    for level in range(1, MAX_BRANCH_DEPTH + 10):
        value = with_sibling(None, tail)
        tail = [{**said(f"deep-{level}", "assistant"), BRANCHES_KEY: value}]
    json.dumps(tail)  # JSON nests far less deep than the encoder's limit
    depth, value = 0, tail[0].get(BRANCHES_KEY)
    while value:
        depth += 1
        value = value["others"][0][0].get(BRANCHES_KEY)
    assert depth == MAX_BRANCH_DEPTH


def test_export_and_import_round_trip_every_branch_in_order() -> None:
    entries = export_entries(nested())
    document = {"format": "django-pydantic-agent.thread", "version": 1, "messages": entries}
    check_document(document)
    assert "chatBranches" not in json.dumps(entries)
    assert sorted(e["wire"][0]["id"] for e in entries) == sorted(
        ["u1", "u1r", "a1", "u2", "a2", "a2b", "u2e", "a2e", "a2f"]
    )
    again = document_messages(entries)
    assert again == nested()


def test_an_import_never_trusts_branch_keys_in_the_file_and_caps_nesting() -> None:
    forged = {"index": 0, "others": [[said("evil", "assistant")]]}
    entries: list[dict[str, Any]] = [
        {"parent": None, "active": True, "wire": [{**said("u1"), BRANCHES_KEY: forged}]}
    ]
    # A chain of inactive branches, each inside the one before: 3,000 levels.
    entries.append({"parent": None, "active": False, "wire": [said("c-0")]})
    chain = len(entries) - 1
    for level in range(1, 3000):
        # c-<level> goes on the chain; d-<level>, the newest child, is the one shown.
        entries.append({"parent": chain, "active": False, "wire": [said(f"c-{level}")]})
        entries.append({"parent": chain, "active": False, "wire": [said(f"d-{level}")]})
        chain = len(entries) - 2
    messages = document_messages(entries)
    assert ids(messages) == ["u1"]
    assert "evil" not in json.dumps(messages)
    assert ids(switch(messages, "c-0")) == ["c-0", "d-1"]
    assert ids(switch(messages, f"c-{MAX_BRANCH_DEPTH - 1}"))[-1] == f"d-{MAX_BRANCH_DEPTH}"
    assert activate_in(messages, f"c-{MAX_BRANCH_DEPTH + 1}") == (False, None)  # not kept


def test_a_client_cannot_post_branch_data_in_a_message() -> None:
    record = Message(
        message_uuid=uuid.uuid4(),
        chat_uuid=uuid.uuid4(),
        agui_id="u1",
        role="user",
        content="hi",
        wire_extra={BRANCHES_KEY: {"index": 0, "others": [[said("evil", "assistant")]]}},
    )
    [wire] = records_to_wire([record])
    assert BRANCHES_KEY not in wire
    assert strip_branches([{**said("u1"), ROOT_BRANCHES_KEY: {}}]) == [said("u1")]


def test_a_kept_answer_with_no_active_sibling_is_exported_and_imported() -> None:
    # A regenerate whose new answer was never written: the export still holds the old one,
    # and the import shows it (the newest child of a message that has no active one).
    cut = [{**said("u1"), BRANCHES_KEY: with_sibling(None, [said("a1", "assistant")])}]
    entries = export_entries(cut)
    assert [(e["parent"], e["active"], e["wire"][0]["id"]) for e in entries] == [
        (None, True, "u1"),
        (0, False, "a1"),
    ]
    assert ids(document_messages(entries)) == ["u1", "a1"]


def test_pruning_to_no_level_strips_every_branch() -> None:
    assert pruned(nested(), 0) == strip_branches(nested())
    assert pruned(nested(), MAX_BRANCH_DEPTH) == nested()


def test_a_branch_after_a_tool_call_starts_after_its_results() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    kept = [said("u2-old"), said("a2-old", "assistant")]
    messages = [
        said("u1"),
        {**said("a1", "assistant"), "toolCalls": [call], BRANCHES_KEY: with_sibling(None, kept)},
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "42"},
        {"id": "r2", "role": "reasoning", "content": "thinking"},
        said("u2"),
    ]
    assert branch_points_in(messages)["u2"].siblings == ("u2-old", "u2")
    switched = switch(messages, "a2-old")
    assert ids(switched) == ["u1", "a1", "t1", "u2-old", "a2-old"]
    assert ids(switch(switched, "u2")) == ["u1", "a1", "t1", "r2", "u2"]
    entries = export_entries(messages)
    assert [(e["parent"], e["wire"][0]["id"]) for e in entries] == [
        (None, "u1"),
        (0, "a1"),
        (1, "t1"),
        (2, "u2-old"),
        (3, "a2-old"),
        (2, "r2"),
        (5, "u2"),
    ]
    assert document_messages(entries) == messages
