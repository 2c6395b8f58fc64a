"""The layers of DESIGN.md §2 hold: at import time, and in every module's import statements.

``memory_service`` and ``chat_history`` are Django-free layers, proven in a fresh interpreter
(``sys.modules`` after the import). The static walk reads every module of the package with
``ast``, function-level and ``TYPE_CHECKING`` imports included, and fails on an arrow the
design forbids, naming the module, the line and the import.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "django_pydantic_agent"
PACKAGE_DIR = ROOT / PACKAGE


def _ours(*parts: str) -> str:
    return ".".join((PACKAGE, *parts))


MEMORY_SERVICE = _ours("memory_service")
CHAT_HISTORY = _ours("chat_history")
PERSISTENCE = _ours("persistence")
AGUI = _ours("agui")
VERCEL_AI = _ours("vercel_ai")
CONTRIB = _ours("contrib")
STORE = _ours("contrib", "store")
EMULATOR = _ours("contrib", "memory_service_emulator")
TESTING = _ours("testing")


@dataclass(frozen=True, kw_only=True)
class Rule:
    """Modules under ``layer`` may not import anything under a prefix in ``forbidden``.

    ``only_ours``, when set, is the complete list of this package's subtrees the layer may
    import (anything else of ours is forbidden too).
    """

    layer: str
    forbidden: tuple[str, ...] = ()
    only_ours: tuple[str, ...] | None = None
    why: str


RULES = (
    Rule(
        layer=MEMORY_SERVICE,
        forbidden=("django", "asgiref", "ag_ui", "pydantic_ai"),
        only_ours=(MEMORY_SERVICE,),
        why="memory_service is httpx + pydantic only",
    ),
    Rule(
        layer=CHAT_HISTORY,
        forbidden=("django", "asgiref"),
        only_ours=(CHAT_HISTORY, MEMORY_SERVICE),
        why="chat_history never imports Django; it may use memory_service and ag_ui",
    ),
    Rule(
        layer=PERSISTENCE,
        forbidden=(CONTRIB, AGUI, TESTING),
        why="persistence imports no models (they live in contrib) and no transport",
    ),
    Rule(
        layer=AGUI,
        forbidden=(CONTRIB, TESTING, VERCEL_AI),
        why="agui reaches stores through persistence's protocols only, and knows no other wire",
    ),
    Rule(
        layer=VERCEL_AI,
        forbidden=(CONTRIB, TESTING),
        why="a transport sits on agui's run engine and reaches stores through its protocols",
    ),
    Rule(
        layer=EMULATOR,
        only_ours=(EMULATOR,),
        why="the emulator implements the wire spec on its own and imports nothing above it",
    ),
    Rule(
        layer=STORE,
        forbidden=(AGUI, TESTING, EMULATOR),
        why="contrib.store builds on persistence, not on the transport",
    ),
    Rule(
        layer=PACKAGE,
        forbidden=("tests",),
        why="the package never imports the test suite",
    ),
)

# Outside contrib nothing imports contrib; nothing but testing imports testing (it needs pytest).
OUTSIDE_CONTRIB = Rule(
    layer=PACKAGE,
    forbidden=(CONTRIB,),
    why="only contrib apps define models, and nothing outside contrib imports from it",
)
OUTSIDE_TESTING = Rule(
    layer=PACKAGE,
    forbidden=(TESTING,),
    why="testing holds the public test suites and needs pytest; the package never uses it",
)


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(f"{prefix}.")


def rules_for(module: str) -> list[Rule]:
    """Every rule that binds ``module``."""
    rules = [rule for rule in RULES if _within(module, rule.layer)]
    if not _within(module, CONTRIB):
        rules.append(OUTSIDE_CONTRIB)
    if not _within(module, TESTING):
        rules.append(OUTSIDE_TESTING)
    return rules


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported_names(source: str, *, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """``(line, dotted name)`` of every import in ``source``, at any depth.

    ``from a import b`` yields ``a.b`` (``b`` may be a submodule); ``import_module("x")``
    and ``import_string("x")`` with a literal argument count as imports of ``x``.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node)
            found.extend(
                (node.lineno, base if alias.name == "*" else f"{base}.{alias.name}")
                for alias in node.names
            )
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Name) and node.func.id in _DYNAMIC)
                or (isinstance(node.func, ast.Attribute) and node.func.attr in _DYNAMIC)
            )
        ):
            found.append((node.lineno, node.args[0].value))
    return found


_DYNAMIC = frozenset({"import_module", "import_string"})


def violations(source: str, *, module: str, is_package: bool = False) -> list[str]:
    """One line per forbidden arrow in ``source``: ``module:line imports name (why)``."""
    problems = []
    for line, name in imported_names(source, module=module, is_package=is_package):
        for rule in rules_for(module):
            bad = any(_within(name, prefix) for prefix in rule.forbidden)
            if rule.only_ours is not None and _within(name, PACKAGE):
                bad = bad or not any(_within(name, allowed) for allowed in rule.only_ours)
            if bad:
                problems.append(f"{module}:{line} imports {name} ({rule.why})")
    return problems


def _package_modules() -> list[Path]:
    return sorted(path for path in PACKAGE_DIR.rglob("*.py") if "migrations" not in path.parts)


def test_every_module_respects_the_layers() -> None:
    problems: list[str] = []
    for path in _package_modules():
        problems += violations(
            path.read_text(encoding="utf-8"),
            module=_module_name(path),
            is_package=path.name == "__init__.py",
        )
    assert not problems, "Forbidden imports (DESIGN.md §2):\n" + "\n".join(problems)


