"""Upgrading from the predecessor, django-pydantic-agent 0.28.3, keeps every record.

For real: a virtualenv with ``django-pydantic-agent==0.28.3`` (``.venv-predecessor/`` in the
repository root, built on first use) fills a fresh database through its own stores
(``predecessor_fill.py``); then ``python -m django migrate`` with our package upgrades that
same database, and our stores read everything back (``upgrade_read.py``), compared field by
field with what the predecessor read back from its own stores. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
PREDECESSOR_VENV = REPO / ".venv-predecessor"
PREDECESSOR_REQUIREMENTS = (
    "django-pydantic-agent==0.28.3",
    f"Django=={django.__version__}",
    "pydantic-ai-harness==0.62.0",
    "psycopg[binary]>=3.1",
)
POSTGRES_URL = os.environ.get(
    "UPGRADE_POSTGRES_URL", "postgres://postgres:postgres@127.0.0.1:5432/postgres"
)
FILL = Path(__file__).with_name("predecessor_fill.py")
STEPS = (
    "0006_successor_schema",
    "0007_copy_predecessor_data",
    "0008_drop_predecessor_columns",
    "0010_storedmessage_wire",
    "0011_one_message_shape",
    "0012_one_message_shape_columns",
    "0013_branches",
    "0014_thread_search_and_archive",
    "0015_spend_and_usage",
    "0016_message_agui_id_index",
    "0017_storedagentrun_resumes",
    "0018_lazy_search_index",
    "0019_storedsummary",
    "0020_storedmessage_no_conversation_index",
    "0021_storedfeedback",
    "0022_pins_and_tags",
    "0023_storedrunusage_estimated",
    "0024_storedshare",
    "0025_webhook_deliveries",
)


@pytest.fixture(scope="session")
def predecessor_python() -> Path:
    """The Python of a virtualenv holding 0.28.3, built with pip from PyPI when missing."""
    python = PREDECESSOR_VENV / "bin" / "python"
    marker = PREDECESSOR_VENV / ".installed"
    wanted = "\n".join(PREDECESSOR_REQUIREMENTS)
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(PREDECESSOR_VENV)], check=True)
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *PREDECESSOR_REQUIREMENTS],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"installing the predecessor failed:\n{result.stderr}"
    marker.write_text(wanted)
    return python


@contextlib.contextmanager
def _postgres_database() -> Iterator[str]:
    """A fresh, uniquely named PostgreSQL database, dropped afterwards."""
    import psycopg

    name = f"dpa_upgrade_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {POSTGRES_URL} is needed (UPGRADE_POSTGRES_URL): {exc}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two fresh databases of one vendor: one for the upgrade, one to compare its schema with."""
    if request.param == "sqlite":
        yield (
            f"sqlite:///{tmp_path / 'upgraded.sqlite3'}",
            f"sqlite:///{tmp_path / 'fresh.sqlite3'}",
        )
        return
    with _postgres_database() as upgraded, _postgres_database() as fresh:
        yield upgraded, fresh


def _ours(database_url: str, media: Path, *args: str) -> str:
    """Run ``python <args>`` with our package on the given database; return its stdout."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DJANGO_SETTINGS_MODULE": "tests.e2e.upgrade_settings",
        "UPGRADE_DATABASE_URL": database_url,
        "UPGRADE_MEDIA": str(media),
    }
    result = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _predecessor(python: Path, database_url: str, media: Path, out: Path, *extra: str) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    command = [str(python), str(FILL), "--database", database_url, "--media", str(media)]
    result = subprocess.run(
        [*command, "--out", str(out), *extra],
        cwd=out.parent,  # not the repository root: our package must not shadow 0.28.3
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"the predecessor script failed:\n{result.stderr}"


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _without_new_nones(read: Any, written: Any) -> Any:
    """``read`` without the keys a newer pydantic-ai adds to its dumps with the value ``None``
    (``model_id``, ``canonical_system``, ...) where ``written``, the predecessor's, has none:
    a field the reader's release defines is not a record that changed."""
    if isinstance(read, dict) and isinstance(written, dict):
        return {
            key: _without_new_nones(value, written.get(key))
            for key, value in read.items()
            if key in written or value is not None
        }
    if isinstance(read, list) and isinstance(written, list) and len(read) == len(written):
        return [_without_new_nones(r, w) for r, w in zip(read, written, strict=True)]
    return read


