"""contrib.chat's markdown renderer in Chromium: what it builds, and what it never lets through.

``markdown.mjs`` imports ``static/agent_chat/modules/markdown.js`` from the example server and
renders each case; hostile input must come out as text (no element the source named, no
``javascript:`` or ``data:`` link, nothing executed), and a streamed 10,000-word answer must
render each finished block once (its first block is the same node at the end) and end exactly
as one render of the whole text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.nodejs import run_node
from tests.e2e.test_browser import artifacts  # noqa: F401  (the $E2E_ARTIFACTS fixture)
from tests.example_project.support import RunningServer

pytestmark = pytest.mark.e2e


def test_markdown_renders_safely_and_incrementally(
    example_server: RunningServer,
    node_scripts: Path,
    chromium: str,
    artifacts: Path,  # noqa: F811
) -> None:
    report = run_node(node_scripts, "markdown.mjs", example_server.url, env={"CHROMIUM": chromium})
    (artifacts / "markdown-report.json").write_text(json.dumps(report, indent=2))
    assert "error" not in report, report.get("error")
    assert report["pageErrors"] == []
    steps = {step["step"]: step for step in report["steps"]}
    cases = steps["cases"]
    html = cases["out"]

    assert html["heading"] == '<h3 class="md-h1">Title</h3><h4 class="md-h2">Sub <em>em</em></h4>'
    assert html["emphasis"] == (
        "<p>Some <strong>bold</strong>, <em>em</em>, <em>em</em>, <del>gone</del> and "
        "<code>a &lt; b</code> here.</p>"
    )
    assert html["arithmetic"] == "<p>I asked the calculator, and 12 * (3 + 4) = 84.</p>"
    assert html["snake"] == "<p>call snake_case_name and 2<em>3</em>4</p>"
    assert html["list"] == (
        "<ul><li>one</li><li>two<ul><li>nested</li></ul></li><li>three</li></ul>"
    )
    assert html["ordered"] == '<ol start="3"><li>three</li><li>four</li></ol>'
    assert html["quote"] == "<blockquote><p>quoted<br>text</p></blockquote>"
    assert "<table>" in html["table"]
    assert '<th scope="col" style="text-align: left;">Name</th>' in (html["table"])
    assert '<td style="text-align: right;">2</td>' in html["table"]
    assert '<td style="text-align: left;"><code>tea</code></td>' in html["table"]
    assert "<code data-language=\"python\">print('&lt;b&gt;hi&lt;/b&gt;')</code>" in html["code"]
    assert 'aria-label="Copy code"' in html["code"]
    assert html["link"] == (
        '<p>See <a href="https://example.com/a?b=1" rel="noopener noreferrer" target="_blank">'
        'the docs</a> and <a href="https://example.org/x" rel="noopener noreferrer" '
        'target="_blank">https://example.org/x</a>.</p>'
    )
    # Only absolute http(s) links: the others keep their text and lose the link.
    assert "<a" not in html["javascriptLink"]
    assert "<a" not in html["relativeLink"]
    assert html["image"] == (
        '<p><a href="https://example.com/p.png" rel="noopener noreferrer" target="_blank">'
        "pixel</a></p>"
    )
    # No HTML passes through: tags are text, and nothing ran.
    for name in ("html", "htmlBlock"):
        assert "<img" not in html[name]
        assert "<script" not in html[name]
        assert "<iframe" not in html[name]
        assert "<div" not in html[name]
        assert "&lt;" in html[name]
    assert cases["owned"] is None
    assert html["escaped"] == "<p>*not em* and &lt;b&gt;</p>"
    assert html["unclosed"] == "<p>**bold never closes and `code never closes</p>"

    # What the drawer shows of a markdown title or preview: the text, none of the syntax.
    assert steps["plain"]["out"] == {
        "heading": "What does notes.txt say?",
        "inline": "Use print() and see the docs or not.",
        "ordered": "3. pack 4. go",
        "code": "Run this: print('hi')",
        "html": "<b>not bold</b> & <script>x</script>",
        "cut": "…ends with **notes.tx",
    }

    stream = steps["stream"]
    assert stream["words"] >= 10_000
    assert stream["firstBlockSurvived"] is True, "a finished block was rendered again"
    assert stream["fullFirstBlockSurvived"] is False
    assert stream["sameAsOneRender"] is True
