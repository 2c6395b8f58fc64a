"""The id alphabet shared by thread, run and attachment ids."""

from __future__ import annotations

import pytest

from django_pydantic_agent.agui.ids import ID_RULE, MAX_ID_LENGTH, is_valid_id


@pytest.mark.parametrize(
    "value", ["t", "a b", "ünï-😀", "a?b#c", "%2F", "a\\b", "...", "x" * MAX_ID_LENGTH]
)
def test_printable_ids_without_a_slash_are_valid(value: str) -> None:
    assert is_valid_id(value)


@pytest.mark.parametrize(
    "value",
    ["", ".", "..", "a/b", "\x00", "a\nb", "\t", "\ud800", "\u200b", "\u202e", "\xa0", "x" * 201],
)
def test_everything_else_is_not(value: str) -> None:
    assert not is_valid_id(value)


def test_non_strings_are_not_ids() -> None:
    assert not is_valid_id(5)
    assert not is_valid_id(None)


def test_the_rule_names_the_limits() -> None:
    assert str(MAX_ID_LENGTH) in ID_RULE
    assert "'/'" in ID_RULE
