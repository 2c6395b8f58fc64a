"""Package-wide gates: import without settings, and a sorted ``__all__`` in every package.

Packages are discovered by walking ``django_pydantic_agent/``, so a new subpackage is covered
the moment it lands.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parent.parent / "django_pydantic_agent"


def _packages() -> list[str]:
    """Every package under ``django_pydantic_agent/`` (a directory with ``__init__.py``)."""
    names = []
    for init in sorted(PACKAGE_DIR.rglob("__init__.py")):
        relative = init.parent.relative_to(PACKAGE_DIR.parent)
        if "migrations" in relative.parts:
            continue
        names.append(".".join(relative.parts))
    return names


def _init(package: str) -> Path:
    return PACKAGE_DIR.parent.joinpath(*package.split("."), "__init__.py")


def _declared_all(init: Path) -> list[str] | None:
    """The literal ``__all__`` assigned in ``init``, or ``None`` when it assigns none."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(target, ast.Name) and target.id == "__all__" for target in targets):
            names = ast.literal_eval(value)
            assert isinstance(names, list | tuple), f"{init}: __all__ must be a literal list"
            return list(names)
    return None


def _exported_all(package: str) -> list[str] | None:
    """The ``__all__`` of ``package``: its literal one, or, for the root package, which builds
    it from its subpackages' on first access, the one it answers."""
    declared = _declared_all(_init(package))
    if declared is None and package == "django_pydantic_agent":
        return list(importlib.import_module(package).__all__)
    return declared


PACKAGES = _packages()
# ``models`` and ``admin`` packages (the admin registers models) need the app registry by
# design; every other package must import bare.
IMPORTABLE = [name for name in PACKAGES if name.rsplit(".", 1)[-1] not in {"models", "admin"}]
# Namespace-only packages (``contrib``, ``management``) declare no ``__all__``; that is fine.
EXPORTING = [name for name in PACKAGES if _exported_all(name) is not None]

_IMPORT_EACH = """
import importlib, json, sys, traceback
results = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException:
        results[name] = traceback.format_exc()
    else:
        results[name] = None
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def imports_without_settings() -> dict[str, str | None]:
    """Import every package in one fresh interpreter without settings: name -> traceback."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, *IMPORTABLE],
        env=env,
        cwd=PACKAGE_DIR.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    outcome: dict[str, str | None] = json.loads(result.stdout.splitlines()[-1])
    return outcome


def test_packages_are_discovered() -> None:
    assert PACKAGES[0] == "django_pydantic_agent"
    assert "django_pydantic_agent" in EXPORTING
    assert len(PACKAGES) > 1


@pytest.mark.parametrize("package", IMPORTABLE)
def test_imports_without_settings(
    package: str, imports_without_settings: dict[str, str | None]
) -> None:
    """Importing a package needs neither ``DJANGO_SETTINGS_MODULE`` nor ``django.setup()``."""
    assert imports_without_settings[package] is None, imports_without_settings[package]


def _isort_style_key(name: str) -> tuple[int, list[tuple[int, int | str]]]:
    """Ruff's RUF022 order: SCREAMING_CASE, then CamelCase, then the rest; natural within each."""
    if name.upper() == name and any(c.isalpha() for c in name):
        category = 0
    elif name[:1].isupper():
        category = 1
    else:
        category = 2
    chunks: list[tuple[int, int | str]] = [
        (0, int(chunk)) if chunk.isdigit() else (1, chunk)
        for chunk in re.split(r"(\d+)", name)
        if chunk
    ]
    return category, chunks


def test_isort_style_key_matches_ruff_order() -> None:
    names = ["abc", "a10", "AgentDeps", "Zed", "CONST", "AGUIServer", "a9", "__version__"]
    expected = ["CONST", "AGUIServer", "AgentDeps", "Zed", "__version__", "a9", "a10", "abc"]
    assert sorted(names, key=_isort_style_key) == expected


@pytest.mark.parametrize("package", EXPORTING)
def test_all_is_sorted_and_unique(package: str) -> None:
    names = _exported_all(package)
    assert names is not None
    # The order ruff's RUF022 enforces, so this gate and the linter never disagree.
    assert names == sorted(names, key=_isort_style_key), f"{package}.__all__ is not sorted"
    assert len(names) == len(set(names)), f"{package}.__all__ has duplicates"


def test_the_root_all_is_the_subpackages_own_plus_the_version() -> None:
    import django_pydantic_agent as root
    from django_pydantic_agent import persistence

    assert _declared_all(_init("django_pydantic_agent")) is None  # no hand copy to drift
    assert sorted(root.__all__) == sorted([*persistence.__all__, "__version__"])
    for name in persistence.__all__:
        assert getattr(root, name) is getattr(persistence, name)
