"""The page's ES modules carry no dead requests: every method the transport and the drawer's
API offer is called by another module of the page (a helper nobody calls drifts from the
server's routes unnoticed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

STATIC = (
    Path(__file__).resolve().parents[3]
    / "django_pydantic_agent"
    / "contrib"
    / "chat"
    / "static"
    / "agent_chat"
)
# A method of the object literal a factory returns: indented four spaces, `name(` or
# `async name(`.
_METHOD = re.compile(r"^    (?:async )?([A-Za-z_]\w*)\(", re.MULTILINE)


def _methods(module: str) -> list[str]:
    return _METHOD.findall((STATIC / "modules" / module).read_text(encoding="utf-8"))


def _callers(module: str) -> str:
    others = [*STATIC.glob("*.js"), *(STATIC / "modules").glob("*.js")]
    return "\n".join(path.read_text(encoding="utf-8") for path in others if path.name != module)


@pytest.mark.parametrize("module", ["transport.js", "drawer_api.js"])
def test_every_request_helper_is_called_by_the_page(module: str) -> None:
    methods = _methods(module)
    callers = _callers(module)

    assert len(methods) >= 3, f"no methods read from {module}: the pattern is out of date"
    unused = [name for name in methods if not re.search(rf"\.{name}\(", callers)]
    assert unused == [], f"{module} offers requests the page never makes: {unused}"
