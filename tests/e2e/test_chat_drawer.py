"""contrib.chat's thread drawer in Chromium: the default store (SQLite, and PostgreSQL when
``POSTGRES_URL`` is set) and the Memory Service.

``chat_drawer.mjs`` logs in as a user with 60 stored threads and a hostile one
(``store_drawer.py``), loads the second page with the keyboard and scrolls the drawer to the
oldest thread, renames it (the refresh keeps every page); searches a word of a message (found
with its word marked on the default store; the Memory Service searches titles only, and the
drawer says so), a word of a hostile title and one of a hostile message (shown as text, never
run); archives a thread, finds it under Archived after a reload, brings it back; exports the
open thread as Markdown and as JSON and reads the downloaded files; opens the drawer at 360 px
in dark mode; and, told by the server (an injected 400) that its store cannot archive, stops
offering Archive. Screenshots and the JSON report go to ``$E2E_ARTIFACTS``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.nodejs import run_page_script
from tests.e2e.test_browser import artifacts, memory_service_server  # noqa: F401  (fixtures)
from tests.e2e.test_workers import fresh_database
from tests.example_project.support import (
    EXAMPLE_DIR,
    RunningServer,
    example_env,
    serve_example_workers,
)

pytestmark = pytest.mark.e2e

USERNAME = "drawer"
PASSWORD = "drawer-password"
COUNT = 60
STORE_DRAWER = Path(__file__).resolve().parent / "store_drawer.py"


@pytest.fixture(params=["default", "memory-service", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningServer]:
    """The example server on each store (the memory-service one is shared with test_browser);
    ``postgres``: the default store on a fresh PostgreSQL database (full-text search there)."""
    if request.param == "postgres":
        postgres_url = request.getfixturevalue("postgres_url")
        with (
            fresh_database(postgres_url) as database_url,
            serve_example_workers(tmp_path, database_url=database_url, count=1) as (one,),
        ):
            yield one
        return
    name = "example_server" if request.param == "default" else "memory_service_server"
    yield request.getfixturevalue(name)


def test_the_drawer_pages_searches_archives_and_exports_in_chromium(
    server: RunningServer,
    node_scripts: Path,
    chromium: str,
    artifacts: Path,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:
    kind = "memory-service" if "memory" in request.node.name else "default"
    prefix = f"drawer-{request.node.callspec.params['server'].split('-')[0]}"
    server.add_user(USERNAME, PASSWORD)
    stored = subprocess.run(
        [sys.executable, str(STORE_DRAWER), USERNAME, prefix, str(COUNT)],
        cwd=EXAMPLE_DIR,
        env=server.env or example_env(server.database, AGENT_STORE=kind),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert stored.returncode == 0, stored.stderr

    report, steps = run_page_script(
        node_scripts,
        "chat_drawer.mjs",
        server.url,
        USERNAME,
        PASSWORD,
        str(artifacts),
        prefix,
        str(COUNT),
        artifacts=artifacts,
        name=prefix,
        chromium=chromium,
    )

    # One page of 50, then the rest: every thread, once, down to the oldest.
    first = steps["first"]
    assert first["count"] == 50
    assert first["more"] is True
    assert first["moreTag"] == "BUTTON"
    assert first["searchLabel"] == "Search conversations"
    keyboard = steps["keyboard-more"]
    assert keyboard["count"] == COUNT + 1
    assert keyboard["focused"] == keyboard["firstNew"]
    scrolled = steps["scrolled"]
    assert scrolled["count"] == scrolled["unique"] == COUNT + 1
    assert scrolled["more"] is False
    assert scrolled["last"] == f"{prefix}-00"

    # A refresh after a rename shows as many threads as before, not only the first page.
    refreshed = steps["refresh-keeps-pages"]
    assert refreshed["count"] == COUNT + 1
    assert refreshed["more"] is False

    quokka = steps["search-message"]
    if kind == "default":
        assert first["searchHint"] == "Finds words in titles and messages."
        assert quokka["ids"] == [f"{prefix}-07"]
        assert quokka["titles"] == ["Trip 07"]
        assert quokka["snippets"] == ["Plan day 7: what about a quokka?"]
        assert quokka["marks"] == ["quokka"]
        assert quokka["announced"] == "Matches for “quokka”: 1."
    else:
        # Titles only: the drawer says so beside the box, and a message's word finds nothing.
        assert first["searchHint"] == "This server searches titles only."
        assert quokka["ids"] == []
        assert quokka["none"] == "No conversations match “quokka”."

    # A hostile title: its word marked, the rest shown as text, nothing run. The snippet of a
    # title match only repeats the title, so the preview (the first message) shows instead.
    hostile = steps["search-hostile"]
    assert hostile["ids"] == [f"{prefix}-hostile"]
    assert hostile["owned"] is None
    assert hostile["elements"] == 0
    assert hostile["titles"][0].startswith("zebrafish <img src=x onerror=")
    assert hostile["snippets"] == []
    assert hostile["marks"] == ["zebrafish"]

    snippet = steps["search-hostile-snippet"]
    assert snippet["owned"] is None
    assert snippet["elements"] == 0
    if kind == "default":
        assert snippet["ids"] == [f"{prefix}-hostile"]
        (text,) = snippet["snippets"]
        assert text.startswith("narwhal <img src=x onerror=")
        assert "<script>window.__owned='snippet'</script>" in text
        assert snippet["marks"] == ["narwhal", "narwhal"]
    else:
        assert snippet["ids"] == []

    assert steps["cleared"]["value"] == ""
    assert steps["cleared"]["count"] == 50

    archive = steps["archive"]
    assert archive["listedAfterArchive"] is False
    assert archive["archivedAnnounced"] == "“Trip 59” archived."
    assert archive["listedAfterReload"] is False
    assert archive["archivedIds"] == [archive["target"]]
    assert archive["unarchiveLabels"] == ["Unarchive “Trip 59”"]
    assert archive["archivedEmpty"] == "No archived conversations."
    assert archive["backAnnounced"] == "“Trip 59” is back in your conversations."
    assert archive["restored"] is True
    assert archive["restoredAfterReload"] is True

    pin = steps["pin"]
    assert pin["canPin"] is (kind == "default")  # the Memory Service store keeps no pins
    if pin["canPin"]:
        assert pin["pinned"] == {
            "first": pin["target"],
            "firstAfterReload": pin["target"],
            "marked": 1,
            "pressed": "true",
        }

    exported = steps["export"]
    assert exported["exportHiddenOnNewChat"] is True
    assert exported["markdown"]["name"] == "thread.md"
    assert "Plan day 7: what about a quokka?" in exported["markdown"]["text"]
    assert "Trip 07" in exported["markdown"]["text"]
    assert exported["json"]["name"] == "thread.json"
    document = json.loads(exported["json"]["text"])
    assert document["format"] == "django-pydantic-agent.thread"
    assert document["title"] == "Trip 07"
    assert "Plan day 7: what about a quokka?" in json.dumps(document)

    narrow = steps["narrow"]
    assert narrow["scrollWidth"] <= narrow["clientWidth"], "the page scrolls sideways at 360 px"
    assert narrow["searchVisible"] is True
    assert narrow["markBackground"] == "rgb(107, 89, 0)"  # the dark theme's mark
    refused = steps["archive-refused"]
    assert refused["error"] == (
        f"Could not archive “{refused['title']}”: "
        "This server's conversation store cannot archive threads."
    )
    assert refused["archiveButtons"] == 0
    assert refused["toggleHidden"] is True
    for path in report["screenshots"]:
        assert Path(path).stat().st_size > 5_000
