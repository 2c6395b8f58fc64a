"""The shape of the ``agui`` package: configuration flows down, never back up to the server.

The server composes; every other module is importable on its own, and no handler is given (or
keeps) the server. These tests read the imports from the source, so a cycle hidden under
``TYPE_CHECKING`` counts too.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
from pathlib import Path

import pytest

import django_pydantic_agent.agui as agui_package
from django_pydantic_agent.agui import AccessPolicy, AGUIServer, AGUIView
from django_pydantic_agent.agui.attachments import AttachmentEndpoints
from django_pydantic_agent.agui.branches import BranchEndpoints
from django_pydantic_agent.agui.feedback import FeedbackEndpoints
from django_pydantic_agent.agui.reattach import RunEndpoints
from django_pydantic_agent.agui.run import DurableRunEndpoint, StatelessRunEndpoint
from django_pydantic_agent.agui.threads import ThreadEndpoints
from django_pydantic_agent.agui.transfer import TransferEndpoints
from django_pydantic_agent.agui.usage import UsageEndpoint
from django_pydantic_agent.contrib.store.stores import (
    DefaultAttachmentStore,
    DefaultConversationStore,
)
from tests.agui.agents import text_agent

PACKAGE = "django_pydantic_agent.agui"
MODULES = sorted(f"{PACKAGE}.{info.name}" for info in pkgutil.iter_modules(agui_package.__path__))
HANDLERS = [
    StatelessRunEndpoint,
    DurableRunEndpoint,
    RunEndpoints,
    ThreadEndpoints,
    BranchEndpoints,
    FeedbackEndpoints,
    TransferEndpoints,
    AttachmentEndpoints,
    UsageEndpoint,
    AGUIView,
]


def imported_modules(module_name: str) -> set[str]:
    """Every module ``module_name``'s source imports, anywhere in the file, as absolute names."""
    module = importlib.import_module(module_name)
    source = Path(inspect.getfile(module)).read_text()
    package = module_name if module_name == PACKAGE else module_name.rsplit(".", 1)[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([package.rsplit(".", node.level - 1)[0], base]).rstrip(".")
            names.add(base)
            # ``from django_pydantic_agent.agui import server`` imports the module too.
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_every_module_imports_on_its_own() -> None:
    assert f"{PACKAGE}.server" in MODULES
    assert len(MODULES) >= 15
    for name in MODULES:
        assert importlib.import_module(name).__name__ == name


@pytest.mark.parametrize("module_name", MODULES)
def test_only_the_package_init_imports_the_server(module_name: str) -> None:
    importers = {PACKAGE, f"{PACKAGE}.server"}
    if module_name not in importers:
        assert f"{PACKAGE}.server" not in imported_modules(module_name)


def test_the_end_of_run_transcript_is_gone() -> None:
    # Runs persist through chat_history's storage agent; the event fold exists once, there.
    assert f"{PACKAGE}.transcript" not in MODULES
    assert importlib.util.find_spec(f"{PACKAGE}.transcript") is None


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda handler: handler.__name__)
def test_handlers_take_no_server_argument(handler: type) -> None:
    parameters = inspect.signature(handler.__init__).parameters
    assert "server" not in parameters
    for parameter in parameters.values():
        assert "AGUIServer" not in str(parameter.annotation)


def test_no_handler_keeps_the_server() -> None:
    server = AGUIServer(
        text_agent(),
        conversation_store=DefaultConversationStore(),
        attachment_store=DefaultAttachmentStore(),
        access=AccessPolicy(csrf_exempt=True),
    )
    handlers = set()
    for pattern in server.urlpatterns:
        view = pattern.callback
        # The view carries its server as a marker for system checks, and holds nothing else of it.
        assert view.agui_server is server
        assert all(value is not server for key, value in vars(view).items() if key != "agui_server")
        for method in view._handlers.values():
            handlers.add(getattr(method, "__self__", method))
    assert {type(handler) for handler in handlers} == {
        DurableRunEndpoint,
        RunEndpoints,
        ThreadEndpoints,
        BranchEndpoints,
        FeedbackEndpoints,
        TransferEndpoints,
        AttachmentEndpoints,
        UsageEndpoint,
    }
    for handler in handlers:
        assert all(value is not server for value in vars(handler).values())
