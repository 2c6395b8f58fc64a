"""Serve a Pydantic-AI agent over AG-UI from Django, with durable chat history.

The store contracts and shipped stores are re-exported here from
``django_pydantic_agent.persistence``; importing the package needs no ``django.setup()``.

The re-exports are lazy (PEP 562): ``persistence`` imports Django, and the Django-free layers
(``django_pydantic_agent.memory_service``, ``django_pydantic_agent.chat_history``) must import
through this package without loading Django or asgiref. A name is resolved on first access,
and so is ``__all__``: the subpackages' own ``__all__`` plus ``__version__``, never a copy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_pydantic_agent.persistence import *  # noqa: F403

__version__ = "1.0.0.dev0"

#: The subpackages whose ``__all__`` this package re-exports, each name from the first that has it.
_REEXPORTED_FROM = ("django_pydantic_agent.persistence",)


def _exported() -> dict[str, str]:
    """Each re-exported name and the subpackage it comes from (imports them: loads Django)."""
    names: dict[str, str] = {}
    for package in _REEXPORTED_FROM:
        for name in importlib.import_module(package).__all__:
            names.setdefault(name, package)
    return names


def __getattr__(name: str) -> Any:
    """Resolve ``__all__`` and the re-exported names on first access, then cache them.

    ``__all__`` is the subpackages' own (plus ``__version__``), sorted; a name is taken from
    the subpackage that exports it. Private names are never looked up there, so tools probing
    for dunders do not load Django.
    """
    if name == "__all__":
        value: Any = sorted([*_exported(), "__version__"])
    elif name.startswith("_") or name not in (exported := _exported()):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        value = getattr(importlib.import_module(exported[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(globals().get("__all__") or __getattr__("__all__")))
