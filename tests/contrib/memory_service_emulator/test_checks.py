"""The emulator's system checks name the bad setting and the fix."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import checks
from django.test import override_settings

from django_pydantic_agent.contrib.memory_service_emulator.checks import E001, E002


def _ids() -> list[str]:
    return [
        message.id for message in checks.run_checks() if message.id and "emulator" in message.id
    ]


def test_the_test_settings_pass() -> None:
    assert _ids() == []


def test_use_tz_is_required() -> None:
    with override_settings(USE_TZ=False):
        assert _ids() == [E001]


@pytest.mark.parametrize(
    "value",
    [["TOKENS"], {"TOKEN": ["a"]}, {"TOKENS": "dev-token"}],
)
def test_malformed_setting(value: Any) -> None:
    with override_settings(MEMORY_SERVICE_EMULATOR=value):
        messages = [m for m in checks.run_checks() if m.id == E002]
    assert len(messages) == 1
    assert "MEMORY_SERVICE_EMULATOR" in messages[0].msg
    assert messages[0].hint


def test_a_valid_setting_passes() -> None:
    with override_settings(MEMORY_SERVICE_EMULATOR={"TOKENS": ["t"], "ALLOW_NEVER_TRIGGER": True}):
        assert _ids() == []
