"""Key derivations are byte-identical to the reference (spec §2 test vectors)."""

from __future__ import annotations

from uuid import UUID

import pytest

from django_pydantic_agent.chat_history import (
    DEDUPLICATION_KEY_LENGTH,
    chat_deduplication_key,
    locator_key,
    normalize_participant_id,
    participant_id,
    session_deduplication_key,
)
from django_pydantic_agent.chat_history.keys import emitter_for_role

U = UUID("12345678-1234-5678-1234-567812345678")


@pytest.mark.parametrize(
    ("thread_id", "expected"),
    [
        ("thread-1", "685d228f3faaa32ea410a8c3e7f6618f4ed4e31df8f2611b921b7b5a998350ca"),
        ("Thread-1", "dd45ce5aeb8c1167794c16f3636e2f2e6ac446963207b43ba782e18c1047e814"),
        ("über/线程", "51964807e66d36317c001b09ab01e6cc4c373ac4682e16aa8fba86c46edd2b96"),
    ],
)
def test_chat_deduplication_key_vectors(thread_id: str, expected: str) -> None:
    assert chat_deduplication_key(U, thread_id) == expected
    assert len(expected) == DEDUPLICATION_KEY_LENGTH == 64


def test_session_deduplication_key_without_parts() -> None:
    assert (
        session_deduplication_key("chat")
        == "207ae88eb32b146431377f36e6941927789670fd9d46fb6e9a089443096e83eb"
    )


def test_participant_id_vectors() -> None:
    assert participant_id(U) == "ddcbc45ed5383449004fe644"
    assert participant_id(UUID(int=0)) == "374708fff7719dd5979ec875"


def test_participant_id_override_used_only_when_valid() -> None:
    assert participant_id(U, override=" 0123456789ABCDEF01234567 ") == "0123456789abcdef01234567"
    assert participant_id(U, override="nope") == "ddcbc45ed5383449004fe644"


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "",
        "0123456789abcdef0123456g",
        "0x0123456789abcdef012345",
        "-123456789abcdef01234567",
        "aaaaaaaaaaa_aaaaaaaaaaaa",
        "0123456789abcdef012345678",
        "+123456789abcdef01234567",
    ],
)
def test_s85_1_normalize_participant_id_accepts_exactly_24_hex_digits(raw: str | None) -> None:
    assert normalize_participant_id(raw) is None


def test_normalize_participant_id_strips_and_lowers() -> None:
    assert normalize_participant_id(" 0123456789ABCDEF01234567 ") == "0123456789abcdef01234567"


def test_locator_key() -> None:
    assert locator_key("chat", U) == "chat:12345678-1234-5678-1234-567812345678"
    with pytest.raises(ValueError, match="Unknown locator kind 'session'"):
        locator_key("session", U)  # type: ignore[arg-type]


def test_emitter_for_role() -> None:
    assert emitter_for_role("user", "p" * 24) == ("user", "p" * 24)
    assert emitter_for_role("assistant", "p" * 24) == ("agent", None)
