"""``chat_history.tree``: the branch rules every store loads its parents and order into."""

from __future__ import annotations

import pytest

from django_pydantic_agent.chat_history.tree import BranchPoint, Tree, fork_end


def regenerated() -> Tree[str]:
    """u1 a1 u2, then a2 and its regenerate a2b (active); u2e an edit of u2 with answer a2e."""
    return Tree.of(
        [
            ("u1", None, "u1", True),
            ("a1", "u1", "a1", True),
            ("u2", "a1", "u2", True),
            ("a2", "u2", "a2", False),
            ("a2b", "u2", "a2b", True),
            ("u2e", "a1", "u2e", False),
            ("a2e", "u2e", "a2e", False),
        ]
    )


def test_the_active_branch_runs_down_the_active_nodes_from_a_first_message() -> None:
    tree = regenerated()
    assert tree.active == ["u1", "a1", "u2", "a2b"]
    assert tree.children["u2"] == ["a2", "a2b"]  # oldest first, in the order added
    assert tree.siblings("u2") == ["u2", "u2e"]
    assert tree.siblings("u1") == ["u1"]
    orphan: Tree[str] = Tree.of([("x", None, "x", False), ("y", "x", "y", True)])
    assert orphan.active == []  # an active node below an inactive one starts no branch


def test_find_is_the_active_message_else_the_newest() -> None:
    tree: Tree[int] = Tree.of([(1, None, "same", False), (2, None, "same", False)])
    assert tree.find("same") == 2
    tree = Tree.of([(1, None, "same", True), (2, None, "same", False)])
    assert tree.find("same") == 1
    assert tree.find("missing") is None
    assert tree.find("x", label=lambda key: "x" if key == 1 else None) == 1


def test_a_path_continues_down_the_newest_branch_below_the_message() -> None:
    tree = regenerated()
    assert tree.path("a2") == ["u1", "a1", "u2", "a2"]
    assert tree.path("u2e") == ["u1", "a1", "u2e", "a2e"]
    # Below an active message too: the newest branch, whichever is active.
    assert tree.path("a1") == ["u1", "a1", "u2e", "a2e"]
    tree.activate("a2")
    assert tree.active == ["u1", "a1", "u2", "a2"]
    assert tree.path("u2") == ["u1", "a1", "u2", "a2b"]


def test_a_path_through_a_loop_of_parents_ends() -> None:
    tree: Tree[str] = Tree()
    tree.add("a", "b")
    tree.add("b", "a")
    assert tree.path("a") == ["b", "a"]


def test_branch_points_are_the_active_messages_with_siblings() -> None:
    tree = regenerated()
    assert tree.branch_points() == {
        "u2": BranchPoint(siblings=("u2", "u2e"), index=0),
        "a2b": BranchPoint(siblings=("a2", "a2b"), index=1),
    }
    assert list(tree.branch_points()) == ["u2", "a2b"]  # down the active branch
    # A label names each message; one it cannot name is left out.
    named = tree.branch_points(lambda key: None if key == "a2" else key.upper())
    assert named == {
        "U2": BranchPoint(siblings=("U2", "U2E"), index=0),
        "A2B": BranchPoint(siblings=("A2B",), index=0),
    }
    assert tree.branch_points(lambda key: None if key == "a2b" else key) == {
        "u2": BranchPoint(siblings=("u2", "u2e"), index=0)
    }


def test_grow_cut_and_activate_move_the_tip() -> None:
    tree: Tree[str] = Tree()
    for key in ("u1", "a1"):
        tree.grow(key, key)
    tree.cut("a1")  # a regenerate: the next message is a sibling of a1
    tree.grow("a1b", "a1b")
    assert tree.parent["a1b"] == "u1"
    assert tree.active == ["u1", "a1b"]
    tree.cut("nowhere")
    tree.cut("a1")  # off the active branch: nothing
    assert tree.active == ["u1", "a1b"]
    tree.activate("a1")
    assert tree.active == ["u1", "a1"]


def test_descendants_and_the_depth_first_order() -> None:
    tree = regenerated()
    assert tree.descendants(["u2"]) == {"u2", "a2", "a2b"}
    assert tree.descendants([]) == set()
    assert tree.depth_first() == ["u1", "a1", "u2", "a2", "a2b", "u2e", "a2e"]


def test_the_export_shape_names_parents_by_index() -> None:
    tree = regenerated()
    assert tree.shape() == [
        ("u1", None, True),
        ("a1", 0, True),
        ("u2", 1, True),
        ("a2", 2, False),
        ("a2b", 2, True),
        ("u2e", 1, False),
        ("a2e", 5, False),
    ]
    reordered = tree.shape(["u1", "a1", "u2e", "a2e", "u2", "a2b", "a2"])
    assert [(parent, active) for _, parent, active in reordered] == [
        (None, True),
        (0, True),
        (1, False),
        (2, False),
        (1, True),
        (4, True),
        (4, False),
    ]


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("message_id", "end"),
    [("u1", 1), ("a1", 4), ("t1", 3), ("u2", 5), ("nope", None)],
)
def test_a_fork_keeps_a_message_and_the_results_of_its_calls(
    message_id: str, end: int | None
) -> None:
    messages = [
        {"id": "u1", "role": "user", "content": "hi"},
        {"id": "a1", "role": "assistant", "toolCalls": [CALL, {**CALL, "id": "c2"}]},
        {"id": "t1", "role": "tool", "toolCallId": "c1", "content": "1"},
        {"id": "t2", "role": "tool", "toolCallId": "c2", "content": "2"},
        {"id": "u2", "role": "user", "content": "more"},
    ]
    assert fork_end(messages, message_id) == end
