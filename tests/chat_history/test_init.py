"""The package imports without Django and exposes the seed's names."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import django_pydantic_agent.chat_history as chat_history


def test_import_loads_no_django_and_no_asgiref() -> None:
    code = (
        "import django_pydantic_agent.chat_history, django_pydantic_agent.chat_history.translate, "
        "django_pydantic_agent.chat_history.storage_agent, sys\n"
        "bad = sorted(m for m in sys.modules if m in ('django', 'asgiref') "
        "or m.startswith(('django.', 'asgiref.')))\n"
        "assert not bad, bad\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_every_public_name_is_importable() -> None:
    names = chat_history.__all__
    local = [n for n in names if n not in chat_history._LAZY]
    for name in local:
        assert getattr(chat_history, name) is not None
    assert set(dir(chat_history)) >= set(names)


def test_unknown_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        chat_history.Nope  # noqa: B018


def test_lazy_names_resolve_from_their_modules() -> None:
    import importlib

    for name, module in chat_history._LAZY.items():
        owner = importlib.import_module(f"django_pydantic_agent.chat_history.{module}")
        assert getattr(chat_history, name) is getattr(owner, name)
        assert name in chat_history.__all__