def test_the_walk_covers_the_whole_package() -> None:
    modules = {_module_name(path) for path in _package_modules()}
    assert {PACKAGE, MEMORY_SERVICE, PERSISTENCE, AGUI, VERCEL_AI, STORE, EMULATOR, TESTING} <= (
        modules
    )
    assert _ours("memory_service", "client") in modules


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        (
            _ours("memory_service", "client"),
            "def f():\n    from django.conf import settings\n",
            "memory_service.client:2 imports django.conf.settings",
        ),
        (
            _ours("memory_service", "client"),
            "from django_pydantic_agent.persistence import StoreError\n",
            "imports django_pydantic_agent.persistence.StoreError (memory_service is",
        ),
        (
            _ours("memory_service", "client"),
            "import ag_ui.core\n",
            "memory_service.client:1 imports ag_ui.core",
        ),
        (
            _ours("chat_history", "storage_agent"),
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import asgiref.sync\n",
            "chat_history.storage_agent:3 imports asgiref.sync",
        ),
        (
            _ours("chat_history", "storage_agent"),
            "from django_pydantic_agent.agui import AGUIServer\n",
            "imports django_pydantic_agent.agui.AGUIServer (chat_history never",
        ),
        (
            _ours("persistence", "memory_service"),
            "from django_pydantic_agent.contrib.store.models import StoredMessage\n",
            "persistence.memory_service:1 imports django_pydantic_agent.contrib.store.models",
        ),
        (
            _ours("checks"),
            "def check():\n    from django_pydantic_agent.contrib.store import stores\n",
            "checks:2 imports django_pydantic_agent.contrib.store.stores (only contrib",
        ),
        (
            _ours("contrib", "memory_service_emulator", "views"),
            "from django_pydantic_agent.memory_service.keys import escape\n",
            "imports django_pydantic_agent.memory_service.keys.escape (the emulator",
        ),
        (
            _ours("contrib", "memory_service_emulator", "views"),
            "from ..store import models\n",
            "views:1 imports django_pydantic_agent.contrib.store.models (the emulator",
        ),
        (
            _ours("agui", "server"),
            "import importlib\nimportlib.import_module('django_pydantic_agent.contrib.store')\n",
            "agui.server:2 imports django_pydantic_agent.contrib.store (agui reaches",
        ),
        (
            _ours("agui", "server"),
            "from django_pydantic_agent.testing import contracts\n",
            "agui.server:1 imports django_pydantic_agent.testing.contracts",
        ),
    ],
)
def test_a_forbidden_arrow_is_reported_with_module_line_and_import(
    module: str, source: str, expected: str
) -> None:
    problems = violations(source, module=module)
    assert problems, f"{source!r} in {module} was not reported"
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize(
    ("module", "source"),
    [
        (_ours("chat_history", "storage_agent"), "from ag_ui.core import RunAgentInput\n"),
        (_ours("chat_history", "records"), "from django_pydantic_agent.memory_service import x\n"),
        (
            _ours("persistence", "memory_service"),
            "from django_pydantic_agent.chat_history import x",
        ),
        (_ours("contrib", "store", "stores"), "from django.db import models\n"),
        (_ours("contrib", "memory_service_emulator", "views"), "from .protocol import HTTPError\n"),
        (_ours("agui", "server"), "from django_pydantic_agent.persistence import is_persistent\n"),
    ],
)
def test_an_allowed_arrow_passes(module: str, source: str) -> None:
    assert violations(source, module=module) == []


_LOADED = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
layers = ("django", "asgiref", "ag_ui", "pydantic_ai")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in layers)))
"""


def _foreign_modules_after_importing(module: str) -> list[str]:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", _LOADED, module],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout.splitlines()[-1])
    return loaded


def test_importing_the_root_package_loads_no_django() -> None:
    assert _foreign_modules_after_importing(PACKAGE) == []


def test_memory_service_loads_no_django_asgiref_or_ag_ui() -> None:
    assert _foreign_modules_after_importing(MEMORY_SERVICE) == []


@pytest.mark.skipif(
    importlib.util.find_spec(CHAT_HISTORY) is None, reason="chat_history has not landed yet"
)
def test_chat_history_loads_no_django_or_asgiref() -> None:
    loaded = _foreign_modules_after_importing(CHAT_HISTORY)
    assert [name for name in loaded if name.split(".")[0] in ("django", "asgiref")] == []


def test_the_root_package_resolves_its_names_lazily_and_refuses_unknown_ones() -> None:
    import django_pydantic_agent as root
    from django_pydantic_agent import persistence

    assert set(root.__all__) <= set(dir(root))
    assert root.ScopedConversationStore is persistence.ScopedConversationStore
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchStore'"):
        root.NoSuchStore  # noqa: B018


def _module_arrows() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (at any depth, dynamic ones included).

    A package's ``__init__`` is a face: an import of a name from a package leads to nothing
    (the face hands names on), an import of one of its submodules leads to that module.
    """
    paths = {_module_name(path): path for path in _package_modules()}
    faces = {name for name, path in paths.items() if path.name == "__init__.py"}
    modules = set(paths) - faces
    arrows: dict[str, set[str]] = {}
    for name in modules:
        path = paths[name]
        found = imported_names(path.read_text(encoding="utf-8"), module=name)
        targets = set()
        for _, imported in found:
            while imported and imported not in modules and imported not in faces:
                imported = imported.rpartition(".")[0]  # a name defined in a module
            if imported in modules and imported != name:
                targets.add(imported)
        arrows[name] = targets
    return arrows


def circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """Every set of modules that import one another in a loop (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(arrows.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(arrows):
        if module not in index:
            visit(module)
    return found


def test_no_two_modules_import_each_other_in_a_loop() -> None:
    """The house has no circle (DESIGN.md §7): what two modules both need goes below both."""
    assert circles(_module_arrows()) == []


def test_a_circle_is_found() -> None:
    arrows = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(arrows) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