def _assert_same_owner(written: dict[str, Any], read: dict[str, Any]) -> None:
    who = written["name"]
    assert read["owner_id"] == written["owner_id"], who
    assert read["list"] == written["list"], f"{who}: the thread list differs"
    assert read["conversations"].keys() == written["conversations"].keys(), who
    for thread_id, messages in written["conversations"].items():
        assert read["conversations"][thread_id] == messages, f"{who}: {thread_id} differs"
    assert len(read["attachments"]) == len(written["attachments"]), who
    for before, after in zip(written["attachments"], read["attachments"], strict=True):
        assert after == before, f"{who}: attachment {before['id']} differs"
    assert read["memory"] == written["memory"], f"{who}: memory files differ"
    assert read["receipts"] == written["receipts"], f"{who}: memory receipts differ"
    for before, after in zip(written["runs"], read["runs"], strict=True):
        for key in before:
            assert _without_new_nones(after[key], before[key]) == before[key], (
                f"{who}: {before['run']['run_id']} {key} differs"
            )
    assert read["children"] == written["children"], who


def test_upgrade_from_0_28_3_keeps_every_record(
    predecessor_python: Path, database_urls: tuple[str, str], tmp_path: Path
) -> None:
    upgraded, fresh = database_urls
    media = tmp_path / "blobs"
    written_path = tmp_path / "written.json"
    _predecessor(predecessor_python, upgraded, media, written_path)
    written = _load(written_path)
    assert len(written["owners"]) == 4
    assert sum(len(o["conversations"]) for o in written["owners"]) == 12
    assert sum(len(m) for o in written["owners"] for m in o["conversations"].values()) == 256

    output = _ours(upgraded, media, "-m", "django", "migrate", "--noinput")
    for step in STEPS:
        assert f"django_pydantic_agent_store.{step}... OK" in output, output
    assert "0001_initial" not in output, "the predecessor's own migrations must count as applied"

    _ours(upgraded, media, "-m", "tests.e2e.upgrade_read", "--schema", str(tmp_path / "a.json"))
    _ours(fresh, media, "-m", "django", "migrate", "--noinput")
    _ours(fresh, media, "-m", "tests.e2e.upgrade_read", "--schema", str(tmp_path / "b.json"))
    assert _load(tmp_path / "a.json") == _load(tmp_path / "b.json"), (
        "an upgraded database's schema differs from a fresh one's"
    )

    read_path = tmp_path / "read.json"
    _ours(upgraded, media, "-m", "tests.e2e.upgrade_read", str(written_path), str(read_path))
    read = _load(read_path)
    for before, after in zip(written["owners"], read["owners"], strict=True):
        _assert_same_owner(before, after)
    assert read["namespace_memory"] == written["namespace_memory"]

    assert "storedmemory" not in read["content_types"], read["content_types"]
    assert "conversationattachment" not in read["content_types"], read["content_types"]

    afterwards = read["afterwards"]
    assert afterwards["kept_row_pks"], "appending rewrote the migrated message rows"
    # Every migrated row is a record row holding the messages it was read from, verbatim.
    assert afterwards["appended_loads_verbatim"]
    assert afterwards["saved_wire"] == afterwards["appended"]
    assert afterwards["reupload_blob"] == written["owners"][0]["attachments"][0]["blob"], (
        "re-uploading migrated bytes did not reuse their blob (hash lost?)"
    )
    assert afterwards["memory_write_existed"] is True
    assert afterwards["quoting"], "the fill wrote no message to search for"
    assert afterwards["searched"] == afterwards["quoting"], "a migrated text is not found"


def test_rolling_back_to_0005_gives_the_predecessor_its_data_again(
    predecessor_python: Path, database_urls: tuple[str, str], tmp_path: Path
) -> None:
    database, _ = database_urls
    media = tmp_path / "blobs"
    _predecessor(predecessor_python, database, media, tmp_path / "written.json")
    _ours(database, media, "-m", "django", "migrate", "--noinput")

    output = _ours(
        database, media, "-m", "django", "migrate", "django_pydantic_agent_store", "0005"
    )
    for step in STEPS:
        assert f"Unapplying django_pydantic_agent_store.{step}... OK" in output, output

    reread = tmp_path / "reread.json"
    _predecessor(
        predecessor_python, database, media, reread, "--reread", str(tmp_path / "written.json")
    )
    assert _load(reread) == _load(tmp_path / "written.json")
