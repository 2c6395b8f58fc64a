"""``agent_store_purge_memory``: counts on stdout, problems on stderr, exit codes."""

from __future__ import annotations

import io

import pytest

pytest.importorskip(
    "pydantic_ai_harness",
    reason='needs the harness extra: pip install -e ".[harness]"',
)

from django.core.management import ManagementUtility, call_command
from django.core.management.base import CommandError

from django_pydantic_agent.contrib.store.models import StoredMemoryFile, StoredMemoryOperation

pytestmark = pytest.mark.django_db


@pytest.fixture
def memory() -> None:
    """Two files and a receipt of owner 42, one file of owner 7."""
    for owner, path in [("42", "u-42/main/MEMORY.md"), ("42", "u-42/main/a.md"), ("7", "x/a.md")]:
        StoredMemoryFile.objects.create(owner_id=owner, path=path, content="x", version="v")
    StoredMemoryOperation.objects.create(
        owner_id="42", operation_id="op", fingerprint="f", existed=False
    )


def _run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("agent_store_purge_memory", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.usefixtures("memory")
def test_a_dry_run_counts_and_changes_nothing() -> None:
    out, err = _run("42", "--dry-run")

    assert out == "Would delete 2 memory file(s) of owner '42'.\n"
    assert err == ""
    assert StoredMemoryFile.objects.count() == 3


@pytest.mark.usefixtures("memory")
def test_a_purge_removes_exactly_that_owners_memory() -> None:
    out, err = _run("42")

    assert out == "Deleted 2 memory file(s) of owner '42'.\n"
    assert err == ""
    assert list(StoredMemoryFile.objects.values_list("owner_id", flat=True)) == ["7"]
    assert not StoredMemoryOperation.objects.exists()


@pytest.mark.usefixtures("memory")
@pytest.mark.parametrize("dry_run", [True, False])
def test_an_owner_without_memory_is_reported_on_stderr(dry_run: bool) -> None:
    out, err = _run("u-42", *(["--dry-run"] if dry_run else []))

    assert "0 memory file(s) of owner 'u-42'" in out
    assert "No memory is stored under owner 'u-42'" in err
    assert StoredMemoryFile.objects.count() == 3


@pytest.mark.parametrize("owner", ["", "  ", " 42"])
def test_a_blank_or_padded_owner_id_fails_with_a_clear_message(owner: str) -> None:
    with pytest.raises(CommandError, match="is empty or has surrounding whitespace"):
        _run(owner)


def test_a_missing_owner_id_exits_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        ManagementUtility(["manage.py", "agent_store_purge_memory"]).execute()
    assert exit_info.value.code != 0
    assert "owner_id" in capsys.readouterr().err
