"""Every page of ``docs/`` is listed where a reader looks for it.

The three lists are written by hand: the site's navigation (``mkdocs.yml``), the home page's
"Where to go next" (``docs/index.md``) and the README's "Documentation". A page missing from
one of them is a page a reader of that list never finds.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}


def _links(text: str, prefix: str = "") -> set[str]:
    """The ``.md`` targets of the markdown links in ``text`` (anchors dropped), under ``prefix``."""
    found = re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", text)
    return {target.removeprefix(prefix) for target in found if target.startswith(prefix)}


def test_every_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    listed = set(re.findall(r":\s*(\S+\.md)\s*$", nav, re.MULTILINE))

    assert sorted(PAGES - listed) == []
    assert sorted(listed - PAGES) == []


def test_every_page_is_listed_on_the_home_page() -> None:
    listed = _links((DOCS / "index.md").read_text(encoding="utf-8"))

    assert sorted(PAGES - {"index.md"} - listed) == []


def test_every_page_is_listed_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    documentation = readme.split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    listed = _links(documentation, prefix="docs/")

    assert sorted(PAGES - {"index.md"} - listed) == []
